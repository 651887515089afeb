"""One side's blocks over one streaming window (engine/kv_stream/layout.py): the new tokens through the blocks, each
block's attention reading the kept segments' keys and values (turned to their present positions) before the new
tokens' own; the new tokens' keys and values recorded, so that the slots computed now can be kept."""

from __future__ import annotations

from dataclasses import dataclass

import torch

from .layout import layout_mask, new_token_index, rerotate, span_index
from .store import Segment


class LayoutCache:
    """What a block's attention calls `cache.update` on (transformers' Cache protocol, the one method the decoder
    layers use): per block index, the kept keys/values go before the new tokens' own; the new ones are recorded."""

    def __init__(self, kept: dict):
        self.kept, self.new = kept, {}

    def update(self, key: torch.Tensor, value: torch.Tensor, layer_idx: int, *args, **kwargs):
        self.new[layer_idx] = (key, value)                                             # (1, kv_heads, n_new, D)
        if layer_idx not in self.kept:
            return key, value
        kept_key, kept_value = self.kept[layer_idx]
        return torch.cat([kept_key, key], dim=-2), torch.cat([kept_value, value], dim=-2)


@dataclass
class WindowResult:
    hidden: torch.Tensor        # (1, n_new, H): the new tokens after the side's last block
    new_index: torch.Tensor     # (n_new,) their layout indices, ascending
    new_kv: dict                # block index -> (keys, values) of the new tokens, (1, kv_heads, n_new, D)


def kept_kv(decoder, blocks, position_ids: torch.Tensor, spans, segments) -> dict:
    """block index -> the kept segments' (keys, values), in slot order, keys turned to this window's positions."""
    out = {}
    for index, _ in blocks:
        keys, values = [], []
        for (start, end), segment in zip(spans, segments):
            if segment is None:
                continue
            key, value = segment.kv[index]
            keys.append(rerotate(decoder, key, segment.positions, position_ids[..., start:end]))
            values.append(value)
        if keys:
            out[index] = (torch.cat(keys, dim=-2), torch.cat(values, dim=-2))
    return out


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
    # mask (1, 1, n_new, n_keys)
    # nothing kept: the plain causal layout, the very call run_blocks makes (so the window equals the full one)
    mask = layout_mask(key_index, new_index, decoder.config, rows.dtype).to(rows.device) if kept_spans else None
    positions = position_ids[..., new_index]
    cache = LayoutCache(kept_kv(decoder, blocks, position_ids, spans, segments))
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
