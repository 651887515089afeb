"""Heads shaped like the published driving VLAs' planners (issue 38, item 2), at any size; each reads what its
model's planner reads (head_inputs.py: side inputs) and runs whole on the suffix side:

- `command_modes` (ORION): one plan per planner mode from the query token's state; the frame's route command picks
  the one published (reported as the extras `mode`, `mode_command`).
- `meta_decision` (MindDrive): logits over K meta-action tokens at a named position of the decision pass, read
  through the LLM's lm_head rows of those tokens (`decision_rows`, (K, H): a subset of lm_head.weight); the chosen
  action picks one of K planned modes (`decision`, `decision_logits`); a path per route command beside it.
- `ddim_planner` (ReCogDrive): a small DiT denoising normalised poses in `steps` DDIM steps, cross-attending to the
  whole final sequence, conditioned on its mean, the command, the ego status and the pose history; its noise comes
  from the frame's noise_seed (head_inputs.py), so split and unsplit runs sample the same trajectory.

What each reads was taken from the published inference code (ORION `orion.py` / `orion_head.py`, MindDrive
`minddrive.py`, ReCogDrive `navsim/agents/recogdrive/`); the module trees here are written to that shape at any
width, not copied. Where this differs: ORION's planner is a VAE latent + GRU (a sampled latent), here an MLP per
mode; ReCogDrive's DiT has 16 RoPE/RMSNorm/SwiGLU blocks, here `layers` plain ones with adaLN.
"""

from __future__ import annotations

import math

import torch
from torch import nn

from ...errors import ConfigError, expect
from ...types import NAV_COMMANDS
from .heads import WaypointHead
from .registry import HEADS, register

STEP = 4   # a waypoint step: dx, dy, heading, speed


def _mlp(width_in: int, hidden: int, width_out: int) -> nn.Sequential:
    return nn.Sequential(nn.Linear(width_in, hidden), nn.GELU(), nn.Linear(hidden, width_out))


# ORION's planner modes, in its command2hot order (CARLA's RoadOption - 1; VOID -> lane follow)
ORION_MODES = ["turn left", "turn right", "go straight", "follow lane", "change lane left", "change lane right"]
# MindDrive's speed meta-actions, in its SPEED_MAPPING order (the decision pass's 7 tokens)
MINDDRIVE_SPEEDS = ["maintain_moderate_speed", "stop", "maintain_slow_speed", "speed_up", "slow_down",
                    "maintain_fast_speed", "slow_down_rapidly"]


def _mode_of(command: torch.Tensor, mode_commands: list[str], fallback: str = "follow lane") -> torch.Tensor:
    """command (B, len(NAV_COMMANDS)) one-hot -> (B,) the index in mode_commands of its command; a command with no
    mode of its own ("arrive"), or none known (all zero), takes `fallback`'s."""
    lookup = [mode_commands.index(c) if c in mode_commands else mode_commands.index(fallback) for c in NAV_COMMANDS]
    known = command.sum(dim=1) > 0
    index = torch.tensor(lookup, device=command.device)[command.argmax(dim=1)]
    return torch.where(known, index, mode_commands.index(fallback))


def _check_modes(name: str, modes) -> list[str]:
    expect(isinstance(modes, list) and modes and all(m in NAV_COMMANDS for m in modes) and "follow lane" in modes
           and len(set(modes)) == len(modes), ConfigError,
           f"head {name!r}: mode_commands={modes!r}, expected distinct NAV_COMMANDS names including 'follow lane' "
           f"(the fallback), one per planner mode in the checkpoint's order")
    return list(modes)


@register(HEADS, "command_modes")
class CommandModesHead(WaypointHead):
    """config: num_waypoints, head_hidden, query_tokens; mode_commands (default ORION_MODES): the command each
    planner mode is for. The planner maps the query tokens' states to every mode's plan; the command picks one."""
    side_inputs = ("command",)

    def __init__(self, config: dict, hidden_size: int):
        super().__init__(config)
        self.mode_commands = _check_modes("command_modes", config.get("mode_commands", ORION_MODES))
        self.modes = len(self.mode_commands)
        self.planner = _mlp(hidden_size * self.query_tokens, config["head_hidden"],
                            self.modes * self.num_waypoints * STEP)

    @classmethod
    def from_config(cls, config: dict, hidden_size: int, spec=None) -> "CommandModesHead":
        return cls(cls.checked("command_modes", config, ("num_waypoints", "head_hidden", "query_tokens")), hidden_size)

    def forward(self, query_hidden: torch.Tensor, command: torch.Tensor) -> dict:
        plans = self.planner(query_hidden.flatten(1)).view(-1, self.modes, self.num_waypoints, STEP)  # (B, M, N, 4)
        mode = _mode_of(command, self.mode_commands)                                    # (B,)
        chosen = plans[torch.arange(plans.shape[0], device=plans.device), mode]        # (B, N, 4)
        return {"waypoints": chosen, "mode": mode, "mode_command": [self.mode_commands[int(m)] for m in mode]}


@register(HEADS, "meta_decision")
class MetaDecisionHead(WaypointHead):
    """MindDrive's two heads. Decision: the logits over K meta-action tokens at `decision_position` (default -2:
    the token before the answer's, as MindDrive reads it) of pass `decision_pass`, through `decision_rows` (K, H),
    the lm_head rows of `decision_tokens`; the argmax picks one of K planned modes. Action: the last pass's first
    query token plans every mode (the waypoints); its second, with `path_points` > 0, a path per route command
    (`mode_commands`, default ORION_MODES), reported as the extra `path` ((path_points, 2) positions, m).
    config: num_waypoints, head_hidden, query_tokens (per pass: 2 with a path, else 1 or more); decision_tokens,
    decision_labels (default MINDDRIVE_SPEEDS), decision_pass (0), decision_position (-2), path_points (0)."""
    side_inputs = ("sequence", "command")

    def __init__(self, config: dict, hidden_size: int, per_pass: int):
        super().__init__(config)
        tokens, labels = config.get("decision_tokens"), config.get("decision_labels", MINDDRIVE_SPEEDS)
        expect(isinstance(tokens, list) and tokens and all(isinstance(t, int) and t >= 0 for t in tokens) and
               isinstance(labels, list) and len(labels) == len(tokens), ConfigError,
               f"head 'meta_decision': decision_tokens (token ids) and decision_labels (one per id) must be equal-"
               f"length non-empty lists (got {tokens!r}, {labels!r})")
        self.labels = [str(label) for label in labels]
        self.decision_pass = int(config.get("decision_pass", 0))
        self.position = int(config.get("decision_position", -2))
        self.path_points = int(config.get("path_points", 0))
        self.per_pass = per_pass
        expect(self.path_points == 0 or per_pass >= 2, ConfigError,
               f"head 'meta_decision': a path (path_points={self.path_points}) reads a second query token per pass; "
               f"the prompt has {per_pass}")
        self.decision_rows = nn.Parameter(torch.randn(len(tokens), hidden_size) * hidden_size ** -0.5)  # (K, H)
        width = config["head_hidden"]
        self.planner = _mlp(hidden_size, width, len(tokens) * self.num_waypoints * STEP)
        if self.path_points:
            self.mode_commands = _check_modes("meta_decision", config.get("mode_commands", ORION_MODES))
            self.path = _mlp(hidden_size, width, len(self.mode_commands) * self.path_points * 2)

    @classmethod
    def from_config(cls, config: dict, hidden_size: int, spec=None) -> "MetaDecisionHead":
        config = cls.checked("meta_decision", config, ("num_waypoints", "head_hidden", "query_tokens"))
        passes = spec.num_passes if spec is not None else 1
        expect(0 <= int(config.get("decision_pass", 0)) < passes, ConfigError,
               f"head 'meta_decision': decision_pass={config.get('decision_pass')!r}, the model has {passes} pass(es)")
        return cls(config, hidden_size, config["query_tokens"] // passes)

    def forward(self, query_hidden: torch.Tensor, sequence: torch.Tensor, command: torch.Tensor) -> dict:
        at = sequence[:, self.decision_pass, self.position]                            # (B, H)
        logits = at @ self.decision_rows.t()                                           # (B, K)
        choice = logits.argmax(dim=1)                                                  # (B,)
        action = query_hidden[:, -self.per_pass:]                                      # (B, q, H): the last pass's
        plans = self.planner(action[:, 0]).view(-1, len(self.labels), self.num_waypoints, STEP)   # (B, K, N, 4)
        rows = torch.arange(plans.shape[0], device=plans.device)
        out = {"waypoints": plans[rows, choice], "decision": [self.labels[int(c)] for c in choice],
               "decision_logits": logits}
        if self.path_points:
            paths = self.path(action[:, 1]).view(-1, len(self.mode_commands), self.path_points, 2)
            out["path"] = paths[rows, _mode_of(command, self.mode_commands)].cumsum(dim=1)   # (B, points, 2)
        return out


class _DenoiserBlock(nn.Module):
    """Self-attention over the trajectory, cross-attention to the VLM's sequence, an MLP; each scaled and
    shifted by the condition (adaLN)."""

    def __init__(self, width: int, heads: int):
        super().__init__()
        self.self_attn = nn.MultiheadAttention(width, heads, batch_first=True)
        self.cross_attn = nn.MultiheadAttention(width, heads, batch_first=True)
        self.mlp = _mlp(width, 2 * width, width)
        self.norms = nn.ModuleList(nn.LayerNorm(width, elementwise_affine=False) for _ in range(3))
        self.modulation = nn.Linear(width, 6 * width)

    def forward(self, x: torch.Tensor, memory: torch.Tensor, condition: torch.Tensor) -> torch.Tensor:
        s1, b1, s2, b2, s3, b3 = self.modulation(condition).unsqueeze(1).chunk(6, dim=-1)   # (B, 1, W) each
        h = self.norms[0](x) * (1 + s1) + b1
        x = x + self.self_attn(h, h, h, need_weights=False)[0]
        h = self.norms[1](x) * (1 + s2) + b2
        x = x + self.cross_attn(h, memory, memory, need_weights=False)[0]
        return x + self.mlp(self.norms[2](x) * (1 + s3) + b3)


# ReCogDrive's pose normalisation (NAVSIM): a pose value v in [-1, 1] is (v + 1) / 2 * range + minimum; x, y, heading
RECOGDRIVE_DENORM = [[66.74, -1.57], [42.0, -19.68], [3.53, -1.67]]


@register(HEADS, "ddim_planner")
class DdimPlannerHead(WaypointHead):
    """ReCogDrive's planner shape: a DiT denoising N poses (x, y, heading; normalised to [-1, 1]) in `steps` DDIM
    steps, its memory the whole final sequence, its condition the sequence's mean, the route command, the ego
    status and the newest `history_poses` poses (fewer known: zeros in front, as unknown). eta 1 (ReCogDrive's
    default): each step adds fresh noise, drawn like the start noise from the frame's seeded generator; x0 and
    every step clipped to [-1, 1]. The poses are denormalised (`denorm`: range and minimum per column) and handed
    on as steps: dx, dy, heading, speed = |step| / dt.
    config: num_waypoints, head_hidden (the DiT's width), query_tokens; layers (2), heads (2), steps (5),
    train_steps (100), eta (1.0), clip (true), denorm (RECOGDRIVE_DENORM), history_poses (4), seed."""
    side_inputs = ("sequence", "sequence_mean", "command", "ego_status", "history", "noise_seed")

    def __init__(self, config: dict, hidden_size: int, dt_s: float):
        super().__init__(config)
        width = config["head_hidden"]
        self.steps, self.train_steps, self.history_poses = config["steps"], config["train_steps"], config["history_poses"]
        self.eta, self.clip, self.dt_s = float(config.get("eta", 1.0)), bool(config.get("clip", True)), dt_s
        self.memory_in = nn.Linear(hidden_size, width)
        self.condition_in = nn.Linear(hidden_size + len(NAV_COMMANDS) + 4 + 3 * self.history_poses, width)
        self.time_in = _mlp(width, width, width)
        self.x_in = nn.Linear(3, width)
        self.position = nn.Parameter(torch.randn(self.num_waypoints, width) * 0.02)
        self.blocks = nn.ModuleList(_DenoiserBlock(width, config["heads"]) for _ in range(config["layers"]))
        self.x_out = nn.Linear(width, 3)
        self.register_buffer("denorm", torch.tensor(config.get("denorm", RECOGDRIVE_DENORM)), persistent=False)
        self.register_buffer("alpha_bar", torch.cumprod(1 - _cosine_betas(self.train_steps), dim=0), persistent=False)

    @classmethod
    def from_config(cls, config: dict, hidden_size: int, spec=None) -> "DdimPlannerHead":
        config = cls.checked("ddim_planner", {"layers": 2, "heads": 2, "steps": 5, "train_steps": 100,
                                              "history_poses": 4, **config},
                             ("num_waypoints", "head_hidden", "query_tokens", "layers", "heads", "steps",
                              "train_steps", "history_poses"))
        denorm = config.get("denorm", RECOGDRIVE_DENORM)
        expect(config["head_hidden"] % config["heads"] == 0 and config["steps"] <= config["train_steps"] and
               isinstance(denorm, list) and len(denorm) == 3 and all(len(d) == 2 for d in denorm) and
               0.0 <= float(config.get("eta", 1.0)) <= 1.0, ConfigError,
               f"head 'ddim_planner': head_hidden divisible by heads, steps <= train_steps, denorm 3 x [range, "
               f"minimum], eta in [0, 1] (config {config})")
        return cls(config, hidden_size, spec.waypoint_dt_s if spec is not None else 0.5)

    def timesteps(self) -> list[int]:
        """The DDIM steps' training timesteps, descending, evenly spaced to 0 (100 and 5: 80, 60, 40, 20, 0)."""
        stride = self.train_steps // self.steps
        return [t * stride for t in reversed(range(self.steps))]

    def denoise(self, x: torch.Tensor, t: int, memory: torch.Tensor, condition: torch.Tensor) -> torch.Tensor:
        """-> the predicted noise (B, N, 3) of x (B, N, 3) at timestep t."""
        c = condition + self.time_in(_timestep_embedding(t, condition.shape[-1], condition))
        h = self.x_in(x) + self.position                                                # (B, N, W)
        for block in self.blocks:
            h = block(h, memory, c)
        return self.x_out(h)

    def sample(self, memory, condition, generator: torch.Generator, like: torch.Tensor) -> torch.Tensor:
        """DDIM from seeded noise -> normalised poses (B, N, 3)."""
        def noise():
            return torch.randn(like.shape[0], self.num_waypoints, 3, generator=generator).to(like.device, like.dtype)
        x, times = noise(), self.timesteps()
        for i, t in enumerate(times):
            eps = self.denoise(x, t, memory, condition)
            a_t = self.alpha_bar[t].to(x.dtype)
            a_prev = self.alpha_bar[times[i + 1]].to(x.dtype) if i + 1 < len(times) else x.new_tensor(1.0)
            x0 = (x - (1 - a_t).sqrt() * eps) / a_t.sqrt()
            x0 = x0.clamp(-1, 1) if self.clip else x0
            sigma = self.eta * ((1 - a_prev) / (1 - a_t) * (1 - a_t / a_prev)).sqrt()
            x = a_prev.sqrt() * x0 + (1 - a_prev - sigma ** 2).clamp(min=0).sqrt() * eps
            if i + 1 < len(times) and self.eta > 0:
                x = x + sigma * noise()
            x = x.clamp(-1, 1) if self.clip else x
        return x

    def forward(self, query_hidden, sequence, sequence_mean, command, ego_status, history, noise_seed: int):
        memory = self.memory_in(sequence.flatten(1, 2))                                 # (B, P S, W)
        recent = _last_rows(history, self.history_poses)                                # (B, h, 3)
        condition = self.condition_in(torch.cat([sequence_mean.mean(dim=1), command, ego_status, recent.flatten(1)],
                                                dim=1))                                 # (B, W)
        poses = self.sample(memory, condition, torch.Generator().manual_seed(noise_seed), query_hidden)
        denorm = self.denorm.to(poses.dtype)
        poses = (poses + 1) / 2 * denorm[:, 0] + denorm[:, 1]                          # (B, N, 3) x, y, heading
        steps = poses[..., :2].diff(dim=1, prepend=poses.new_zeros(poses.shape[0], 1, 2))
        speed = steps.norm(dim=-1, keepdim=True) / self.dt_s
        return torch.cat([steps, poses[..., 2:], speed], dim=-1)                       # (B, N, 4)


def _cosine_betas(steps: int, max_beta: float = 0.999) -> torch.Tensor:
    """The cosine schedule (Nichol & Dhariwal 2021): alpha_bar(t) = cos((t/T + 0.008) / 1.008 * pi/2)^2."""
    def alpha_bar(t: float) -> float:
        return math.cos((t + 0.008) / 1.008 * math.pi / 2) ** 2
    return torch.tensor([min(1 - alpha_bar((i + 1) / steps) / alpha_bar(i / steps), max_beta) for i in range(steps)],
                        dtype=torch.float64).float()


def _timestep_embedding(t: int, width: int, like: torch.Tensor) -> torch.Tensor:
    """Sinusoidal embedding of the timestep t -> (1, width)."""
    half = width // 2
    freqs = torch.exp(-math.log(10000.0) * torch.arange(half, dtype=torch.float32) / half) * t
    out = torch.cat([freqs.cos(), freqs.sin(), torch.zeros(width - 2 * half)])
    return out.unsqueeze(0).to(like.device, like.dtype)


def _last_rows(history: torch.Tensor, rows: int) -> torch.Tensor:
    """(B, n, 3) -> (B, rows, 3): the newest `rows` poses, zero (unknown) in front when fewer."""
    history = history[:, -rows:] if rows else history[:, :0]
    missing = rows - history.shape[1]
    if missing > 0:
        history = torch.cat([history.new_zeros(history.shape[0], missing, history.shape[2]), history], dim=1)
    return history
