"""One side's blocks over one streaming window (engine/kv_stream/layout.py): the new tokens through the blocks, each
block's attention reading the kept segments' keys and values (turned to their present positions) before the new
tokens' own; the new tokens' keys and values recorded, so that the slots computed now can be kept."""

from __future__ import annotations

from dataclasses import dataclass

import torch

from .layout import layout_mask, new_token_index, span_index, turn, turning
from .store import Segment


class LayoutCache:
    """What a block's attention calls `cache.update` on (transformers' Cache protocol, the one method the decoder
    layers use): the kept segments' keys (turned to their present positions, block by block as each asks, so no
    second copy of every block's kept KV is made) and values go before the new tokens' own; the new ones are
    recorded."""

    def __init__(self, kept: list):
        self.kept, self.new = kept, {}                       # kept: [(Segment, its turning (cos, sin))], slot order

    def update(self, key: torch.Tensor, value: torch.Tensor, layer_idx: int, *args, **kwargs):
        self.new[layer_idx] = (key, value)                                             # (1, kv_heads, n_new, D)
        if not self.kept:
            return key, value
        keys = [turn(segment.kv[layer_idx][0], rotation) for segment, rotation in self.kept]
        values = [segment.kv[layer_idx][1] for segment, _ in self.kept]
        return torch.cat([*keys, key], dim=-2), torch.cat([*values, value], dim=-2)


@dataclass
class WindowResult:
    hidden: torch.Tensor        # (1, n_new, H): the new tokens after the side's last block
    new_index: torch.Tensor     # (n_new,) their layout indices, ascending
    new_kv: dict                # block index -> (keys, values) of the new tokens, (1, kv_heads, n_new, D)


def run_window(decoder, blocks, hidden: torch.Tensor, position_ids: torch.Tensor, spans, segments) -> WindowResult:
    """blocks: [(index, block)] in order; hidden (1, S, H): the whole layout's rows at the side's first block (only
    the new tokens' are read); position_ids (3, 1, S) or (1, S); spans: each image slot's [start, end); segments: per
    slot its kept Segment, or None where it is computed now."""
    kept_spans = [span for span, segment in zip(spans, segments) if segment is not None]
    new_index = new_token_index(hidden.shape[1], kept_spans)                           # (n_new,)
    rows = hidden[:, new_index]                                                        # (1, n_new, H)
    if not blocks:
        return WindowResult(rows, new_index, {})
    key_index = torch.cat([span_index(kept_spans), new_index])                         # kept first, then new
    # nothing kept under sdpa: no mask, its causal flag, the very call run_blocks makes (the window equals the full
    # one); else the layout mask (1, 1, n_new, n_keys)
    plain = not kept_spans and decoder.config._attn_implementation == "sdpa"
    mask = None if plain else layout_mask(key_index, new_index, decoder.config, rows.dtype).to(rows.device)
    positions = position_ids[..., new_index]
    cache = LayoutCache([(segment, turning(decoder, segment.positions, position_ids[..., start:end]))
                         for (start, end), segment in zip(spans, segments) if segment is not None])
    position_embeddings = decoder.rotary_emb(rows, positions)
    for _, block in blocks:
        rows = block(rows, attention_mask=mask, position_embeddings=position_embeddings, position_ids=None,
                     cache=cache)
    return WindowResult(rows, new_index, cache.new)


def segment_of(result: WindowResult, span: tuple[int, int], position_ids: torch.Tensor, serial: int,
               rows: torch.Tensor | None = None) -> Segment:
    """The slot at `span`, computed in this window, as a Segment to keep (its own copies, not views)."""
    start, end = span
    offset = int(torch.searchsorted(result.new_index, start))
    kv = {index: (key.narrow(-2, offset, end - start).clone(), value.narrow(-2, offset, end - start).clone())
          for index, (key, value) in result.new_kv.items()}
    return Segment(serial, position_ids[..., start:end].clone(), kv, rows)
