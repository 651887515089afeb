"""ActionFlow's boundary as bytes, for stages in different processes: the packed state one way, the suffix's
next tokens back. Raw bytes with explicit headers (engine/handover/codec.py's tensor layout); never pickle. Every
field is checked on decode: a damaged or hostile payload is an InputError, never a wrong-shaped forward.

Packed state (little endian):
    header    "<4sHHIIQIq" magic b"HVLP", version, flags, partition, ring slots, step, segment count,
                           deadline (wall clock ns; 0 = none): a suffix done after it drops the step unanswered
    segment*  "<qiiiiqq"   seq, slot, start, row, count, frame stamp (ns), frame arrival (ns, wall clock)
    tensors   hidden (R, H) float; positions (3, 1, R) (M-RoPE) or (1, R), int64; with flag DEEPSTACK
              (Qwen3-VL cut below its DeepStack depth): the prefill's image rows (n,) int64 and the additions
              still due (k - p, n, H), from block `partition`
Tokens back:
    header    "<4sHHQI"    magic b"HVLT", version, flags, step, count
    entry*    "<qq"        seq, token
"""

from __future__ import annotations

import struct
from typing import NamedTuple

import torch

from ...errors import InputError, expect, expect_finite
from ...types import DeepStack
from ..handover.codec import read_tensor, tensors_size, write_tensor
from .forward import PackedState, Segment

STATE_MAGIC, TOKENS_MAGIC, VERSION = b"HVLP", b"HVLT", 3
STATE_HEADER = struct.Struct("<4sHHIIQIq")
SEGMENT = struct.Struct("<qiiiiqq")
TOKENS_HEADER = struct.Struct("<4sHHQI")
TOKEN = struct.Struct("<qq")
MAX_SEGMENTS = 1024
DEEPSTACK = 1  # flag: DeepStack tensors follow


class StepHeader(NamedTuple):
    partition: int    # the cut: the suffix runs blocks [partition, L)
    step: int         # the prefix's step number (the tokens back carry it)
    slots: int        # KV ring slots the prefix hands out (the suffix's ring matches them); 0 = not said
    deadline_ns: int = 0  # wall clock: the prefix gives the step up after it (plus a grace); 0 = never


def is_packed_state(buffer) -> bool:
    return bytes(memoryview(buffer)[:4]) == STATE_MAGIC


def encode_state(state: PackedState, partition: int, step: int, slots: int = 0, deadline_ns: int = 0) -> bytes:
    ds = state.deepstack
    tensors = (state.hidden, state.positions) + (() if ds is None else (ds.positions, ds.features))
    buffer = bytearray(STATE_HEADER.size + SEGMENT.size * len(state.segments) + tensors_size(tensors))
    STATE_HEADER.pack_into(buffer, 0, STATE_MAGIC, VERSION, 0 if ds is None else DEEPSTACK, partition, slots, step,
                           len(state.segments), deadline_ns)
    pos = STATE_HEADER.size
    for seg in state.segments:
        SEGMENT.pack_into(buffer, pos, seg.seq, seg.slot, seg.start, seg.row, seg.count, seg.stamp_ns,
                          seg.arrival_ns)
        pos += SEGMENT.size
    for t in tensors:
        pos = write_tensor(buffer, pos, t)
    return bytes(buffer)


def decode_state(buffer, source: str = "packed boundary") -> tuple[PackedState, StepHeader]:
    view = memoryview(buffer)
    expect(view.nbytes >= STATE_HEADER.size, InputError, f"{source}: {view.nbytes} bytes, shorter than its header")
    magic, version, flags, partition, slots, step, count, deadline_ns = STATE_HEADER.unpack_from(view, 0)
    expect(magic == STATE_MAGIC, InputError, f"{source}: magic {magic!r}, expected {STATE_MAGIC!r}")
    expect(version == VERSION, InputError, f"{source}: version {version}, this decoder reads version {VERSION}")
    expect(0 < count <= MAX_SEGMENTS, InputError, f"{source}: {count} segments, expected 1..{MAX_SEGMENTS}")
    expect(view.nbytes >= STATE_HEADER.size + SEGMENT.size * count, InputError, f"{source}: truncated segments")
    segments = [Segment(*SEGMENT.unpack_from(view, STATE_HEADER.size + SEGMENT.size * i)) for i in range(count)]
    pos = STATE_HEADER.size + SEGMENT.size * count
    hidden, pos = read_tensor(view, pos, "hidden", source)
    positions, pos = read_tensor(view, pos, "positions", source)
    deepstack = None
    if flags & DEEPSTACK:
        rows, pos = read_tensor(view, pos, "deepstack_positions", source)
        features, pos = read_tensor(view, pos, "deepstack_features", source)
        deepstack = DeepStack(rows, features, partition)
    expect(pos == view.nbytes, InputError, f"{source}: {view.nbytes - pos} trailing bytes")
    check_layout(segments, hidden, positions, source)
    check_deepstack(deepstack, hidden, source)
    return PackedState(hidden, positions, segments, deepstack), StepHeader(partition, step, slots, deadline_ns)


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
    buffer = bytearray(TOKENS_HEADER.size + TOKEN.size * len(tokens))
    TOKENS_HEADER.pack_into(buffer, 0, TOKENS_MAGIC, VERSION, 0, step, len(tokens))
    for i, (seq, token) in enumerate(tokens.items()):
        TOKEN.pack_into(buffer, TOKENS_HEADER.size + TOKEN.size * i, seq, token)
    return bytes(buffer)


def decode_tokens(buffer, source: str = "action tokens") -> tuple[dict[int, int], int]:
    """-> ({seq: token}, step)."""
    view = memoryview(buffer)
    expect(view.nbytes >= TOKENS_HEADER.size, InputError, f"{source}: {view.nbytes} bytes, shorter than its header")
    magic, version, _flags, step, count = TOKENS_HEADER.unpack_from(view, 0)
    expect(magic == TOKENS_MAGIC, InputError, f"{source}: magic {magic!r}, expected {TOKENS_MAGIC!r}")
    expect(version == VERSION, InputError, f"{source}: version {version}, this decoder reads version {VERSION}")
    expect(view.nbytes == TOKENS_HEADER.size + TOKEN.size * count, InputError,
           f"{source}: {view.nbytes} bytes for {count} tokens")
    tokens = dict(TOKEN.unpack_from(view, TOKENS_HEADER.size + TOKEN.size * i) for i in range(count))
    expect(len(tokens) == count, InputError, f"{source}: a frame appears twice")
    return tokens, step
