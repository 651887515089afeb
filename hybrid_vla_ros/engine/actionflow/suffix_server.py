"""The suffix side of ActionFlow served across processes (ROS-free): a packed step's bytes in
(engine/actionflow/codec.py) -> the next token of each of its frames as bytes, and the actions this step
completed. The suffix knows each frame's tokens, stamp and arrival from the segments it saw; its KV ring
follows the partition of the prefix's header and the slots its steps use (never the slots a header claims:
a step claiming more than `max_slots`, the prefix's pack x pack_groups, is refused before anything is
allocated), so a partition move or a resized ring on the prefix side needs nothing here; its tokens per
frame come from the model. Counterpart: engine/actionflow/prefix_server.py.
"""

from __future__ import annotations

import time
from collections import deque
from dataclasses import dataclass

import torch

from ...errors import ConfigError, InputError, expect, expect_finite
from ...model.vla import VLAModel
from .packing import ActionResult, check_rows_fit_model
from .forward import PackedSide, PackedState, SideWeights
from .codec import check_fits, decode_state, encode_tokens
from .prefix_server import MAX_SLOTS
from ..decode.decoder import TokenDecoder
from ..decode.policy import DecodePolicy

RECENT_STEPS = 64  # the ring holds the highest slot used by this many recent steps: a frame in flight is in every
                   # step of its group (at most MAX_GROUPS groups alternate), so its slot is seen well within them


@dataclass
class SuffixStep:
    tokens_payload: bytes        # the next token of every frame of the step, for the prefix
    step: int
    rows: int
    partition: int
    completed: list[ActionResult]
    arrivals: dict[int, int]     # seq -> arrival_ns of each completed frame (0: unknown)
    incomplete: list[tuple[int, int]]  # (seq, stamp_ns) of frames lost here that the prefix never gave up
    expired: bool = False        # done after the step's deadline: nothing to publish, its frames dropped here


@dataclass
class Decoding:
    seq: int
    stamp_ns: int
    arrival_ns: int
    started: float
    tokens: list[int]
    from_prefill: bool = True    # False: first seen at a decode row (this suffix missed the prefill: restarted)


class PackedSuffixServer:
    def __init__(self, model: VLAModel, zone: tuple[int, int] | None = None, dtype: torch.dtype = torch.float32,
                 boundary_dtype: torch.dtype | None = torch.float32, max_slots: int = MAX_SLOTS, int8: bool = False,
                 decode: DecodePolicy | None = None):
        """zone: the partitions this suffix accepts; their blocks are read and placed now (a checkpoint model),
        not at the first step. dtype: the suffix's blocks, norm, token head and KV ring (its own copies where
        the model's modules are in another dtype). boundary_dtype: the hidden rows' dtype taken (None: any a
        prefix computes in, fp32/fp16/bf16), converted to `dtype`. max_slots: the most KV ring slots a step may
        claim, the prefix's pack x pack_groups (default: the most any prefix may configure). int8: the blocks'
        linears in int8 (engine/int8.py). decode: how tokens are picked and when a frame ends (engine/decode/;
        the prefix's must be the same: it frees a frame's slot by the same rule)."""
        expect(model.kind == "tokens", ConfigError,
               f"model '{model.spec.name}' has a waypoint head: it is served by the suffix stage, not ActionFlow")
        expect(isinstance(max_slots, int) and 1 <= max_slots <= MAX_SLOTS, ConfigError,
               f"max_slots={max_slots!r}: expected 1..{MAX_SLOTS} (pack x pack_groups of the prefix)")
        self.zone, self.boundary_dtype, self.max_slots = zone, boundary_dtype, max_slots
        self.used: deque[int] = deque(maxlen=RECENT_STEPS)   # each recent step's highest slot + 1
        self.tokens = TokenDecoder(model, decode)
        self.weights = SideWeights(model, dtype, int8)
        if zone is not None:
            self.weights.load(zone[0], model.num_blocks, self.tokens.head(model))
            for module in [*model.decoder.layers[zone[0]:], model.decoder.norm, self.tokens.head(model)]:
                self.weights(module)
        self.model, self.slot_tokens = model, self.tokens.slot_tokens
        self.tokens_per_frame = self.tokens.max_tokens
        self.side: PackedSide | None = None
        self.decoding: dict[int, Decoding] = {}    # slot -> the frame whose tokens this suffix has decoded
        self.expired_steps = 0                     # steps done after their deadline (dropped unanswered)

    @property
    def partition(self) -> int | None:
        return None if self.side is None else self.side.lo

    def step(self, payload) -> SuffixStep:
        """Blocks [p, L) + head over the packed rows; an InputError (nothing changed) when the bytes are damaged,
        do not fit this model, or are cut outside this suffix's zone."""
        state, header = decode_state(payload)
        self._check(state, header)
        expect_finite(state.hidden, "nonfinite_boundary", f"packed step {header.step}: hidden rows")
        zone = self.zone
        expect(zone is None or zone[0] <= header.partition <= zone[1], InputError,
               f"packed boundary cut at p={header.partition}, outside this suffix's dynamic zone {list(zone or ())}")
        incomplete = self._follow(header.partition, state.segments)
        hidden = self.side.blocks_forward(state)
        tokens = self.side.next_tokens(hidden)
        if header.deadline_ns and time.time_ns() > header.deadline_ns:
            return self._expired(state, header, incomplete)
        completed, arrivals = [], {}
        for seg in state.segments:
            entry = self.decoding.get(seg.slot)
            if seg.count > 1 or entry is None or entry.seq != seg.seq:   # a prefill starts a frame in the slot
                if entry is not None and entry.seq != seg.seq and not entry.from_prefill:
                    incomplete.append((entry.seq, entry.stamp_ns))
                entry = self.decoding[seg.slot] = Decoding(seg.seq, seg.stamp_ns, seg.arrival_ns,
                                                           time.perf_counter(), [], seg.count > 1)
            entry.tokens.append(tokens[seg.seq])
            if self.tokens.ended(entry.tokens):
                completed.append(self._complete(self.decoding.pop(seg.slot)))
                arrivals[seg.seq] = seg.arrival_ns
        return SuffixStep(encode_tokens(tokens, header.step), header.step, state.hidden.shape[0], header.partition,
                          completed, arrivals, incomplete)

    def _expired(self, state: PackedState, header, incomplete: list) -> SuffixStep:
        """Done after the step's deadline: the prefix gives these frames up (and counts them, once); answering
        now could publish a frame it reports lost. Nothing is published; their entries go."""
        for seg in state.segments:
            entry = self.decoding.get(seg.slot)
            if entry is not None and entry.seq == seg.seq:
                del self.decoding[seg.slot]
        self.expired_steps += 1
        return SuffixStep(b"", header.step, state.hidden.shape[0], header.partition, [], {}, incomplete, True)

    def _check(self, state: PackedState, header) -> None:
        spec = self.model.spec
        expect(0 <= header.partition <= spec.num_blocks, InputError,
               f"packed boundary cut at p={header.partition}, model '{spec.name}' has {spec.num_blocks} blocks")
        expect(0 < header.slots <= self.max_slots, InputError,
               f"packed step {header.step}: its header claims a KV ring of {header.slots} slots, this suffix takes "
               f"at most {self.max_slots} (pack x pack_groups): refused before anything is allocated")
        check_fits(state, header.slots, self.slot_tokens, "packed boundary")
        check_rows_fit_model(state, self.model, header.partition, self.boundary_dtype)

    def _follow(self, partition: int, segments: list) -> list[tuple[int, int]]:
        """This side's ring for the step: (re)built when the cut moved (frames mid-decode are then lost); else
        resized in place to the highest slot the last RECENT_STEPS steps used, + 1, rounded up to a power of two
        (few resizes while a ring fills) and at most max_slots; the slots that stay keep their frames, frames in
        slots cut off are lost. -> the lost frames this suffix counts (the rest are the prefix's)."""
        self.used.append(max(seg.slot for seg in segments) + 1)
        slots = min(self.max_slots, 1 << (max(self.used) - 1).bit_length())
        if self.side is None or self.side.lo != partition:
            self.side = PackedSide(self.model, partition, self.model.num_blocks, slots, self.slot_tokens, self.weights,
                                   self.tokens)
            return self._forget(lambda slot: True)
        if slots != self.side.ring.slots:
            self.side.ring.resize(slots)
            return self._forget(lambda slot: slot >= slots)
        return []

    def _forget(self, gone) -> list[tuple[int, int]]:
        """The frames decoded in the slots where gone(slot) dropped: -> those first seen here at a decode row
        (seq, stamp): the prefix does not know they are lost (it counts the frames it prefilled)."""
        lost = [(e.seq, e.stamp_ns) for slot, e in self.decoding.items() if gone(slot) and not e.from_prefill]
        self.decoding = {slot: e for slot, e in self.decoding.items() if not gone(slot)}
        return lost

    @torch.inference_mode()
    def _complete(self, entry: Decoding) -> ActionResult:
        return self.tokens.result(entry.tokens, entry.seq, entry.stamp_ns, self.side.lo,
                                  time.perf_counter() - entry.started)
