"""The expert's action input projection and its time conditioning, under the published module names
(alpamayo_r1/models/action_in_proj.py PerWaypointActionInProjV2): each action channel and the flow time t go
through a fixed Fourier encoder (log-spaced frequencies 1 .. max_freq), are concatenated per waypoint, pass an
MLP trunk (Linear, SiLU, [RMSNorm, Linear, SiLU] x (layers - 1) with the last SiLU dropped) and a LayerNorm.
`action_out_proj` is a plain Linear (expert hidden -> action channels)."""

from __future__ import annotations

import math

import torch
from torch import nn

from ..layers import RMSNorm

EPS = 1e-5   # the published RMSNorm's


class Fourier(nn.Module):
    """x (...) -> (..., dim): sin and cos of 2 pi x f for `dim / 2` log-spaced f, times sqrt 2. `freqs` is a
    saved buffer in Alpamayo 1 and a non-persistent one in 1.5 (`persistent`)."""

    def __init__(self, dim: int, max_freq: float, persistent: bool = True):
        super().__init__()
        freqs = torch.logspace(0, math.log10(max_freq), steps=dim // 2)
        self.register_buffer("freqs", freqs[None, :], persistent=persistent)   # (1, dim/2)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        arg = x[..., None] * self.freqs * 2 * torch.pi                          # (..., dim/2)
        return torch.cat([torch.sin(arg), torch.cos(arg)], -1) * math.sqrt(2)   # (..., dim)


def trunk(width_in: int, hidden: int, width_out: int, layers: int) -> nn.Sequential:
    """The MLPEncoder's `trunk`: indices 0 (Linear), 3, 6, ... (Linear), 2, 5, ... (RMSNorm) as published."""
    mods: list[nn.Module] = [nn.Linear(width_in, hidden), nn.SiLU()]
    for i in range(layers):
        last = i == layers - 1
        mods += [RMSNorm(hidden, EPS), nn.Linear(hidden, width_out if last else hidden)]
        mods += [] if last else [nn.SiLU()]
    return nn.Sequential(*mods)


class Encoder(nn.Module):
    def __init__(self, width_in: int, hidden: int, width_out: int, layers: int):
        super().__init__()
        self.trunk = trunk(width_in, hidden, width_out, layers)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.trunk(x)


class ActionInProj(nn.Module):
    """(B, N, C) noisy actions and t (B, 1, 1) -> (B, N, out_dim) expert input embeddings."""

    def __init__(self, channels: int, out_dim: int, num_enc_layers: int = 4, hidden_size: int = 1024,
                 max_freq: float = 100.0, num_fourier_feats: int = 20, persistent_freqs: bool = True):
        super().__init__()
        self.sinus = nn.ModuleList(Fourier(num_fourier_feats, max_freq, persistent_freqs) for _ in range(channels))
        self.timestep_fourier_encoder = Fourier(num_fourier_feats, max_freq, persistent_freqs)
        width = num_fourier_feats * (channels + 1)
        self.encoder = Encoder(width, hidden_size, out_dim, num_enc_layers)
        self.norm = nn.LayerNorm(out_dim)

    def forward(self, x: torch.Tensor, t: torch.Tensor) -> torch.Tensor:
        b, n, _ = x.shape
        x, t = x.float(), t.float()
        feats = torch.cat([enc(x[:, :, i]) for i, enc in enumerate(self.sinus)], dim=-1)   # (B, N, F*C)
        time = self.timestep_fourier_encoder(t[..., -1]).repeat(1, n, 1)                   # (B, N, F)
        joined = torch.cat((feats, time), dim=-1).flatten(0, 1)                             # (B*N, F*(C+1))
        joined = joined.to(self.norm.weight.dtype)
        return self.norm(self.encoder(joined).reshape(b, n, -1))                            # (B, N, out)


def in_proj_from(config: dict, channels: int, out_dim: int, persistent_freqs: bool) -> ActionInProj:
    """`action_in_proj_cfg`'s fields (num_enc_layers, hidden_size, max_freq, num_fourier_feats)."""
    known = ("num_enc_layers", "hidden_size", "max_freq", "num_fourier_feats")
    return ActionInProj(channels, out_dim, persistent_freqs=persistent_freqs,
                        **{k: config[k] for k in known if k in config})
