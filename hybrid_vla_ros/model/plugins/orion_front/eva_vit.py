"""ORION's / MindDrive's image backbone, EVA-02 ViT (`img_backbone.`), written from the published layout
(docs/sources/published_orion_minddrive.md; Orion `mmcv/models/backbones/eva_vit.py`): patch embedding, an
absolute position table of the pretraining size resized bicubically to the feature grid, blocks of pre-norm
attention with q/k/v projections (bias on q and v only) and 2-D rotary embedding (a windowed table for window
blocks, a global one for the others), SwiGLU MLP with a LayerNorm inside (`ffn_ln`). No final norm: the last
block's output is the feature map. Windows are zero-padded and unmasked, as published."""

from __future__ import annotations

import torch
from torch import nn
from torch.nn import functional as F

EPS = 1e-6   # every LayerNorm of the published ViT


def rotate_pairs(x: torch.Tensor) -> torch.Tensor:
    """(..., 2k) -> (..., 2k): each interleaved pair (a, b) -> (-b, a)."""
    pairs = x.unflatten(-1, (-1, 2))
    return torch.stack((-pairs[..., 1], pairs[..., 0]), dim=-1).flatten(-2)


class Rope2D(nn.Module):
    """The 2-D rotary table of a side x side grid (buffers freqs_cos, freqs_sin (side^2, head_dim)): the first half
    of a head rotates by the row, the second by the column; positions scaled to the pretraining grid."""

    def __init__(self, half_head_dim: int, pretrain_side: int, side: int):
        super().__init__()
        freqs = 1.0 / (10000 ** (torch.arange(0, half_head_dim, 2)[: half_head_dim // 2].float() / half_head_dim))
        t = torch.arange(side) / side * pretrain_side
        freqs = torch.einsum("i,f->if", t, freqs).repeat_interleave(2, dim=-1)             # (side, half)
        grid = torch.cat([freqs[:, None, :].expand(side, side, -1),
                          freqs[None, :, :].expand(side, side, -1)], dim=-1)               # (side, side, head_dim)
        self.register_buffer("freqs_cos", grid.cos().reshape(side * side, -1))
        self.register_buffer("freqs_sin", grid.sin().reshape(side * side, -1))

    def forward(self, t: torch.Tensor) -> torch.Tensor:
        return t * self.freqs_cos + rotate_pairs(t) * self.freqs_sin


class Attention(nn.Module):
    def __init__(self, dim: int, heads: int, rope: Rope2D):
        super().__init__()
        self.heads = heads
        self.q_proj, self.k_proj, self.v_proj = (nn.Linear(dim, dim, bias=False) for _ in range(3))
        self.q_bias, self.v_bias = nn.Parameter(torch.zeros(dim)), nn.Parameter(torch.zeros(dim))
        self.rope = rope                      # shared with the backbone (its keys repeat per block)
        self.proj = nn.Linear(dim, dim)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        b, h, w, c = x.shape                                                           # (B, h, w, C)
        x = x.reshape(b, h * w, c)
        q = F.linear(x, self.q_proj.weight, self.q_bias)
        k = F.linear(x, self.k_proj.weight)
        v = F.linear(x, self.v_proj.weight, self.v_bias)
        q, k, v = (t.reshape(b, h * w, self.heads, -1).transpose(1, 2) for t in (q, k, v))   # (B, heads, L, d)
        q, k = self.rope(q).type_as(v), self.rope(k).type_as(v)
        out = F.scaled_dot_product_attention(q, k, v).transpose(1, 2).reshape(b, h * w, c)
        return self.proj(out).view(b, h, w, c)


class SwiGLU(nn.Module):
    def __init__(self, dim: int, hidden: int):
        super().__init__()
        self.w1, self.w2 = nn.Linear(dim, hidden), nn.Linear(dim, hidden)
        self.ffn_ln = nn.LayerNorm(hidden, eps=EPS)
        self.w3 = nn.Linear(hidden, dim)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.w3(self.ffn_ln(F.silu(self.w1(x)) * self.w2(x)))


def window_partition(x: torch.Tensor, size: int) -> tuple[torch.Tensor, tuple[int, int]]:
    """(B, h, w, C) -> (B * windows, size, size, C), zero-padded to whole windows; and the padded (hp, wp)."""
    b, h, w, c = x.shape
    x = F.pad(x, (0, 0, 0, (size - w % size) % size, 0, (size - h % size) % size))
    hp, wp = x.shape[1], x.shape[2]
    x = x.view(b, hp // size, size, wp // size, size, c).permute(0, 1, 3, 2, 4, 5)
    return x.reshape(-1, size, size, c), (hp, wp)


def window_unpartition(x: torch.Tensor, size: int, padded: tuple[int, int], hw: tuple[int, int]) -> torch.Tensor:
    hp, wp = padded
    b = x.shape[0] // ((hp // size) * (wp // size))
    x = x.view(b, hp // size, wp // size, size, size, -1).permute(0, 1, 3, 2, 4, 5).reshape(b, hp, wp, -1)
    return x[:, : hw[0], : hw[1]]


class Block(nn.Module):
    def __init__(self, dim: int, heads: int, hidden: int, rope: Rope2D, window: int):
        super().__init__()
        self.window = window
        self.norm1, self.norm2 = nn.LayerNorm(dim, eps=EPS), nn.LayerNorm(dim, eps=EPS)
        self.attn = Attention(dim, heads, rope)
        self.mlp = SwiGLU(dim, hidden)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        y = self.norm1(x)
        if self.window:
            hw = (y.shape[1], y.shape[2])
            y, padded = window_partition(y, self.window)
            y = window_unpartition(self.attn(y), self.window, padded, hw)
        else:
            y = self.attn(y)
        x = x + y
        return x + self.mlp(self.norm2(x))


class EVAViT(nn.Module):
    """config: embed_dim, depth, num_heads, patch_size, img_size (the input side), window_size,
    window_blocks (indices), pretrain_img_size (the position table's, + a cls row), mlp_ratio (8/3)."""

    def __init__(self, c: dict):
        super().__init__()
        dim, patch = c["embed_dim"], c["patch_size"]
        self.patch_embed = nn.Module()
        self.patch_embed.proj = nn.Conv2d(3, dim, patch, stride=patch)
        self.pos_embed = nn.Parameter(torch.randn(1, (c["pretrain_img_size"] // patch) ** 2 + 1, dim) * 0.02)
        half = dim // c["num_heads"] // 2
        self.rope_win = Rope2D(half, c.get("pt_hw_seq_len", 16), c["window_size"])
        self.rope_glb = Rope2D(half, c.get("pt_hw_seq_len", 16), c["img_size"] // patch)
        hidden = int(dim * c.get("mlp_ratio", 4 * 2 / 3))
        windows = set(c["window_blocks"])
        self.blocks = nn.ModuleList(
            Block(dim, c["num_heads"], hidden, self.rope_win if i in windows else self.rope_glb,
                  c["window_size"] if i in windows else 0) for i in range(c["depth"]))

    def absolute_positions(self, h: int, w: int) -> torch.Tensor:
        """The pretraining table without its cls row, resized (bicubic) to h x w -> (1, h, w, C)."""
        table = self.pos_embed[:, 1:]
        side = int(table.shape[1] ** 0.5)
        if (side, side) == (h, w):
            return table.reshape(1, h, w, -1)
        grid = table.reshape(1, side, side, -1).permute(0, 3, 1, 2).float()
        return F.interpolate(grid, size=(h, w), mode="bicubic", align_corners=False).to(table.dtype).permute(0, 2, 3, 1)

    def forward(self, images: torch.Tensor) -> torch.Tensor:
        x = self.patch_embed.proj(images).permute(0, 2, 3, 1)                          # (N, h, w, C)
        x = x + self.absolute_positions(x.shape[1], x.shape[2]).to(x.dtype)
        for block in self.blocks:
            x = block(x)
        return x.permute(0, 3, 1, 2)                                                   # (N, C, h, w)
