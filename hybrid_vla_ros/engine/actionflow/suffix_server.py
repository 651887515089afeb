"""The suffix side of ActionFlow served across processes (ROS-free): a packed step's bytes in
(engine/actionflow/codec.py) -> the next token of each of its frames as bytes, and the actions this step
completed. The suffix knows each frame's tokens, stamp and arrival from the segments it saw; its KV ring
follows the prefix's header (partition, ring slots), so a partition move or a resized ring on the prefix
side needs nothing here; its tokens per frame come from the model. Counterpart: engine/actionflow/prefix_server.py.
"""

from __future__ import annotations

import time
from dataclasses import dataclass

import torch

from ...errors import ConfigError, InputError, expect, expect_finite
from ...model.vla import VLAModel
from ...types import Trajectory
from .packing import ActionResult, check_rows_fit_model, slot_tokens_of
from .forward import PackedSide, PackedState, SideWeights
from .codec import check_fits, decode_state, encode_tokens
from .prefix_server import MAX_SLOTS


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
                 boundary_dtype: torch.dtype | None = torch.float32):
        """zone: the partitions this suffix accepts; their blocks are read and placed now (a checkpoint model),
        not at the first step. dtype: the suffix's blocks, norm, token head and KV ring (its own copies where
        the model's modules are in another dtype). boundary_dtype: the hidden rows' dtype taken (None: any a
        prefix computes in, fp32/fp16/bf16), converted to `dtype`."""
        expect(model.spec.action_head == "tokens", ConfigError,
               f"model '{model.spec.name}' has a waypoint head: it is served by the suffix stage, not ActionFlow")
        self.zone, self.boundary_dtype = zone, boundary_dtype
        self.weights = SideWeights(model, dtype)
        if zone is not None:
            self.weights.load(zone[0], model.num_blocks)
            for module in [*model.decoder.layers[zone[0]:], model.decoder.norm, model.action_head]:
                self.weights(module)
        self.model, self.slot_tokens = model, slot_tokens_of(model)
        self.tokens_per_frame = model.action_tokenizer.tokens_per_frame
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
        incomplete = self._follow(header.partition, header.slots)
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
            if len(entry.tokens) == self.tokens_per_frame:
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
        expect(0 < header.slots <= MAX_SLOTS, InputError,
               f"packed boundary: a ring of {header.slots} slots, expected 1..{MAX_SLOTS}")
        check_fits(state, header.slots, self.slot_tokens, "packed boundary")
        check_rows_fit_model(state, self.model, header.partition, self.boundary_dtype)

    def _follow(self, partition: int, slots: int) -> list[tuple[int, int]]:
        """(Re)build this side's ring when the prefix's cut moved or its ring outgrew this one; frames
        mid-decode are then lost. The ring only grows (to MAX_SLOTS at most): headers alternating between
        ring sizes cost one allocation, not one of every layer per step."""
        if self.side is not None and self.side.lo == partition and slots <= self.side.ring.slots:
            return []
        lost = [(e.seq, e.stamp_ns) for e in self.decoding.values() if not e.from_prefill]  # the rest: the prefix's
        self.side = PackedSide(self.model, partition, self.model.num_blocks, slots, self.slot_tokens, self.weights)
        self.decoding.clear()
        return lost

    @torch.inference_mode()
    def _complete(self, entry: Decoding) -> ActionResult:
        points = self.model.action_tokenizer.waypoints(entry.tokens)
        trajectory = Trajectory(points=points, seq=entry.seq, stamp_ns=entry.stamp_ns, partition=self.side.lo)
        return ActionResult(entry.seq, entry.stamp_ns, list(entry.tokens), trajectory,
                            time.perf_counter() - entry.started)
