"""The prefix side of a split Alpamayo frame: the vision tower, the token embeddings, VLM blocks [0, p) with their
layers of each prompt's KV cache, expert layers [0, min(p, L_e)) and action_in_proj (the flow time's Fourier
conditioning). It never samples: the suffix sends each token back, and each Euler step's action state.

Its device is its weights' (a GPU prefix: ros/nodes/serving/alpamayo/weights.py): what comes in (the prompt, the
tokens fed back, the action state) is moved there, what goes out (the boundary states) comes back to the CPU,
where the envelope and the suffix take it. M-RoPE positions are computed on the CPU (transformers' rope index
loops in Python) and moved. On the CPU every move is a no-op."""

from __future__ import annotations

import dataclasses

import torch

from ...errors import InputError, expect
from ...model.plugins.alpamayo.decode import Prompt, new_cache, prompt_positions, text_positions
from ...model.plugins.alpamayo.reference import without_route
from .blocks import Stream, embed_prompt, expert_spans, run_expert_blocks, run_vlm_blocks
from .crossings import (GUIDED, UNGUIDED, ActionState, ExpertState, PromptState, TokenChoice, TokensState,
                        check_action)


class PrefixSide:
    """One frame's prefix work at cut `partition` (checked by the caller)."""

    def __init__(self, model, partition: int, vision=None):
        """vision: a VisionCache shared by the frames of one prefix (each keyed image encoded once), or None."""
        self.model, self.partition, self.vision = model, partition, vision
        self.vlm = model.vlm
        self.text = model.vlm.model.language_model
        self.device = self.text.embed_tokens.weight.device   # the prefix always reads the embeddings
        self.expert_layers = min(partition, model.expert.config.num_hidden_layers)
        self.streams: dict[int, Stream] = {}
        self.tokens: list[int] = []     # every token the suffix sampled
        self.held: list[int] = []       # those fed into the guided cache
        self.spans = None
        self.step = 0                   # the Euler step expected next

    def prompt(self, prompt: Prompt, stream: int, history: tuple[torch.Tensor, torch.Tensor]) -> PromptState:
        """Embeddings, image features and blocks [0, p) over a prompt -> its boundary state."""
        _, positions, delta = prompt_positions(self.vlm, prompt, self.model.image_token_id)  # (3, 1, S), CPU
        hidden, deepstack = embed_prompt(self.vlm, on(prompt, self.device), self.vision)   # (1, S, H)
        cache = new_cache(self.vlm)
        hidden = run_vlm_blocks(self.text, 0, self.partition, hidden, positions.to(self.device), cache, True,
                                deepstack)
        self.streams[stream] = Stream(cache, prompt.input_ids.shape[1], delta)
        rest = deepstack.from_block(self.partition) if deepstack is not None else None
        return PromptState(host(hidden), positions, host_deepstack(rest), delta, stream, *history)

    def _feed(self, tokens: list[int], stream: int) -> TokensState:
        """Text tokens on top of a stream's cache through blocks [0, p) -> their boundary state (1, T, H)."""
        state = self.streams[stream]
        ids = torch.tensor([tokens], dtype=torch.long, device=self.device)                  # (1, T)
        positions = text_positions(state.length, len(tokens), state.rope_delta)              # (3, 1, T), CPU
        hidden = self.text.embed_tokens(ids)                                                 # (1, T, H)
        hidden = run_vlm_blocks(self.text, 0, self.partition, hidden, positions.to(self.device), state.cache,
                                False)
        state.length += len(tokens)
        return TokensState(host(hidden), positions, stream)

    def take(self, choice: TokenChoice) -> bool:
        """A sampled token back from the suffix: recorded; True when the prefix feeds it (feed_token)."""
        vocab = self.model.config.vocab_size
        expect(isinstance(choice.token, int) and 0 <= choice.token < vocab, InputError,
               f"split Alpamayo token back from the suffix: {choice.token!r}, expected an id in 0..{vocab - 1}")
        self.tokens.append(choice.token)
        if choice.feed:
            self.held.append(choice.token)
        return choice.feed

    def feed_token(self) -> TokensState:
        """The last token taken through blocks [0, p) -> the next decode step's boundary (1, 1, H)."""
        return self._feed(self.held[-1:], GUIDED)

    def unguided_prompt(self, prompt: Prompt, history) -> PromptState:
        """1.5's guidance: the prompt without its route span, prefilled (images again)."""
        special = self.model.config.special_ids
        ids = without_route(prompt.input_ids, special["route_start"], special["route_end"])    # (1, S')
        return self.prompt(dataclasses.replace(prompt, input_ids=ids), UNGUIDED, history)

    def unguided_feed(self) -> TokensState | None:
        """The reasoning the guided cache holds, fed into the route-free cache in one call (None: no tokens)."""
        return self._feed(list(self.held), UNGUIDED) if self.held else None

    def expert_step(self, action: ActionState) -> ExpertState:
        """action_in_proj(x, t), then expert layers [0, min(p, L_e)) over each cache -> (G, N, H_e)."""
        check_action(action, self.step)
        self.step += 1
        model = self.model
        if self.spans is None:
            self.spans = expert_spans(self.streams, len(self.tokens), model.action_space.n_waypoints,
                                      model.expert_dtype, self.device)
        embeds = model.action_in_proj(action.x.to(self.device), action.t.to(self.device))   # (1, N, H_e)
        rows = [run_expert_blocks(model.expert, 0, self.expert_layers, embeds, span) for span in self.spans]
        return ExpertState(host(torch.cat(rows, dim=0)), action.step)                         # (G, N, H_e)


def on(prompt: Prompt, device: torch.device) -> Prompt:
    """The prompt's tensors on `device` (the vision tower builds its indices on the grid's device)."""
    if prompt.input_ids.device == device:
        return prompt
    return Prompt(prompt.input_ids.to(device), prompt.pixel_values.to(device), prompt.image_grid_thw.to(device),
                  prompt.image_keys)


def host(tensor: torch.Tensor) -> torch.Tensor:
    """A boundary tensor back on the CPU (waits for the GPU: the frame's timing then counts its work)."""
    return tensor if tensor.device.type == "cpu" else tensor.to("cpu")


def host_deepstack(rest):
    """DeepStack's additions still due after the cut, on the CPU."""
    if rest is None or rest.features.device.type == "cpu":
        return rest
    return dataclasses.replace(rest, positions=host(rest.positions), features=host(rest.features))
