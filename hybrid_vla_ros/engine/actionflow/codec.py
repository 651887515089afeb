"""ActionFlow's boundary as bytes, for stages in different processes: the packed state one way, the suffix's
next tokens back, both HVLM messages of kind `tokens` (engine/handover/message.py). Never pickle. Every field is
checked on decode: a damaged or hostile payload is an InputError, never a wrong-shaped forward; a message in the
format HVLM replaced (HVLP, HVLT) is refused by name (old_message).

Packed state (forward): the header's cut, step and deadline (wall clock ns; 0 = none: a suffix done after it drops
    the step unanswered); one ROWS entry per frame (seq, stamp_ns, arrival_ns, slot, start, row, count: its rows
    of the packed hidden); the message's parts: `slots` (the prefix's KV ring), `hidden` (R, H) float,
    `positions` (3, 1, R) (M-RoPE) or (1, R) int64, and with a Qwen3-VL cut below its DeepStack depth the
    prefill's image rows `ds_positions` (n,) int64 and the additions still due `ds_features` (k - p, n, H), from
    block `partition`.
Tokens (back): the step in the header, one TOKEN entry per frame (seq) with its `token`.
"""

from __future__ import annotations

from typing import NamedTuple

import torch

from ...errors import InputError, expect, expect_finite
from ...types import DeepStack
from ..handover import message as hvlm
from .forward import PackedState, Segment

KIND = hvlm.KINDS["tokens"]
ROWS, TOKEN = 1, 2          # crossing codes: a frame's rows of a packed step, a frame's next token


class StepHeader(NamedTuple):
    partition: int    # the cut: the suffix runs blocks [partition, L)
    step: int         # the prefix's step number (the tokens back carry it)
    slots: int        # KV ring slots the prefix hands out (the suffix's ring matches them); 0 = not said
    deadline_ns: int = 0  # wall clock: the prefix gives the step up after it (plus a grace); 0 = never


def encode_state(state: PackedState, partition: int, step: int, slots: int = 0, deadline_ns: int = 0) -> bytes:
    entries = [hvlm.Entry(seg.seq, seg.stamp_ns, seg.arrival_ns, crossing=ROWS, slot=seg.slot, start=seg.start,
                          row=seg.row, count=seg.count) for seg in state.segments]
    parts = {"slots": slots, "hidden": state.hidden, "positions": state.positions}
    if state.deepstack is not None:
        parts.update(ds_positions=state.deepstack.positions, ds_features=state.deepstack.features)
    return hvlm.encode(hvlm.Message(KIND, hvlm.FORWARD, entries, parts, partition=partition, step=step,
                                    deadline_ns=deadline_ns))


def _tensor_part(parts: dict, name: str, source: str) -> torch.Tensor:
    expect(name in parts, InputError, f"{source}: no {name!r}")
    return parts[name]


def decode_state(buffer, source: str = "packed boundary") -> tuple[PackedState, StepHeader]:
    message = hvlm.decode(buffer, source, KIND, hvlm.FORWARD)
    expect(not message.flags, InputError, f"{source}: flags {message.flags:#x} on a packed step (its rows are inline)")
    expect(all(e.crossing == ROWS and not e.parts for e in message.entries), InputError,
           f"{source}: every entry of a packed step is a frame's rows, with no parts of its own")
    segments = [Segment(e.seq, e.slot, e.start, e.row, e.count, e.stamp_ns, e.arrival_ns) for e in message.entries]
    parts = message.parts
    extra = sorted(set(parts) - {"slots", "hidden", "positions", "ds_positions", "ds_features"})
    expect(not extra, InputError, f"{source}: parts {extra} have no place in a packed step")
    hidden, positions = _tensor_part(parts, "hidden", source), _tensor_part(parts, "positions", source)
    deepstack = None
    if "ds_positions" in parts or "ds_features" in parts:
        deepstack = DeepStack(_tensor_part(parts, "ds_positions", source), _tensor_part(parts, "ds_features", source),
                              message.partition)
    expect(message.partition >= 0, InputError, f"{source}: no cut in its header")
    check_layout(segments, hidden, positions, source)
    check_deepstack(deepstack, hidden, source)
    header = StepHeader(message.partition, message.step, parts.get("slots", 0), message.deadline_ns)
    return PackedState(hidden, positions, segments, deepstack), header


def check_deepstack(deepstack: DeepStack | None, hidden: torch.Tensor, source: str) -> None:
    """DeepStack rows inside the packed rows, additions of the hidden width and dtype, finite."""
    if deepstack is None:
        return
    rows, features = deepstack.positions, deepstack.features
    expect(rows.dtype == torch.int64 and rows.dim() == 1 and bool(((rows >= 0) & (rows < hidden.shape[0])).all()),
           InputError, f"{source}: DeepStack rows {tuple(rows.shape)} {rows.dtype}, expected int64 rows in "
                       f"[0, {hidden.shape[0]})")
    expect(features.dim() == 3 and features.shape[1:] == (rows.shape[0], hidden.shape[1]) and
           features.dtype == hidden.dtype, InputError,
           f"{source}: DeepStack features {tuple(features.shape)} {features.dtype}, expected (k, {rows.shape[0]}, "
           f"{hidden.shape[1]}) {hidden.dtype}")
    expect_finite(features, "nonfinite_boundary", f"{source}: DeepStack features")


def check_layout(segments: list[Segment], hidden: torch.Tensor, positions: torch.Tensor, source: str) -> None:
    """Segments tile the rows [0, R) in order, one per frame, at non-negative slots and positions; hidden is
    (R, H) floating point; positions (3, 1, R) or (1, R) int64."""
    expect(hidden.dim() == 2 and hidden.dtype.is_floating_point, InputError,
           f"{source}: hidden {tuple(hidden.shape)} {hidden.dtype}, expected (rows, hidden) floating point")
    rows = hidden.shape[0]
    expect(positions.dtype == torch.int64 and tuple(positions.shape) in ((3, 1, rows), (1, rows)), InputError,
           f"{source}: positions {tuple(positions.shape)} {positions.dtype}, expected (3, 1, {rows}) or (1, {rows}) int64")
    row = 0
    for seg in segments:
        expect(seg.row == row and seg.count > 0 and seg.slot >= 0 and seg.start >= 0, InputError,
               f"{source}: segment {seg} does not continue the rows at {row} (count > 0, slot and start >= 0)")
        row += seg.count
    expect(row == rows, InputError, f"{source}: segments cover {row} rows, hidden has {rows}")
    expect(len({seg.seq for seg in segments}) == len(segments), InputError, f"{source}: a frame appears twice")


def check_fits(state: PackedState, slots: int, slot_tokens: int, source: str) -> None:
    """Every segment lies inside a ring of `slots` slots of `slot_tokens` tokens (the receiving side's), and
    several rows are a prefill from position 0 (the packed forward attends them causally from the slot's
    start: rows continuing a frame would be misaligned, so they are refused, not attended wrongly)."""
    for seg in state.segments:
        expect(seg.slot < slots and seg.start + seg.count <= slot_tokens, InputError,
               f"{source}: segment {seg} does not fit a KV ring of {slots} slots x {slot_tokens} tokens")
        expect(seg.count == 1 or seg.start == 0, InputError,
               f"{source}: segment {seg} has {seg.count} rows from position {seg.start}; several rows must be a "
               f"prefill from position 0")


def encode_tokens(tokens: dict[int, int], step: int) -> bytes:
    entries = [hvlm.Entry(seq, 0, crossing=TOKEN, parts={"token": token}) for seq, token in tokens.items()]
    return hvlm.encode(hvlm.Message(KIND, hvlm.BACK, entries, step=step))


def decode_tokens(buffer, source: str = "action tokens") -> tuple[dict[int, int], int]:
    """-> ({seq: token}, step)."""
    message = hvlm.decode(buffer, source, KIND, hvlm.BACK)
    expect(not message.flags, InputError, f"{source}: flags {message.flags:#x} on an answer of tokens")
    expect(not message.parts and all(e.crossing == TOKEN and set(e.parts) == {"token"} for e in message.entries),
           InputError, f"{source}: every entry of an answer is one frame's token")
    tokens = {e.seq: e.parts["token"] for e in message.entries}
    expect(len(tokens) == len(message.entries), InputError, f"{source}: a frame appears twice")
    return tokens, message.step
