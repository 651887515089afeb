"""The pieces ORION's / MindDrive's two heads share, under the published names (docs/sources/
published_orion_minddrive.md; Orion `mmcv/models/utils/petr_transformers.py`, `misc.py`, `positional_encoding.py`):
post-norm PETR decoder layers (self-attention over queries + memory, LN, cross-attention to the image tokens, LN,
FFN, LN), the one-layer QT-Former decoders (cross-attention, LN, FFN, LN), MLN, and the sinusoid encodings."""

from __future__ import annotations

import math

import torch
from torch import nn
from torch.nn import functional as F


def inverse_sigmoid(x: torch.Tensor, eps: float = 1e-5) -> torch.Tensor:
    x = x.clamp(0, 1)
    return torch.log(x.clamp(min=eps) / (1 - x).clamp(min=eps))


def nerf_encoding(x: torch.Tensor, freqs: int = 6) -> torch.Tensor:
    """(..., n) -> (..., 12 n): sin, cos of x * 2^k, k = 0..5, grouped per frequency."""
    bands = 2.0 ** torch.linspace(0.0, freqs - 1, freqs, dtype=x.dtype, device=x.device)
    return torch.cat([f(x * b) for b in bands for f in (torch.sin, torch.cos)], dim=-1)


def posemb_1d(pos: torch.Tensor, feats: int = 256, temperature: float = 10000.0) -> torch.Tensor:
    """(..., 1) -> (..., feats): interleaved sin / cos of 2 pi pos over geometric frequencies."""
    dim_t = torch.arange(feats, dtype=torch.float32, device=pos.device)
    dim_t = temperature ** (2 * torch.div(dim_t, 2, rounding_mode="floor") / feats)
    x = pos[..., 0, None] * (2 * math.pi) / dim_t
    return torch.stack((x[..., 0::2].sin(), x[..., 1::2].cos()), dim=-1).flatten(-2)


class MLN(nn.Module):
    """x <- gamma(c) * LN(x) + beta(c), c through `reduce` (Linear + ReLU); the LN has no parameters."""

    def __init__(self, c_dim: int, f_dim: int):
        super().__init__()
        self.reduce = nn.Sequential(nn.Linear(c_dim, f_dim), nn.ReLU())
        self.gamma, self.beta = nn.Linear(f_dim, f_dim), nn.Linear(f_dim, f_dim)
        self.ln = nn.LayerNorm(f_dim, elementwise_affine=False)

    def forward(self, x: torch.Tensor, c: torch.Tensor) -> torch.Tensor:
        c = self.reduce(c)
        return self.gamma(c) * self.ln(x) + self.beta(c)


class PosAttention(nn.Module):
    """`attn` (in_proj_weight, in_proj_bias, out_proj): query + query_pos over key + key_pos, values the keys
    without position; residual onto the query (MultiHeadAttentionwDropout). bias=False: no in_proj_bias and no
    out_proj.bias, as the published FlashMHA(embed_dims, num_heads, dropout) builds it when dropout (passed as its
    `bias` argument) is 0.0."""

    def __init__(self, dim: int, heads: int, bias: bool = True):
        super().__init__()
        self.attn = nn.MultiheadAttention(dim, heads, bias=bias, batch_first=True)

    def forward(self, query, key, query_pos=None, key_pos=None, mask=None) -> torch.Tensor:
        """mask (Lq, Lk) bool: True where a query may not look. Written out rather than nn.MultiheadAttention's
        forward, whose bias-free projection of a 3-D input takes a path (and rounding) that depends on whether
        the weights require grad: a loaded model (frozen) and a built one would differ by float rounding."""
        a = self.attn
        q = query if query_pos is None else query + query_pos                           # (B, Lq, D)
        k = key if key_pos is None else key + key_pos                                   # (B, Lk, D)
        dim, heads = a.embed_dim, a.num_heads
        w, b = a.in_proj_weight, a.in_proj_bias
        parts = [F.linear(x.reshape(-1, dim), w[i * dim:(i + 1) * dim], None if b is None else b[i * dim:(i + 1) * dim])
                 .view(x.shape[0], -1, heads, dim // heads).transpose(1, 2) for i, x in enumerate((q, k, key))]
        scores = parts[0] @ parts[1].transpose(-1, -2) / math.sqrt(dim // heads)        # (B, heads, Lq, Lk)
        if mask is not None:
            scores = scores.masked_fill(mask, float("-inf"))
        out = (scores.softmax(-1) @ parts[2]).transpose(1, 2).reshape(-1, dim)          # (B Lq, D)
        return F.linear(out, a.out_proj.weight, a.out_proj.bias).view(query.shape) + query


class FFN(nn.Module):
    def __init__(self, dim: int, hidden: int):
        super().__init__()
        self._layers = nn.Sequential(nn.Linear(dim, hidden), nn.ReLU(), nn.Dropout(0.0), nn.Linear(hidden, dim),
                                     nn.Dropout(0.0))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self._layers(x) + x


class PETRLayer(nn.Module):
    """transformer_layers: 0 self-attention, 1 LN, 2 cross-attention, 3 LN, 4 FFN, 5 LN."""

    def __init__(self, dim: int, heads: int, ffn: int):
        super().__init__()
        self.transformer_layers = nn.ModuleList([PosAttention(dim, heads), nn.LayerNorm(dim), PosAttention(dim, heads),
                                                 nn.LayerNorm(dim), FFN(dim, ffn), nn.LayerNorm(dim)])

    def forward(self, query, key, query_pos, key_pos, mask, temp_memory, temp_pos) -> torch.Tensor:
        t = self.transformer_layers
        own = torch.cat([query, temp_memory], dim=1)                                    # (B, Lq + M, D)
        own_pos = torch.cat([query_pos, temp_pos], dim=1)
        query = t[1](t[0](query, own, query_pos, own_pos, mask))
        query = t[3](t[2](query, key, query_pos, key_pos))
        return t[5](t[4](query))


class PETRDecoder(nn.Module):
    """`_layers.N`: the stack; returns every layer's output (layers, B, Lq, D)."""

    def __init__(self, layers: int, dim: int, heads: int, ffn: int):
        super().__init__()
        self._layers = nn.ModuleList(PETRLayer(dim, heads, ffn) for _ in range(layers))

    def forward(self, query, key, query_pos, key_pos, mask, temp_memory, temp_pos) -> torch.Tensor:
        out = []
        for layer in self._layers:
            query = layer(query, key, query_pos, key_pos, mask, temp_memory, temp_pos)
            out.append(query)
        return torch.stack(out)


class PETRTransformer(nn.Module):
    """`transformer.query_decoder` (PETRTemporalTransformer)."""

    def __init__(self, layers: int, dim: int, heads: int, ffn: int):
        super().__init__()
        self.query_decoder = PETRDecoder(layers, dim, heads, ffn)

    def forward(self, *args) -> torch.Tensor:
        return self.query_decoder(*args)


class QTLayer(nn.Module):
    """transformer_layers: 0 cross-attention, 1 LN, 2 FFN, 3 LN (OrionTransformerDecoderLayer)."""

    def __init__(self, dim: int, heads: int, ffn: int, bias: bool = True):
        super().__init__()
        self.transformer_layers = nn.ModuleList([PosAttention(dim, heads, bias), nn.LayerNorm(dim), FFN(dim, ffn),
                                                 nn.LayerNorm(dim)])

    def forward(self, query, key, query_pos=None, key_pos=None) -> torch.Tensor:
        t = self.transformer_layers
        return t[3](t[2](t[1](t[0](query, key, query_pos, key_pos))))


class QTDecoder(nn.Module):
    """`_layers.0`: memory_decoder_cq / _mq and motion_decoder (OrionTransformerDecoder, one layer): the last
    layer's output (B, Lq, D). bias: the attention's in_proj_bias / out_proj.bias (PosAttention)."""

    def __init__(self, dim: int, heads: int, ffn: int, layers: int = 1, bias: bool = True):
        super().__init__()
        self._layers = nn.ModuleList(QTLayer(dim, heads, ffn, bias) for _ in range(layers))

    def forward(self, query, key, query_pos=None, key_pos=None) -> torch.Tensor:
        for layer in self._layers:
            query = layer(query, key, query_pos, key_pos)
        return query
