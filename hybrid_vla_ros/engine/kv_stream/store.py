"""The kept segments of one side of the cut (engine/kv_stream/layout.py): per image slot computed in a window, its
keys and values for the blocks that side runs, the positions its keys were rotated at, and (the prefix) its boundary
rows, so that a later window sends the whole boundary state. Bounded: a window reads image_slots segments, and with a
frame stride s the windows of s interleaved chains alternate, so image_slots x max(2, s) are kept, the least recently
used dropped. At real size that is per segment 2 x blocks x n x kv_heads x head_dim values: at Alpamayo's shapes (36
blocks, 8 x 128, ~180 tokens an image) 26 MB in bf16 for all blocks, so 16 slots x 2 windows ~0.8 GB across both
sides (the prefix's share p / 36 of it plus each segment's boundary rows, n x hidden)."""

from __future__ import annotations

from collections import OrderedDict
from dataclasses import dataclass, field

import torch


@dataclass
class Segment:
    serial: int                                  # the prefix's number for it: both sides key it by that
    positions: torch.Tensor                      # (3, 1, n) or (1, n): where its keys were rotated
    kv: dict = field(default_factory=dict)       # block index -> (keys, values), each (1, kv_heads, n, D)
    rows: torch.Tensor | None = None             # (1, n, H): the prefix's boundary rows of its tokens


class SegmentStore:
    """key -> Segment, at most `capacity`; tied to one partition: a move of the cut empties it (its KV and rows were
    computed for the old one) and the next window is computed whole (counted in `rebuilds`)."""

    def __init__(self, capacity: int):
        self.capacity = max(1, capacity)
        self.kept: OrderedDict = OrderedDict()
        self.partition: int | None = None
        self.rebuilds = 0

    def use_partition(self, partition: int) -> None:
        if partition != self.partition:
            if self.kept:
                self.rebuilds += 1
            self.kept.clear()
            self.partition = partition

    def get(self, key) -> Segment | None:
        segment = self.kept.get(key)
        if segment is not None:
            self.kept.move_to_end(key)
        return segment

    def put(self, key, segment: Segment) -> None:
        self.kept[key] = segment
        self.kept.move_to_end(key)
        while len(self.kept) > self.capacity:
            self.kept.popitem(last=False)

    def clear(self) -> None:
        self.kept.clear()

    def nbytes(self) -> int:
        """Bytes the kept segments hold (keys, values, rows)."""
        tensors = [t for seg in self.kept.values() for kv in seg.kv.values() for t in kv] + \
            [seg.rows for seg in self.kept.values() if seg.rows is not None]
        return sum(t.numel() * t.element_size() for t in tensors)
