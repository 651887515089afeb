"""ReCogDrive's planner (issue 38, items 2 and 5): `ddim_planner`, ReCogDriveDiffusionPlanner's module tree and
inference under the names of its published state dict (a ReCogDrive `.ckpt`'s `agent.action_head.*`, less the
schedule buffers; docs/sources/published_recogdrive.md). Written from the published code's behaviour
(xiaomi-research/recogdrive@79a553b, navsim/agents/recogdrive/recogdrive_diffusion_planner.py, blocks/encoder.py):
nothing of theirs is imported or copied. The DiT is recogdrive_dit.py.

    model                  the DiT (recogdrive_dit.PlannerDiT)
    his_traj_encoder       Mlp 12 -> mlp_hidden -> D over 4 poses (x, y, heading): the 3 before the frame and the
                           current one, (0, 0, 0) in its own frame (NAVSIM's t-3 ... t0)
    ego_status_encoder     Mlp 8 -> mlp_hidden -> D over the 8-d status: command one-hot (left, straight, right,
                           unknown) || velocity (vx, vy) || acceleration (ax, ay), ego frame
    action_encoder         fc1(pose) || sinusoid(t, D) (sin first) -> fc2 -> SiLU -> fc3
    feature_encoder        Linear V -> D over every token's final hidden state (the VLM's last hidden states)
    fusion_projector       Linear 3D -> D over [history || mean of the encoded sequence || encoded pose] per pose
    action_decoder         Mlp output_dim -> mlp_hidden -> 3: the predicted noise
    position_embedding     (N, D), added to the encoded poses
(Mlp: fc1, GELU, LayerNorm `norm`, fc2, as timm's.) Sampling: DDIM on the cosine schedule (100 training steps) at
80, 60, 40, 20, 0; x0 clamped to [-1, 1] and the noise re-derived from it; eta 1 (the published EtaFixed), each step
adding max(sigma, 1e-4) * clip(noise, +-1); the result clamped to [-1, 1] and denormalised with NAVSIM's constants.
Unlike the published planner (unseeded torch.randn), the noise comes from the frame's noise_seed (head_inputs.py),
so split and unsplit runs, and replays, sample the same plan.
"""

from __future__ import annotations

import math

import numpy as np
import torch
from torch import nn

from ...errors import ConfigError, expect
from ...types import NAV_COMMANDS
from .heads import WaypointHead
from .recogdrive_dit import PlannerDiT

# ReCogDrive's pose normalisation (NAVSIM): a pose value v in [-1, 1] is (v + 1) / 2 * range + minimum; x, y, heading
RECOGDRIVE_DENORM = [[66.74, -1.57], [42.0, -19.68], [3.53, -1.67]]
# NAVSIM's driving command one-hot: left, straight, right, unknown; each of NAV_COMMANDS to one of the first three
NAVSIM_COMMANDS = ("left", "straight", "right", "unknown")
_TO_NAVSIM = {"follow lane": 1, "turn left": 0, "turn right": 2, "go straight": 1, "change lane left": 0,
              "change lane right": 2, "arrive": 1}
STATUS_DIM = 8
# the released config (recogdrive_agent.py make_recogdrive_config, dit_type small; planner defaults)
PUBLISHED = {"layers": 16, "heads": 8, "head_dim": 48, "output_dim": 512, "mlp_hidden": 1024, "steps": 5,
             "train_steps": 100, "history_poses": 4}


class Mlp(nn.Module):
    """timm's Mlp with a norm layer: fc1, GELU, LayerNorm, fc2."""

    def __init__(self, width_in: int, hidden: int, width_out: int):
        super().__init__()
        self.fc1, self.norm, self.fc2 = nn.Linear(width_in, hidden), nn.LayerNorm(hidden), nn.Linear(hidden, width_out)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.fc2(self.norm(nn.functional.gelu(self.fc1(x))))


class ActionEncoder(nn.Module):
    def __init__(self, dim: int):
        super().__init__()
        self.fc1, self.fc2, self.fc3 = nn.Linear(3, dim), nn.Linear(2 * dim, dim), nn.Linear(dim, dim)

    def forward(self, poses: torch.Tensor, t: torch.Tensor) -> torch.Tensor:
        """poses (B, N, 3), t (B,) -> (B, N, D)."""
        half = self.fc1.out_features // 2
        exponent = torch.arange(half, dtype=torch.float32, device=t.device) * (-torch.log(torch.tensor(10000.0)) / half)
        angles = t[:, None, None].float() * torch.exp(exponent)                        # (B, 1, D / 2)
        angles = angles.expand(-1, poses.shape[1], -1)
        time = torch.cat([torch.sin(angles), torch.cos(angles)], dim=-1).to(poses.dtype)
        return self.fc3(nn.functional.silu(self.fc2(torch.cat([self.fc1(poses), time], dim=-1))))


def cosine_alpha_bar(train_steps: int) -> list[float]:
    """alpha_bar(t), t = 0 .. train_steps - 1, as the published planner computes it: the iDDPM cosine schedule
    (s = 0.008, betas clipped at 0.999) in float64, the betas stored in float32, their cumulative product in float32.
    Plain floats: a bf16 head would round alpha_bar(0) (0.99937) to 1 (0 / 0 at the last step)."""
    x = np.linspace(0, train_steps + 1, train_steps + 1) / (train_steps + 1)
    alpha_bar = np.cos((x + 0.008) / 1.008 * np.pi * 0.5) ** 2
    betas = torch.tensor(np.clip(1 - alpha_bar[1:] / alpha_bar[:-1], 0, 0.999), dtype=torch.float32)
    return torch.cumprod(1.0 - betas, dim=0).tolist()


class DdimPlannerHead(WaypointHead):
    """ReCogDrive's planner (module docstring). config: num_waypoints (N, the published action_horizon 8),
    head_hidden (D = heads * head_dim), query_tokens (read by no layer: the planner reads the whole sequence);
    layers (16), heads (8), head_dim (48), output_dim (512), mlp_hidden (1024), steps (5), train_steps (100),
    history_poses (4, the current pose included), eta (1.0; 0: the published deterministic DDIM), clip (true: x0
    and the result clamped to [-1, 1]), min_std (1e-4), noise_clip (1.0), denorm (RECOGDRIVE_DENORM), seed.
    Returns the steps (B, N, 4): dx, dy, heading, speed = |step| / dt."""
    side_inputs = ("sequence", "command", "ego_status", "history", "noise_seed")

    def __init__(self, config: dict, hidden_size: int, dt_s: float):
        super().__init__(config)
        dim, hidden = config["head_hidden"], config["mlp_hidden"]
        self.steps, self.train_steps, self.history_poses = config["steps"], config["train_steps"], config["history_poses"]
        self.eta, self.clip, self.dt_s = float(config.get("eta", 1.0)), bool(config.get("clip", True)), dt_s
        self.min_std, self.noise_clip = float(config.get("min_std", 1e-4)), float(config.get("noise_clip", 1.0))
        self.model = PlannerDiT(config["heads"], config["head_dim"], config["layers"], config["output_dim"])
        self.his_traj_encoder = Mlp(3 * self.history_poses, hidden, dim)
        self.ego_status_encoder = Mlp(STATUS_DIM, hidden, dim)
        self.action_encoder = ActionEncoder(dim)
        self.feature_encoder = nn.Linear(hidden_size, dim)
        self.fusion_projector = nn.Linear(3 * dim, dim)
        self.action_decoder = Mlp(config["output_dim"], hidden, 3)
        self.position_embedding = nn.Embedding(self.num_waypoints, dim)
        self.denorm = [[float(v) for v in row] for row in config.get("denorm", RECOGDRIVE_DENORM)]
        self.alpha_bar = cosine_alpha_bar(self.train_steps)

    @classmethod
    def from_config(cls, config: dict, hidden_size: int, spec=None) -> "DdimPlannerHead":
        config = cls.checked("ddim_planner", {**PUBLISHED, **config},
                             ("num_waypoints", "head_hidden", "query_tokens") + tuple(PUBLISHED))
        denorm = config.get("denorm", RECOGDRIVE_DENORM)
        expect(config["head_hidden"] == config["heads"] * config["head_dim"] and config["head_dim"] % 2 == 0 and
               config["steps"] <= config["train_steps"] and config["history_poses"] >= 1 and
               isinstance(denorm, list) and len(denorm) == 3 and all(len(d) == 2 for d in denorm) and
               0.0 <= float(config.get("eta", 1.0)) <= 1.0, ConfigError,
               f"head 'ddim_planner': head_hidden = heads x head_dim (head_dim even), steps <= train_steps, denorm "
               f"3 x [range, minimum], eta in [0, 1] (config {config})")
        return cls(config, hidden_size, spec.waypoint_dt_s if spec is not None else 0.5)

    def timesteps(self) -> list[int]:
        """The DDIM steps' training timesteps, descending, evenly spaced to 0 (100 and 5: 80, 60, 40, 20, 0)."""
        stride = self.train_steps // self.steps
        return [t * stride for t in reversed(range(self.steps))]

    def encode(self, sequence, command, ego_status, history) -> dict:
        """The frame's conditioning, computed once for every step (D: the planner's width)."""
        vl = self.feature_encoder(sequence.flatten(1, 2))                              # (B, P S, D)
        hist = self.his_traj_encoder(recogdrive_history(history, self.history_poses).flatten(1)[:, None])
        return {"vl": vl, "vl_mean": vl.mean(dim=1, keepdim=True).expand(-1, self.num_waypoints, -1),   # (B, N, D)
                "history": hist.expand(-1, self.num_waypoints, -1),                    # (B, N, D)
                "ego": self.ego_status_encoder(self.status(command, ego_status))}      # (B, D)

    def status(self, command: torch.Tensor, ego_status: torch.Tensor) -> torch.Tensor:
        """command (B, 7) one-hot over NAV_COMMANDS, ego_status (B, 4) speed, accel, yaw rate, steering -> (B, 8):
        NAVSIM's command one-hot (unknown without a command) || vx = speed, vy = 0 || ax = accel,
        ay = speed * yaw rate (the turn's centripetal acceleration)."""
        navsim = command @ _command_matrix().to(command.device, command.dtype)         # (B, 4)
        navsim[:, 3] = 1 - navsim[:, :3].sum(dim=1).clamp(max=1)
        speed, accel, yaw_rate = ego_status[:, 0:1], ego_status[:, 1:2], ego_status[:, 2:3]
        return torch.cat([navsim, speed, torch.zeros_like(speed), accel, speed * yaw_rate], dim=1)

    def denoise(self, x: torch.Tensor, t: int, encoded: dict) -> torch.Tensor:
        """-> the predicted noise (B, N, 3) of the normalised poses x (B, N, 3) at training timestep t."""
        steps = torch.full((x.shape[0],), t, dtype=torch.long, device=x.device)
        poses = self.action_encoder(x, steps) + self.position_embedding.weight[:x.shape[1]]   # (B, N, D)
        fused = self.fusion_projector(torch.cat([encoded["history"], encoded["vl_mean"], poses], dim=2))
        return self.action_decoder(self.model(fused, encoded["vl"], encoded["ego"], steps))

    def sample(self, encoded: dict, generator: torch.Generator, like: torch.Tensor) -> torch.Tensor:
        """DDIM from seeded noise -> normalised poses (B, N, 3), float32 (the denoiser runs in the head's dtype)."""
        dtype = self.fusion_projector.weight.dtype

        def noise():
            return torch.randn(like.shape[0], self.num_waypoints, 3, generator=generator).to(like.device)
        x, times = noise(), self.timesteps()
        for i, t in enumerate(times):
            eps = self.denoise(x.to(dtype), t, encoded).float()
            a_t, a_prev = self.alpha_bar[t], 1.0 if i + 1 == len(times) else self.alpha_bar[times[i + 1]]
            x0 = (x - math.sqrt(1 - a_t) * eps) / math.sqrt(a_t)
            x0 = x0.clamp(-1, 1) if self.clip else x0
            eps = (x - math.sqrt(a_t) * x0) / math.sqrt(1 - a_t)                       # re-derived from the clamped x0
            sigma = max(self.eta * math.sqrt((1 - a_prev) / (1 - a_t) * (1 - a_t / a_prev)), 1e-10)
            mean = math.sqrt(a_prev) * x0 + math.sqrt(max(0.0, 1 - a_prev - sigma ** 2)) * eps
            std = max(math.sqrt(sigma ** 2 + 1e-20), self.min_std) if self.eta > 0 else 0.0
            x = mean + std * noise().clamp(-self.noise_clip, self.noise_clip)
        return x.clamp(-1, 1) if self.clip else x

    def forward(self, query_hidden, sequence, command, ego_status, history, noise_seed: int):
        encoded = self.encode(sequence, command, ego_status, history)
        poses = self.sample(encoded, torch.Generator().manual_seed(noise_seed), query_hidden)
        denorm = torch.tensor(self.denorm, device=poses.device)                         # (3, 2) range, minimum
        poses = (poses + 1) / 2 * denorm[:, 0] + denorm[:, 1]                          # (B, N, 3) x, y, heading
        steps = poses[..., :2].diff(dim=1, prepend=poses.new_zeros(poses.shape[0], 1, 2))
        speed = steps.norm(dim=-1, keepdim=True) / self.dt_s
        return torch.cat([steps, poses[..., 2:], speed], dim=-1)                       # (B, N, 4)


def _command_matrix() -> torch.Tensor:
    """(len(NAV_COMMANDS), 4): each command's NAVSIM column."""
    out = torch.zeros(len(NAV_COMMANDS), len(NAVSIM_COMMANDS))
    for i, name in enumerate(NAV_COMMANDS):
        out[i, _TO_NAVSIM[name]] = 1.0
    return out


def recogdrive_history(history: torch.Tensor, poses: int) -> torch.Tensor:
    """(B, n, 3) the poses before the frame, in its ego frame -> (B, poses, 3): the newest poses - 1 of them
    (zeros, as unknown, in front when fewer) and the current pose, (0, 0, 0)."""
    before = _last_rows(history, poses - 1)
    return torch.cat([before, before.new_zeros(before.shape[0], 1, 3)], dim=1)


def _last_rows(history: torch.Tensor, rows: int) -> torch.Tensor:
    """(B, n, 3) -> (B, rows, 3): the newest `rows` poses, zero (unknown) in front when fewer."""
    history = history[:, -rows:] if rows else history[:, :0]
    missing = rows - history.shape[1]
    if missing > 0:
        history = torch.cat([history.new_zeros(history.shape[0], missing, history.shape[2]), history], dim=1)
    return history
