"""ActionFlow: cross-frame packed prefill + decode for VLAs that emit their action (or reasoning) as tokens.

A frame needs one prefill (S prompt tokens) and up to T - 1 decode steps (T = the decode policy's max_tokens;
engine/decode/: greedy or seeded sampling, action bins or the full vocabulary, stop ids). Decoded one frame at a
time, each decode step is a batch-1, weight-bound forward. With up to K frames in flight, one packed forward
carries the prefill of the next waiting frame together with one decode row of every older in-flight frame:

    rows  [ prefill of frame f (S rows) | decode of f-1 (1 row) | decode of f-2 | ... ]   hidden (R, H)

Each frame attends only to its own keys (per-frame causal attention over its slot of the KV ring,
engine/actionflow/kv_ring.py), at its own positions (M-RoPE rows for Qwen-VL). A frame's action is complete after its
last token (a stop id or its T-th), so outputs lag inputs by up to T - 1 steps, and frames of one pack end at
different steps: a finished frame leaves the pack at once and frees its ring slot for the next prefill.
Nothing is emitted for a frame before it is complete (cold start included). The packed forward is cut at p
like the single-frame one: `PackedSide` runs blocks [lo, hi) with a KV ring of its own layers; the boundary
is the packed hidden state plus its layout (`PackedState`). The dense projections and MLPs see all R rows at
once: that is where packing wins.

The baseline and exactness reference (plain prefill then the same policy's decode, one frame at a time, through
the transformers decoder layers with their own DynamicCache) is reference.py.
"""

from __future__ import annotations

import time
from collections import deque
from contextlib import contextmanager
from dataclasses import dataclass, field

import torch

from ...errors import ConfigError, HybridVLAError, InputError, expect
from ...model.vla import VLAModel
from ...types import DeepStack, Frame
from .kv_ring import check_ring
from .forward import PackedSide, PackedState, Segment, SideWeights
from .codec import check_fits, decode_state, encode_tokens
from ..decode.decoder import TokenDecoder
from ..decode.policy import DecodePolicy
from ..decode.result import ActionResult
from ..placement import check_boundary_dtype
from ..scheduling.partition import check_partition
from ..stages import frame_embeddings


def stamps(frame: Frame) -> tuple[int, int]:
    """What a frame's segments carry besides their rows: its stamp and arrival."""
    return frame.stamp_ns, frame.arrival_ns or 0


def check_rows_fit_model(state: PackedState, model: VLAModel, partition: int, boundary_dtype: torch.dtype | None,
                         source: str = "packed boundary") -> None:
    """Hidden rows of this model's width in `boundary_dtype` (None: any dtype a prefix computes in; placement.py
    check_boundary_dtype), positions of its family's layout (M-RoPE or 1-D), and the DeepStack additions
    still due for a prefill cut below the DeepStack depth (none otherwise)."""
    prefill = any(seg.count > 1 for seg in state.segments)
    due = max(0, model.family.deepstack_blocks(model.backbone.config) - partition) if prefill else 0
    have = 0 if state.deepstack is None else state.deepstack.features.shape[0]
    expect(have == due, InputError, f"{source}: {have} DeepStack additions at p={partition}, "
                                    f"{due} due ({'a' if prefill else 'no'} prefill in the step)")
    width = model.spec.hidden_size
    expect(state.hidden.shape[1] == width, InputError,
           f"{source}: hidden rows of {state.hidden.shape[1]} {state.hidden.dtype}, this model's are {width} wide")
    check_boundary_dtype(state.hidden.dtype, boundary_dtype, f"{source}: hidden rows'")
    layout = model.family.position_ids_shape(1)
    expect(state.positions.dim() == len(layout), InputError,
           f"{source}: positions of {state.positions.dim()} dims, model '{model.spec.name}' uses "
           f"{len(layout)} ({'M-RoPE' if len(layout) == 3 else '1-D'} positions)")


@dataclass
class InFlight:
    frame: Frame
    slot: int
    length: int = 0               # tokens of this frame in its KV slot
    next_position: int = 0        # RoPE position of the next token fed back
    tokens: list[int] = field(default_factory=list)
    started: float = 0.0          # when its prefill was packed (latency = started -> its last token)


class ActionFlow:
    """Frames in, complete actions out, with up to `pack` frames in flight in one packed forward, cut at
    `partition` (None: unsplit). step() = plan -> prefix side -> suffix side -> finish; the split runner
    (run_alternating) overlaps the two sides of two independent groups."""

    def __init__(self, model: VLAModel, pack: int, partition: int | None = None, ring_tokens: int | None = None,
                 prefix_side: PackedSide | None = None, with_suffix: bool = True, prepare=None,
                 suffix_dtype: torch.dtype = torch.float32, decode: DecodePolicy | None = None):
        """prefix_side: a prefix side shared with other groups (its ring hands out the slots of all of them;
        partition is then its cut); with_suffix=False: the suffix side lives elsewhere (another process);
        suffix_dtype: the suffix side's (its own copies of its modules when the model's differ).
        prepare(frame) -> bool: runs before a frame's prefill (the ROS node decodes its images there); False
        skips the frame (the caller counted why), a HybridVLAError fails it; the other frames go on.
        decode: how each frame's tokens are decoded and when it ends (engine/decode/policy.py; default: greedy,
        the model's action tokens)."""
        spec = model.spec
        expect(model.kind == "tokens", ConfigError,
               f"model '{spec.name}' has a waypoint head; ActionFlow needs a model that decodes its plan token by "
               f"token (action tokens, e.g. tiny-act, or a text answer)")
        self.model, self.pack, self.prepare = model, pack, prepare
        self.tokens = TokenDecoder(model, decode)
        self.tokens_per_frame = self.tokens.max_tokens    # the most a frame decodes
        if prefix_side is not None:
            check_ring(pack, prefix_side.ring.slot_tokens, None)
            expect(prefix_side.ring.slot_tokens >= self.tokens.slot_tokens, ConfigError,
                   f"shared KV ring slots of {prefix_side.ring.slot_tokens} tokens, a frame decoding up to "
                   f"{self.tokens.max_tokens} tokens needs {self.tokens.slot_tokens}")
            self.prefix, self.partition = prefix_side, prefix_side.hi
        else:
            slots = check_ring(pack, self.tokens.slot_tokens, ring_tokens)
            self.partition = spec.num_blocks if partition is None else \
                check_partition(partition, spec.num_blocks, "ActionFlow partition")
            self.prefix = PackedSide(model, 0, self.partition, slots, self.tokens.slot_tokens, tokens=self.tokens)
        self.suffix = PackedSide(model, self.partition, spec.num_blocks, self.prefix.ring.slots,
                                 self.prefix.ring.slot_tokens, SideWeights(model, suffix_dtype),
                                 self.tokens) if with_suffix else None
        self.waiting: deque[Frame] = deque()
        self.flight: dict[int, InFlight] = {}        # seq -> frame being decoded
        self.failed: list[ActionResult] = []
        self.steps = 0

    # ---- the host side: what is in flight -------------------------------------------------------------------
    def submit(self, frame: Frame) -> None:
        self.waiting.append(frame)

    @property
    def busy(self) -> bool:
        return bool(self.waiting or self.flight)

    def release(self, seq: int, error: str = "", reason: str = "invalid_input") -> None:
        """Drop an in-flight frame (it failed, or its output is no longer wanted): its slot is free now."""
        entry = self.flight.pop(seq)
        self.prefix.ring.release(entry.slot)
        if error:
            self.failed.append(ActionResult(seq, entry.frame.stamp_ns, None, None,
                                            time.perf_counter() - entry.started, error, reason))

    # ---- one packed step ---------------------------------------------------------------------------------
    @torch.inference_mode()
    def prefix_step(self) -> PackedState | None:
        """Rows of this step through blocks [0, p): one decode row per in-flight frame, then the prefill of the
        oldest waiting frame when a slot is free. None when there is nothing to do."""
        rows, positions, segments = [], [], []
        decoder, count = self.model.decoder, 0
        layout = self.model.family.position_ids_shape(1)                               # (3, 1, 1) or (1, 1)
        for entry in self.flight.values():
            rows.append(decoder.embed_tokens(torch.tensor([entry.tokens[-1]])))       # (1, H)
            positions.append(torch.full(layout, entry.next_position, dtype=torch.long))
            segments.append(Segment(entry.frame.seq, entry.slot, entry.length, count, 1, *stamps(entry.frame)))
            count += 1
        admitted, deepstack = self._admit(), None
        if admitted is not None:
            entry, embeds, pos, deepstack = admitted
            segments.append(Segment(entry.frame.seq, entry.slot, 0, count, embeds.shape[0], *stamps(entry.frame)))
            rows.append(embeds)
            positions.append(pos)
            if deepstack is not None:  # the prefill's image tokens sit at rows count + their positions
                deepstack = DeepStack(deepstack.positions + count, deepstack.features, deepstack.first_block)
        if not segments:
            return None
        state = PackedState(torch.cat(rows), torch.cat(positions, dim=-1), segments, deepstack)  # (R, H), (.., R)
        with self.failing_on_error(segments):
            return self.prefix.blocks_forward(state)

    @contextmanager
    def failing_on_error(self, segments: list[Segment]):
        """A step that raises fails its frames (slots freed, each reported once in `failed`) and re-raises: a
        frame admitted without its token would otherwise wedge the group (every later step an IndexError)."""
        try:
            yield
        except Exception as exc:
            for seg in segments:
                if seg.seq in self.flight:
                    self.release(seg.seq, f"packed step failed ({type(exc).__name__}: {exc})", "step_failed")
            raise

    def _admit(self):
        """The oldest waiting frame, embedded, in a fresh slot; a frame that cannot be embedded fails alone.
        The prefix side's ring hands out the slots; the suffix's ring follows the slot numbers of the layout."""
        while self.waiting and len(self.flight) < self.pack:
            frame = self.waiting.popleft()
            try:
                if self.prepare is not None and not self.prepare(frame):
                    continue  # refused by the caller (which counted why)
                embeds, pos, _, deepstack = frame_embeddings(self.model, frame)        # (1, S, H), (.., 1, S)
            except HybridVLAError as exc:
                self.failed.append(ActionResult(frame.seq, frame.stamp_ns, None, None, 0.0, str(exc), "invalid_input"))
                continue
            # after the prompt, text continues at its largest position + 1 (in all three M-RoPE rows)
            entry = InFlight(frame, self.prefix.ring.acquire(), next_position=int(pos.max()) + 1,
                             started=time.perf_counter())
            self.flight[frame.seq] = entry
            return entry, embeds[0], pos, deepstack
        return None

    @torch.inference_mode()
    def suffix_step(self, state: PackedState) -> dict[int, int]:
        """Blocks [p, L) + norm + head: seq -> the frame's next token."""
        return self.suffix.next_tokens(self.suffix.blocks_forward(state))

    def suffix_step_payload(self, payload: bytes) -> bytes:
        """The suffix side in another process: the packed state as bytes in (engine/actionflow/codec.py), the next
        tokens as bytes out, for the same step. Only this side's ring is used; a payload that is damaged, cut
        elsewhere or does not fit this ring is an InputError."""
        state, header = decode_state(payload)
        partition, step = header.partition, header.step
        expect(partition == self.partition, InputError,
               f"packed boundary cut at p={partition}, this suffix runs blocks [{self.partition}, L)")
        check_fits(state, self.suffix.ring.slots, self.suffix.ring.slot_tokens, "packed boundary")
        check_rows_fit_model(state, self.model, partition, self.prefix.dtype)   # what this host's prefix sends
        return encode_tokens(self.suffix_step(state), step)

    def finish(self, state: PackedState, tokens: dict[int, int]) -> list[ActionResult]:
        """Append each frame's new token (fed back at its next step); a frame that decoded a stop id or its
        max_tokens-th token is complete: it leaves the pack, its slot is freed, its result goes out."""
        self.steps += 1
        done = []
        for seg in state.segments:
            entry = self.flight.get(seg.seq)
            if entry is None:  # released while its step was in flight
                continue
            if seg.start > 0:  # a decode row: its token went in at next_position
                entry.next_position += 1
            entry.length = seg.start + seg.count
            entry.tokens.append(tokens[seg.seq])
            if self.tokens.ended(entry.tokens):
                done.append(self._complete(entry))
        return done

    def _complete(self, entry: InFlight) -> ActionResult:
        self.flight.pop(entry.frame.seq)
        self.prefix.ring.release(entry.slot)
        return self.tokens.result(entry.tokens, entry.frame.seq, entry.frame.stamp_ns, self.partition,
                                  time.perf_counter() - entry.started)

    def step(self) -> list[ActionResult]:
        state = self.prefix_step()
        if state is None:
            return []
        with self.failing_on_error(state.segments):
            return self.finish(state, self.suffix_step(state))

    def run(self, frames) -> list[ActionResult]:
        """All frames through, in one group; results in completion order (failed frames included)."""
        for frame in frames:
            self.submit(frame)
        results = []
        while self.busy:
            try:
                results += self.step()
            except Exception:  # noqa: BLE001 - the step's frames are failed (self.failed); the rest go on
                continue
        return results + self.failed


# ---- split + packed: two independent groups keep both sides busy ----------------------------------------------

def run_alternating(groups: list[ActionFlow], frames, suffix_cores: set[int] | None = None) -> list[ActionResult]:
    """Each token of a frame needs the suffix's answer before its next prefix step, so one packed group
    leaves one side idle while the other works. Two groups (frames dealt round-robin) alternate: the prefix
    side runs group a's step while the suffix side (a thread, pinned to suffix_cores when given) runs group
    b's previous step. Results in completion order."""
    from concurrent.futures import ThreadPoolExecutor
    for i, frame in enumerate(frames):
        groups[i % len(groups)].submit(frame)
    results: list[ActionResult] = []
    pending = None  # (group, its packed state, the suffix's future)

    def pinned() -> None:
        if suffix_cores:
            import os
            os.sched_setaffinity(0, suffix_cores)

    with ThreadPoolExecutor(1, initializer=pinned) as suffix_side:
        turn = 0
        while any(g.busy for g in groups) or pending:
            group = groups[turn % len(groups)]
            turn += 1
            if pending and pending[0] is group:  # one group: its tokens are needed before its next step
                results += group.finish(pending[1], pending[2].result())
                pending = None
            state = group.prefix_step() if group.busy else None   # its previous tokens are in
            if pending:
                previous, previous_state, future = pending
                results += previous.finish(previous_state, future.result())
            pending = (group, state, suffix_side.submit(group.suffix_step, state)) if state is not None else None
    return results + [r for g in groups for r in g.failed]
