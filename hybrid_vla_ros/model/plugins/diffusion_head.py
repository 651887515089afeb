"""ReCogDrive's planner shape (issue 38, item 2): `ddim_planner`, a small DiT denoising normalised poses in `steps`
DDIM steps, cross-attending to the whole final sequence, conditioned on its mean, the route command, the ego
status and the pose history; its noise comes from the frame's noise_seed (head_inputs.py), so split and unsplit
runs sample the same trajectory.

What it reads, the schedule (cosine, 100 training steps, 5 DDIM steps at 80 ... 0, eta 1, clipping to [-1, 1]) and
the pose normalisation were taken from ReCogDrive's published inference code (`navsim/agents/recogdrive/`); the
module tree here is written to that shape at any width, not copied. Where this differs: its DiT has 16
RoPE/RMSNorm/SwiGLU blocks alternating self- and cross-attention, here `layers` plain blocks doing both, with adaLN.
"""

from __future__ import annotations

import math

import torch
from torch import nn

from ...errors import ConfigError, expect
from ...types import NAV_COMMANDS
from .heads import WaypointHead, mlp as _mlp
from .registry import HEADS, register


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
        # Plain floats, not buffers: a bf16 head would round alpha_bar's first value (0.99937) to 1.0 (0 / 0 at the
        # last step); the sampling runs in float32 whatever the head's dtype.
        self.denorm = [[float(v) for v in row] for row in config.get("denorm", RECOGDRIVE_DENORM)]
        self.alpha_bar = torch.cumprod(1 - _cosine_betas(self.train_steps).double(), dim=0).tolist()

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
        """DDIM from seeded noise -> normalised poses (B, N, 3), float32 (the denoiser runs in the head's dtype)."""
        dtype = self.x_in.weight.dtype

        def noise():
            return torch.randn(like.shape[0], self.num_waypoints, 3, generator=generator).to(like.device)
        x, times = noise(), self.timesteps()
        for i, t in enumerate(times):
            eps = self.denoise(x.to(dtype), t, memory, condition).float()
            last = i + 1 == len(times)
            a_t, a_prev = self.alpha_bar[t], 1.0 if last else self.alpha_bar[times[i + 1]]
            x0 = (x - math.sqrt(1 - a_t) * eps) / math.sqrt(a_t)
            x0 = x0.clamp(-1, 1) if self.clip else x0
            sigma = 0.0 if last else self.eta * math.sqrt((1 - a_prev) / (1 - a_t) * (1 - a_t / a_prev))
            x = math.sqrt(a_prev) * x0 + math.sqrt(max(0.0, 1 - a_prev - sigma ** 2)) * eps
            if sigma > 0:
                x = x + sigma * noise()
            x = x.clamp(-1, 1) if self.clip else x
        return x

    def forward(self, query_hidden, sequence, sequence_mean, command, ego_status, history, noise_seed: int):
        memory = self.memory_in(sequence.flatten(1, 2))                                 # (B, P S, W)
        recent = _last_rows(history, self.history_poses)                                # (B, h, 3)
        condition = self.condition_in(torch.cat([sequence_mean.mean(dim=1), command, ego_status, recent.flatten(1)],
                                                dim=1))                                 # (B, W)
        poses = self.sample(memory, condition, torch.Generator().manual_seed(noise_seed), query_hidden)
        denorm = torch.tensor(self.denorm, device=poses.device)                         # (3, 2) range, minimum
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
