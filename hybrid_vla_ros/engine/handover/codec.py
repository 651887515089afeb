"""A waypoint model's boundary state (types.BoundaryState) as an HVLM message (engine/handover/message.py) and back:
kind `waypoints`, forward, one entry (crossing ROWS). Never pickle.

header  the cut (`partition`), the shm domain of the sender
entry   seq, stamp_ns, arrival_ns, index = chunk_index, chunk_index, chunk_count (1..64; 1 = the whole frame),
        start = chunk_start (the chunk's first token in the frame; 0 for chunk 0 and only for it)
parts   the entry's: hidden (B, S, H), positions = position_ids, mask = attention_mask, query_index; for a
        Qwen3-VL cut below its DeepStack depth ds_positions (n,) and ds_features (k - p, n, H), from block
        `partition`; with a frame context (hybrid_vla_ros/context.py) `context`: FrameContext.to_dict as UTF-8
        JSON padded with spaces to a multiple of CONTEXT_ALIGN (a model's states keep one size, and the
        shared-memory ring its slots), at most MAX_CONTEXT_BYTES; with streaming KV (engine/kv_stream/)
        `kv_segments` (2, image slots) int64: each slot's segment serial and whether the prefix kept it
A chunk holds tokens [chunk_start, chunk_start + S) of its frame (engine/chunking.py): S is the chunk's length,
query_index stays the frame's, DeepStack positions are chunk-relative, and a chunk without image tokens carries
n = 0 (zero bytes each). The bare state formats before HVLM (HVLB, versions 1-4) are refused by name.
"""

from __future__ import annotations

import json

from ...context import FrameContext
from ...errors import InputError, expect
from ...types import BoundaryState, DeepStack
from ..chunking import MAX_CHUNKS
from . import message as hvlm
from .tensor_record import MAX_DIM

KIND = hvlm.KINDS["waypoints"]
ROWS = 1                                        # the crossing code of a state's rows
CONTEXT_ALIGN, MAX_CONTEXT_BYTES = 1024, 1 << 20
STATE_PARTS = {"hidden", "positions", "mask", "query_index", "ds_positions", "ds_features", "context", "kv_segments"}
MIN_SIZE = hvlm.HEADER.size + hvlm.ENTRY.size   # no state is shorter


def check_chunk_index(index, count, where: str) -> None:
    """A chunk index and count in range (engine/chunking.py), else an InputError saying which and why."""
    expect(isinstance(count, int) and 1 <= count <= MAX_CHUNKS, InputError,
           f"{where}: chunk count {count!r}, expected 1..{MAX_CHUNKS} (1 = the whole frame)")
    expect(isinstance(index, int) and 0 <= index < count, InputError,
           f"{where}: chunk index {index!r}, expected 0..{count - 1} (below the count {count})")


def check_chunk(index, count, start, source: str) -> None:
    """A chunk's fields, each in range, else an InputError saying which and why."""
    where = f"{source}: chunk {index} of {count} from token {start}"
    check_chunk_index(index, count, where)
    expect(isinstance(start, int) and 0 <= start <= MAX_DIM, InputError,
           f"{where}: chunk start must be a token index >= 0")
    expect((index == 0) == (start == 0), InputError,
           f"{where}: chunk 0 starts at token 0 and every later chunk after it (spans are not empty)")


def _context_json(state: BoundaryState) -> str | None:
    """The state's context as padded JSON (None without one)."""
    if state.context is None:
        return None
    text = json.dumps(state.context.to_dict(), separators=(",", ":"), allow_nan=False)
    expect(len(text.encode()) <= MAX_CONTEXT_BYTES, InputError,
           f"boundary state of frame {state.seq}: a context of {len(text.encode())} bytes (at most "
           f"{MAX_CONTEXT_BYTES})")
    return text.ljust(-(-len(text) // CONTEXT_ALIGN) * CONTEXT_ALIGN)


def entry_of(state: BoundaryState, parts: dict | None = None) -> hvlm.Entry:
    """The state's entry: which frame and chunk; `parts` its values (none: a carrier holds them)."""
    return hvlm.Entry(state.seq, state.stamp_ns, state.arrival_ns, state.chunk_index, ROWS, state.chunk_index,
                      state.chunk_count, start=state.chunk_start, parts=parts or {})


def state_message(state: BoundaryState, domain: int = 0, model_id: int = 0) -> hvlm.Message:
    """The state with its tensors inline."""
    ds = state.deepstack
    expect(ds is None or ds.first_block == state.partition, InputError,
           f"boundary state of frame {state.seq}: DeepStack from block {getattr(ds, 'first_block', 0)}, cut at "
           f"{state.partition}")
    check_chunk(state.chunk_index, state.chunk_count, state.chunk_start, f"boundary state of frame {state.seq}")
    parts = {"hidden": state.hidden, "positions": state.position_ids, "mask": state.attention_mask,
             "query_index": state.query_index}
    if ds is not None:
        parts.update(ds_positions=ds.positions, ds_features=ds.features)
    context = _context_json(state)
    if context is not None:
        parts["context"] = context
    if state.kv_segments is not None:
        parts["kv_segments"] = state.kv_segments
    return hvlm.Message(KIND, hvlm.FORWARD, [entry_of(state, parts)], partition=state.partition, model_id=model_id,
                        domain=domain)


def encoded_size(state: BoundaryState) -> int:
    return hvlm.encoded_size(state_message(state))


def encode_into(state: BoundaryState, buffer, offset: int = 0, domain: int = 0, model_id: int = 0) -> int:
    """Write the encoded state into a writable buffer (bytearray, mmap, shared memory). -> bytes written."""
    return hvlm.encode_into(state_message(state, domain, model_id), buffer, offset)


def encode(state: BoundaryState) -> bytes:
    return hvlm.encode(state_message(state))


def check_entry(message: hvlm.Message, source: str) -> hvlm.Entry:
    """The one ROWS entry of a waypoint state's message, its chunk fields checked."""
    expect(len(message.entries) == 1 and message.entries[0].crossing == ROWS, InputError,
           f"{source}: {len(message.entries)} entries, expected one state's rows")
    entry = message.entries[0]
    check_chunk(entry.chunk_index, entry.chunk_count, entry.start, source)
    expect(entry.index == entry.chunk_index, InputError, f"{source}: message {entry.index} of chunk "
           f"{entry.chunk_index}")
    return entry


def state_of(message: hvlm.Message, source: str) -> BoundaryState:
    """The state an inline message carries, every part checked."""
    entry, parts = check_entry(message, source), message.entries[0].parts
    missing = sorted({"hidden", "positions", "mask", "query_index"} - parts.keys())
    expect(not missing, InputError, f"{source}: a boundary state without {missing}")
    extra = sorted(parts.keys() - STATE_PARTS)
    expect(not extra and not message.parts, InputError, f"{source}: parts {extra or sorted(message.parts)} have no "
           f"place in a boundary state")
    expect(("ds_positions" in parts) == ("ds_features" in parts), InputError,
           f"{source}: DeepStack needs both ds_positions and ds_features")
    deepstack = DeepStack(parts["ds_positions"], parts["ds_features"], message.partition) \
        if "ds_positions" in parts else None
    context = _read_context(parts["context"], source) if "context" in parts else None
    return BoundaryState(hidden=parts["hidden"], position_ids=parts["positions"], attention_mask=parts["mask"],
                         partition=message.partition, seq=entry.seq, stamp_ns=entry.stamp_ns,
                         query_index=parts["query_index"], deepstack=deepstack, chunk_index=entry.chunk_index,
                         chunk_count=entry.chunk_count, chunk_start=entry.start, context=context,
                         arrival_ns=entry.arrival_ns, kv_segments=parts.get("kv_segments"))


def decode(buffer, source: str = "boundary payload", copy: bool = True) -> BoundaryState:
    """Parse and check an encoded state. copy=False returns tensors that view `buffer` (zero-copy)."""
    message = hvlm.decode(buffer, source, KIND, hvlm.FORWARD, copy=copy)
    expect(not message.flags, InputError, f"{source}: flags {message.flags:#x} on a state with its tensors inline")
    return state_of(message, source)


def _read_context(text: str, source: str) -> FrameContext:
    expect(len(text.encode()) <= MAX_CONTEXT_BYTES, InputError, f"{source}: a context of {len(text.encode())} bytes "
           f"(at most {MAX_CONTEXT_BYTES})")
    try:
        data = json.loads(text)
    except (ValueError, RecursionError) as exc:
        raise InputError(f"{source}: context is not JSON ({exc})") from exc
    return FrameContext.from_dict(data, f"{source}: context")
