"""The packed forward of ActionFlow (engine/actionflow/packing.py): rows of several frames in one batch (R, H), each
frame attending only to its own keys in its KV ring slot, at its own positions; cut into sides at p."""

from __future__ import annotations

from dataclasses import dataclass

import torch
from torch.nn import functional as F

from ...errors import expect_finite
from ...model.checkpoint import ensure_loaded
from ...model.vla import VLAModel
from ...types import DeepStack
from .kv_ring import KVRing
from ..decode.decoder import TokenDecoder
from ..placement import CPU
from ..scheduling.partition import prefix_modules
from ..int8_calibration import int8_block
from ..stages import placed


@dataclass
class Segment:
    """One frame's rows in a packed forward: rows [row, row + count) at slot positions [start, start + count).
    The frame's stamp and arrival travel with it, so a suffix in another process can stamp its action."""
    seq: int
    slot: int
    start: int
    row: int
    count: int
    stamp_ns: int = 0
    arrival_ns: int = 0


@dataclass
class PackedState:
    """What crosses the cut of a packed forward: hidden (R, H), positions (3, 1, R) or (1, R), the layout, and
    (Qwen3-VL) what DeepStack still adds at the prefill's image rows (its positions are row indices)."""
    hidden: torch.Tensor
    positions: torch.Tensor
    segments: list[Segment]
    deepstack: DeepStack | None = None


def rotate(x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
    """RoPE on x (R, heads, D) with per-row cos, sin (R, D) (rotate-half convention of Llama/Qwen)."""
    half = x.shape[-1] // 2
    rotated = torch.cat((-x[..., half:], x[..., :half]), dim=-1)
    return x * cos.unsqueeze(1) + rotated * sin.unsqueeze(1)


@dataclass
class DecodeRows:
    """The decode rows of a step (one query each), gathered once per step for every layer: their rows, slots,
    positions, and the mask of each one's keys (positions 0..its own) over the longest."""
    rows: torch.Tensor        # (n,)
    slots: torch.Tensor       # (n,)
    positions: torch.Tensor   # (n,)
    mask: torch.Tensor        # (n, 1, 1, L) bool

    @classmethod
    def of(cls, segments: list[Segment]) -> "DecodeRows | None":
        decode = [s for s in segments if s.count == 1]
        if not decode:
            return None
        positions = torch.tensor([s.start for s in decode])
        mask = torch.arange(int(positions.max()) + 1) <= positions[:, None]             # (n, L)
        return cls(torch.tensor([s.row for s in decode]), torch.tensor([s.slot for s in decode]), positions,
                   mask[:, None, None, :])


def head_norm(attn, name: str, x: torch.Tensor) -> torch.Tensor:
    """Qwen3's per-head RMSNorm of queries / keys before RoPE (q_norm, k_norm); other families have none."""
    norm = getattr(attn, name, None)
    return x if norm is None else norm(x)


def packed_block(block, layer: int, hidden: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor,
                 segments: list[Segment], ring: KVRing, decode: DecodeRows | None) -> torch.Tensor:
    """One decoder block (Llama / Qwen2 layout: pre-norm attention + MLP) over packed rows (R, H). Keys are
    rotated once and written to the ring at their positions; each frame attends to its own slot only: a
    prefill causally over its rows, the decode rows together (one query each, masked to their own lengths)."""
    attn = block.self_attn
    rows, head_dim = hidden.shape[0], attn.head_dim
    x = block.input_layernorm(hidden)
    q = rotate(head_norm(attn, "q_norm", attn.q_proj(x).view(rows, -1, head_dim)), cos, sin)   # (R, heads, D)
    k = rotate(head_norm(attn, "k_norm", attn.k_proj(x).view(rows, -1, head_dim)), cos, sin)   # (R, kv_heads, D)
    v = attn.v_proj(x).view(rows, -1, head_dim)
    out = torch.empty_like(q)
    for seg in segments:
        if seg.count == 1:
            continue
        span = slice(seg.row, seg.row + seg.count)
        ring.write(layer, seg.slot, seg.start, k[span], v[span])
        keys, values = ring.read(layer, seg.slot, seg.start + seg.count)                # (kv_heads, S, D)
        out[span] = F.scaled_dot_product_attention(q[span].transpose(0, 1), keys, values, is_causal=True,
                                                   scale=attn.scaling, enable_gqa=True).transpose(0, 1)
    if decode is not None:
        ring.write_rows(layer, decode.slots, decode.positions, k[decode.rows], v[decode.rows])
        keys, values = ring.gather(layer, decode.slots, decode.mask.shape[-1])          # (n, kv_heads, L, D)
        # positions past a row's own length hold another frame's (or nothing's) keys: masked scores still
        # multiply their values, so a NaN/Inf there would reach this row. Zeroed in the gathered copy.
        beyond = ~decode.mask[:, :, 0, :, None]                                          # (n, 1, L, 1)
        keys, values = keys.masked_fill_(beyond, 0.0), values.masked_fill_(beyond, 0.0)
        query = q[decode.rows].unsqueeze(2)                                              # (n, heads, 1, D)
        out[decode.rows] = F.scaled_dot_product_attention(query, keys, values, attn_mask=decode.mask,
                                                          scale=attn.scaling, enable_gqa=True)[:, :, 0]
    hidden = hidden + attn.o_proj(out.reshape(rows, -1))
    return hidden + block.mlp(block.post_attention_layernorm(hidden))


class SideWeights:
    """A packed side's modules in its dtype on the CPU, each placed once and kept across rebuilds of the side
    (a partition move, a larger ring): the model's own module where it is already in `dtype`, else a converted
    copy (engine/stages.py placed), so a model shared with an fp32 prefix in this process is never mutated."""

    def __init__(self, model: VLAModel, dtype: torch.dtype = torch.float32, int8: bool = False):
        """int8: the blocks' linears in int8 (engine/int8.py; the packed decode steps' few rows go to the
        fbgemm kernel), norm and head in `dtype`."""
        self.model, self.dtype, self.int8 = model, dtype, int8
        self._placed: dict[int, torch.nn.Module] = {}
        self._blocks = {id(block): i for i, block in enumerate(model.decoder.layers)}

    def load(self, lo: int, hi: int, head: torch.nn.Module | None = None) -> None:
        """A checkpoint's modules of the side read now: blocks [lo, hi) and the suffix end's norm and head (the
        action head, or `head`: the decode vocabulary's) in this dtype; the prefix end's embeddings and vision in
        fp32 (ActionFlow embeds the rows in fp32)."""
        model = self.model
        ends = [model.decoder.norm, model.action_head if head is None else head] if hi == model.num_blocks else []
        if lo == 0:
            ensure_loaded(model, prefix_modules(model, 0), torch.float32)
        ensure_loaded(model, [*model.decoder.layers[lo:hi], *ends], self.dtype)

    def __call__(self, module: torch.nn.Module) -> torch.nn.Module:
        if id(module) not in self._placed:
            side = placed(module, CPU, self.dtype)
            if self.int8 and id(module) in self._blocks:
                side = int8_block(self.model, self._blocks[id(module)], side)
            self._placed[id(module)] = side
        return self._placed[id(module)]


class PackedSide:
    """Blocks [lo, hi) of the packed forward with the KV ring of those layers, in the dtype of `weights`
    (default: fp32, the model's own modules). The prefix side (lo == 0) also embeds the rows; the suffix side
    (hi == L) also applies the final norm and the head of `tokens`' vocabulary and picks each frame's next token
    by its policy (engine/decode/; default: greedy over the action tokens). Rows coming in are converted to its
    dtype."""

    def __init__(self, model: VLAModel, lo: int, hi: int, slots: int, slot_tokens: int,
                 weights: SideWeights | None = None, tokens: TokenDecoder | None = None):
        spec, decoder = model.spec, model.decoder
        weights = weights or SideWeights(model)
        self.tokens = tokens or TokenDecoder(model)
        ends = hi == model.num_blocks
        weights.load(lo, hi, self.tokens.head(model) if ends else None)  # a checkpoint's side: read now
        self.model, self.lo, self.hi, self.dtype = model, lo, hi, weights.dtype
        self.blocks = [weights(block) for block in decoder.layers[lo:hi]]
        self.norm, self.head = (weights(decoder.norm), weights(self.tokens.head(model))) if ends else (None, None)
        head_dim = spec.attention_head_dim
        self.ring = KVRing(range(lo, hi), slots, slot_tokens, spec.num_kv_heads, head_dim, weights.dtype)

    @torch.inference_mode()
    def blocks_forward(self, state: PackedState) -> PackedState:
        hidden = state.hidden.to(self.dtype)                     # from the boundary dtype (a no-op when equal)
        if not self.blocks:
            return PackedState(hidden, state.positions, state.segments, state.deepstack)
        cos, sin = self.model.decoder.rotary_emb(hidden.unsqueeze(0), state.positions)   # (1, R, D) each
        decode = DecodeRows.of(state.segments)
        deepstack = state.deepstack
        for layer, block in enumerate(self.blocks, start=self.lo):
            hidden = packed_block(block, layer, hidden, cos[0], sin[0], state.segments, self.ring, decode)
            if deepstack is not None:
                hidden = deepstack.after_block(layer, hidden.unsqueeze(0))[0]            # (R, H)
        left = deepstack.from_block(self.hi) if deepstack is not None else None
        return PackedState(hidden, state.positions, state.segments, left)

    @torch.inference_mode()
    def logits(self, state: PackedState) -> torch.Tensor:
        """Suffix end: the last row of each segment -> its frame's logits over the decode vocabulary (frames, V),
        fp32."""
        last = torch.tensor([seg.row + seg.count - 1 for seg in state.segments])
        normed = self.norm(state.hidden[last].to(self.dtype))                            # (frames, H)
        logits = self.tokens.logits(self.head, normed).float()                           # (frames, V)
        expect_finite(logits, "nonfinite_output", "packed step: token logits")  # argmax would pick a token
        return logits

    def next_tokens(self, state: PackedState) -> dict[int, int]:
        """Suffix end: each frame's next token by the decode policy (greedy, or its seeded draw for this step)."""
        choose, index_at = self.tokens.choose, self.tokens.index_at
        return {seg.seq: choose(row, seg.stamp_ns, index_at(seg.start, seg.count))
                for seg, row in zip(state.segments, self.logits(state))}
