"""The suffix side of a split Alpamayo frame: VLM blocks [p, L) with their layers of each prompt's KV cache, the
final norm, lm_head and the sampler (the frame's seeded generator: reasoning tokens, then the flow's noise),
expert layers [min(p, L_e), L_e), the expert's norm and action_out_proj, the Euler updates and the trajectory.
Every boundary state is checked on arrival (crossings.py): a non-finite one is refused with its reason."""

from __future__ import annotations

from dataclasses import dataclass

import torch

from ...errors import expect_finite
from ...model.plugins.alpamayo import decode as sampler
from ...model.plugins.alpamayo.decode import Sampling, new_cache, verdict
from ...model.plugins.alpamayo.flow import FlowSettings, euler_step, euler_times, initial_noise, mix, step_time
from .blocks import Stream, expert_spans, expert_velocity, run_expert_blocks, run_vlm_blocks, vlm_logits
from .crossings import (GUIDED, ActionState, ExpertState, PromptState, TokenChoice, TokensState, check_expert,
                        check_prompt, check_tokens)


@dataclass
class FlowState:
    settings: FlowSettings
    times: torch.Tensor              # (steps + 1,) flow times 0 .. 1
    spans: list                      # blocks.ExpertSpan per cache: guided, then route-free
    x: torch.Tensor                  # (1, N, 2) the action state
    step: int = 0                    # the Euler step expected next


class SuffixSide:
    """One frame's suffix work at cut `partition` (checked by the caller)."""

    def __init__(self, model, partition: int, seed: int, sampling: Sampling):
        cfg = model.config
        self.model, self.partition, self.sampling = model, partition, sampling
        self.text = model.vlm.model.language_model
        self.blocks = cfg.vlm.text_config.num_hidden_layers - partition
        self.expert_first = min(partition, model.expert.config.num_hidden_layers)
        self.expert_layers = model.expert.config.num_hidden_layers - self.expert_first
        self.generator = torch.Generator().manual_seed(seed)
        self.banned = cfg.banned
        self.stop_id = cfg.traj_token_ids["future_start"]
        self.streams: dict[int, Stream] = {}
        self.tokens: list[int] = []
        self.done = False
        self.history = None
        self.flow = None

    @property
    def width(self) -> int:
        return self.model.config.vlm.text_config.hidden_size

    def _choose(self, logits: torch.Tensor) -> TokenChoice:
        self.tokens.append(sampler.sample(logits, self.banned, self.sampling, self.generator))
        feed, self.done = verdict(self.tokens, self.stop_id, self.sampling.max_new_tokens)
        return TokenChoice(self.tokens[-1], feed, self.done)

    def prompt(self, state: PromptState) -> TokenChoice | None:
        """A prompt's boundary through blocks [p, L) -> the first token (guided stream; None for the other)."""
        check_prompt(state, self.width)
        cache = new_cache(self.model.vlm)
        hidden = run_vlm_blocks(self.text, self.partition, self.blocks, state.hidden, state.positions, cache, True,
                                state.deepstack)                                                   # (1, S, H)
        self.streams[state.stream] = Stream(cache, state.hidden.shape[1], state.rope_delta)
        if state.stream != GUIDED:
            return None
        self.history = (state.history_xyz, state.history_rot)
        return self._choose(vlm_logits(self.model.vlm, hidden))

    def step(self, state: TokensState) -> TokenChoice | None:
        """Fed tokens' boundary through blocks [p, L) -> the next token, or None (decode over, or the other
        stream)."""
        check_tokens(state, self.width)
        stream = self.streams[state.stream]
        hidden = run_vlm_blocks(self.text, self.partition, self.blocks, state.hidden, state.positions,
                                stream.cache, False)                                                # (1, T, H)
        stream.length += state.hidden.shape[1]
        if state.stream != GUIDED or self.done:
            return None
        return self._choose(vlm_logits(self.model.vlm, hidden))

    def start_flow(self, settings: FlowSettings) -> ActionState:
        """The flow's noise, drawn after the reasoning from the same generator -> step 0's action state."""
        model = self.model
        dtype = model.expert_dtype
        shape = (1, *model.action_space.dims)                                                     # (1, N, 2)
        x = initial_noise(shape, settings, self.generator, dtype)
        times = euler_times(settings)
        spans = expert_spans(self.streams, len(self.tokens), model.action_space.n_waypoints, dtype)
        self.flow = FlowState(settings, times, spans, x)
        return ActionState(x, step_time(times, 0, 1, dtype), 0)

    def expert_step(self, state: ExpertState) -> ActionState | None:
        """The action tokens' boundary through expert layers [p, L_e), norm and action_out_proj per cache; the
        guidance mix; one Euler step -> the next step's action state (None after the last step)."""
        flow, model = self.flow, self.model
        check_expert(state, model.expert.config.hidden_size, len(flow.spans), flow.step)
        velocities = []
        for row, span in enumerate(flow.spans):
            hidden = run_expert_blocks(model.expert, self.expert_first, self.expert_layers,
                                       state.hidden[row:row + 1], span)                           # (1, N, H_e)
            velocities.append(expert_velocity(model, hidden))                                    # (1, N, 2)
        unguided = velocities[1] if len(velocities) > 1 else None
        v = mix(velocities[0], unguided, flow.settings.guidance_weight)                          # (1, N, 2)
        i, dtype = flow.step, model.expert_dtype
        flow.x, flow.step = euler_step(flow.x, flow.times, i, v, dtype), i + 1
        if flow.step == flow.settings.steps:
            return None
        return ActionState(flow.x, step_time(flow.times, i + 1, 1, dtype), i + 1)

    def trajectory(self) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """-> the actions (1, N, 2) at t = 1, xyz (1, N, 3) and rotations (1, N, 3, 3) in the t0 ego frame."""
        actions = self.flow.x
        xyz, rot = self.model.action_space.to_trajectory(actions, *self.history)
        expect_finite(xyz, "nonfinite_output", "Alpamayo trajectory")
        return actions, xyz, rot

