"""The unified KV ring buffer of ActionFlow: one preallocated, contiguous key store and value store per layer
holding the cache of every in-flight frame. A frame takes a slot when its prefill starts and gives it back
when its last action token is out; the next frame reuses the slot in place. Keys are stored with RoPE
already applied (written once, at their position), so a decode step never rotates the past again. Nothing
is allocated or copied on the hot path: writes are slice assignments, reads are views."""

from __future__ import annotations

from collections import deque

import torch

from ...errors import ConfigError, expect


def check_ring(pack: int, slot_tokens: int, ring_tokens: int | None, slots: int | None = None) -> int:
    """K frames in flight of `slot_tokens` each (prefill + fed-back action tokens): -> the slot count; refused
    with the reason when the ring (ring_tokens, default exactly enough) cannot hold them."""
    expect(isinstance(pack, int) and pack >= 1, ConfigError, f"pack={pack!r}: expected an integer >= 1 "
                                                               f"(frames in flight)")
    slots = pack if slots is None else slots
    if ring_tokens is not None:
        expect(ring_tokens >= slots * slot_tokens, ConfigError,
               f"KV ring of {ring_tokens} tokens cannot hold {slots} frames in flight of {slot_tokens} tokens "
               f"each (prefill + action tokens): it needs {slots * slot_tokens}; lower pack or raise the ring")
    return slots


class KVRing:
    """Per layer in `layers`: keys and values (slots, kv_heads, slot_tokens, head_dim)."""

    def __init__(self, layers, slots: int, slot_tokens: int, kv_heads: int, head_dim: int,
                 dtype: torch.dtype = torch.float32, device: str | torch.device = "cpu"):
        shape = (slots, kv_heads, slot_tokens, head_dim)
        self.keys = {i: torch.zeros(shape, dtype=dtype, device=device) for i in layers}
        self.values = {i: torch.zeros(shape, dtype=dtype, device=device) for i in layers}
        self.slots, self.slot_tokens = slots, slot_tokens
        self.free: deque[int] = deque(range(slots))
        self.taken = 0  # slots handed out so far (how many times the ring went round: taken / slots)

    def resize(self, slots: int) -> None:
        """In place, to `slots` slots: the first min(old, new) kept as they are (frames mid-decode in them go
        on), new ones zero; each layer's store reallocated once (slots, kv_heads, slot_tokens, head_dim)."""
        keep = min(slots, self.slots)
        for store in (self.keys, self.values):
            for layer, old in store.items():
                new = old.new_zeros((slots, *old.shape[1:]))
                new[:keep] = old[:keep]
                store[layer] = new
        self.free = deque([s for s in self.free if s < slots] + list(range(self.slots, slots)))
        self.slots = slots

    def acquire(self) -> int:
        """A free slot, cleared: nothing of the frame that held it before (a NaN included) can reach the next."""
        expect(bool(self.free), ConfigError, f"KV ring: all {self.slots} slots are in flight")
        self.taken += 1
        slot = self.free.popleft()
        for store in (*self.keys.values(), *self.values.values()):
            store[slot].zero_()
        return slot

    def release(self, slot: int) -> None:
        expect(0 <= slot < self.slots and slot not in self.free, ConfigError, f"KV ring: slot {slot} is not in use")
        self.free.append(slot)

    def write(self, layer: int, slot: int, start: int, keys: torch.Tensor, values: torch.Tensor) -> None:
        """keys, values (n, kv_heads, head_dim) of positions [start, start + n) of the slot's frame."""
        end = start + keys.shape[0]
        expect(end <= self.slot_tokens, ConfigError,
               f"KV ring: a frame needs position {end - 1}, slots hold {self.slot_tokens} tokens")
        self.keys[layer][slot, :, start:end] = keys.transpose(0, 1)
        self.values[layer][slot, :, start:end] = values.transpose(0, 1)

    def write_rows(self, layer: int, slots: torch.Tensor, positions: torch.Tensor, keys: torch.Tensor,
                   values: torch.Tensor) -> None:
        """One token per frame: keys, values (n, kv_heads, head_dim) at (slots[i], positions[i]), one write."""
        expect(int(positions.max()) < self.slot_tokens, ConfigError,
               f"KV ring: a frame needs position {int(positions.max())}, slots hold {self.slot_tokens} tokens")
        self.keys[layer][slots, :, positions] = keys
        self.values[layer][slots, :, positions] = values

    def gather(self, layer: int, slots: torch.Tensor, end: int) -> tuple[torch.Tensor, torch.Tensor]:
        """The first `end` positions of several slots (n, kv_heads, end, head_dim): one gather per step and
        layer for all decode rows (a copy; positions past a frame's own length are masked by the caller)."""
        return self.keys[layer][slots, :, :end], self.values[layer][slots, :, :end]

    def read(self, layer: int, slot: int, end: int) -> tuple[torch.Tensor, torch.Tensor]:
        """Views of the slot's keys and values (kv_heads, end, head_dim)."""
        return self.keys[layer][slot, :, :end], self.values[layer][slot, :, :end]
