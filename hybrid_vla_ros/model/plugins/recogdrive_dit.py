"""ReCogDrive's planner DiT, under the module names of its published state dict (what `agent.action_head.model.*`
holds in a ReCogDrive `.ckpt`; docs/sources/published_recogdrive.md, section a). Written here from the published
code's behaviour (xiaomi-research/recogdrive@79a553b, navsim/agents/recogdrive/recogdrive_dit.py, blocks/): no code
of theirs is imported or copied.

    timestep_encoder.timestep_embedder.linear_1 / linear_2   the timestep's 256-wide sinusoid (cos first, the
                                                 frequency exponent over 127) -> Linear, SiLU, Linear -> D
    transformer_blocks.{i}                       RMSNorm norm1 / norm2 (eps 1e-6); attn.to_q / to_k / to_v /
                                                 to_out.0 (with bias), per-head RMSNorm q_norm / k_norm; ffn.w12 / w3
                                                 (SwiGLU, hidden D); adaLN_modulation.1 (SiLU, Linear D -> 6D: shift,
                                                 scale, gate for attention, then for the FFN). Even blocks attend to
                                                 the trajectory itself (RoPE on q and k), odd blocks to the encoded
                                                 VLM sequence (RoPE on q only; no mask)
    final_layer.norm_final / linear / modulation_proj.1   RMSNorm, shift and scale from the condition, Linear D -> out
The published RoPE buffer (`rotary_embedder.inv_freq`, theta 1e4) holds no learned value: computed here.
"""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F
from torch import nn

from .layers import RMSNorm

EPS = 1e-6   # the published RMSNorm's

TIME_CHANNELS = 256   # the timestep sinusoid's width (fixed in the published code, whatever D)
ROPE_THETA = 10000.0


def _rotate_half(x: torch.Tensor) -> torch.Tensor:
    first, second = x.chunk(2, dim=-1)
    return torch.cat([-second, first], dim=-1)


def rope_tables(positions: int, dim: int, like: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """cos, sin (1, 1, positions, dim) for positions 0 .. positions - 1 (the halves' frequencies repeated)."""
    inv_freq = 1.0 / (ROPE_THETA ** (torch.arange(0, dim, 2).float() / dim))          # (dim / 2,)
    freqs = torch.outer(torch.arange(positions).float(), inv_freq)                    # (positions, dim / 2)
    table = torch.cat([freqs, freqs], dim=-1)[None, None].to(like.device)
    return table.cos().to(like.dtype), table.sin().to(like.dtype)


class Attention(nn.Module):
    """Multi-head attention with per-head q / k RMSNorm and RoPE at the queries' positions."""

    def __init__(self, dim: int, heads: int, head_dim: int):
        super().__init__()
        self.heads, self.head_dim = heads, head_dim
        inner = heads * head_dim
        self.to_q, self.to_k, self.to_v = (nn.Linear(dim, inner) for _ in range(3))
        self.q_norm, self.k_norm = RMSNorm(head_dim, EPS), RMSNorm(head_dim, EPS)
        self.to_out = nn.Sequential(nn.Linear(inner, dim))

    def _split(self, x: torch.Tensor) -> torch.Tensor:
        return x.view(x.shape[0], x.shape[1], self.heads, self.head_dim).transpose(1, 2)   # (B, h, L, d)

    def forward(self, x: torch.Tensor, context: torch.Tensor | None = None) -> torch.Tensor:
        source = x if context is None else context                                     # (B, L, D)
        q = self.q_norm(self._split(self.to_q(x)))                                     # (B, h, N, d)
        k = self.k_norm(self._split(self.to_k(source)))                                # (B, h, L, d)
        v = self._split(self.to_v(source))
        cos, sin = rope_tables(x.shape[1], self.head_dim, q)
        q = q * cos + _rotate_half(q) * sin
        if context is None:                                                            # self-attention: k too
            k = k * cos + _rotate_half(k) * sin
        out = F.scaled_dot_product_attention(q, k, v)                                  # (B, h, N, d)
        return self.to_out(out.transpose(1, 2).reshape(x.shape[0], x.shape[1], -1))   # (B, N, D)


class SwiGLU(nn.Module):
    def __init__(self, dim: int):
        super().__init__()
        self.w12, self.w3 = nn.Linear(dim, 2 * dim), nn.Linear(dim, dim)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        gate, value = self.w12(x).chunk(2, dim=-1)                                     # (B, N, D) each
        return self.w3(F.silu(gate) * value)


def _modulate(x: torch.Tensor, shift: torch.Tensor, scale: torch.Tensor) -> torch.Tensor:
    return x * (1 + scale.unsqueeze(1)) + shift.unsqueeze(1)                           # (B, N, D), (B, D)


class DiTBlock(nn.Module):
    def __init__(self, dim: int, heads: int, head_dim: int):
        super().__init__()
        self.norm1, self.norm2 = RMSNorm(dim, EPS), RMSNorm(dim, EPS)
        self.attn = Attention(dim, heads, head_dim)
        self.ffn = SwiGLU(dim)
        self.adaLN_modulation = nn.Sequential(nn.SiLU(), nn.Linear(dim, 6 * dim))

    def forward(self, x: torch.Tensor, condition: torch.Tensor, context: torch.Tensor | None) -> torch.Tensor:
        shift_a, scale_a, gate_a, shift_f, scale_f, gate_f = self.adaLN_modulation(condition).chunk(6, dim=1)
        x = x + gate_a.unsqueeze(1) * self.attn(_modulate(self.norm1(x), shift_a, scale_a), context)
        return x + gate_f.unsqueeze(1) * self.ffn(_modulate(self.norm2(x), shift_f, scale_f))


class FinalLayer(nn.Module):
    def __init__(self, dim: int, output_dim: int):
        super().__init__()
        self.norm_final = RMSNorm(dim, EPS)
        self.linear = nn.Linear(dim, output_dim)
        self.modulation_proj = nn.Sequential(nn.SiLU(), nn.Linear(dim, 2 * dim))

    def forward(self, x: torch.Tensor, condition: torch.Tensor) -> torch.Tensor:
        shift, scale = self.modulation_proj(condition).chunk(2, dim=1)
        return self.linear(_modulate(self.norm_final(x), shift, scale))                # (B, N, output_dim)


def time_sinusoid(t: torch.Tensor, width: int = TIME_CHANNELS) -> torch.Tensor:
    """(B,) timesteps -> (B, width): cos, then sin, of t * exp(-ln(1e4) * i / (width / 2 - 1))."""
    half = width // 2
    exponent = -math.log(10000.0) * torch.arange(half, dtype=torch.float32, device=t.device) / (half - 1)
    angles = t[:, None].float() * torch.exp(exponent)[None]
    return torch.cat([torch.cos(angles), torch.sin(angles)], dim=-1)


class _TimestepEmbedder(nn.Module):
    def __init__(self, dim: int):
        super().__init__()
        self.linear_1, self.linear_2 = nn.Linear(TIME_CHANNELS, dim), nn.Linear(dim, dim)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.linear_2(F.silu(self.linear_1(x)))


class TimestepEncoder(nn.Module):
    def __init__(self, dim: int):
        super().__init__()
        self.timestep_embedder = _TimestepEmbedder(dim)

    def forward(self, t: torch.Tensor) -> torch.Tensor:
        sinusoid = time_sinusoid(t).to(self.timestep_embedder.linear_1.weight.dtype)
        return self.timestep_embedder(sinusoid)                                        # (B, D)


class PlannerDiT(nn.Module):
    """`layers` blocks of width heads * head_dim, self-attention and cross-attention alternating (the published
    `interleave_attention`), conditioned on timestep embedding + the given condition."""

    def __init__(self, heads: int, head_dim: int, layers: int, output_dim: int):
        super().__init__()
        dim = heads * head_dim
        self.output_dim = output_dim
        self.timestep_encoder = TimestepEncoder(dim)
        self.transformer_blocks = nn.ModuleList(DiTBlock(dim, heads, head_dim) for _ in range(layers))
        self.final_layer = FinalLayer(dim, output_dim)

    def forward(self, x: torch.Tensor, context: torch.Tensor, condition: torch.Tensor, t: torch.Tensor) -> torch.Tensor:
        """x (B, N, D), context (B, L, D), condition (B, D), t (B,) -> (B, N, output_dim)."""
        condition = self.timestep_encoder(t) + condition
        for i, block in enumerate(self.transformer_blocks):
            x = block(x, condition, context if i % 2 else None)
        return self.final_layer(x, condition)
