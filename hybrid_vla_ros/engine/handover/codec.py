"""The serialised boundary state: raw bytes with an explicit header. Never pickle.

Layout (little endian), version 3 (what encode writes):
    header   "<4sHHIqqiI"  magic b"HVLB", version, flags, partition, seq, stamp_ns, query_index, tensor count
    chunk    "<HHi"        chunk_index, chunk_count (1..64; 1 = the whole frame), chunk_start (the chunk's first
                           token in the frame, >= 0; 0 for chunk 0 and only for it)
    tensor*  "<BB" dtype code, ndim; ndim x "<Q" dims; "<Q" nbytes; then nbytes raw bytes
Tensors, in order: hidden (B, S, H), position_ids, attention_mask; then, for a Qwen3-VL cut below its
DeepStack depth, DeepStack's positions (n,) and features (k - p, n, H), from block `partition`. A chunk holds
tokens [chunk_start, chunk_start + S) of its frame (engine/chunking.py): S is the chunk's length, query_index
stays the frame's, DeepStack positions are chunk-relative, and a chunk without image tokens carries n = 0
(positions (0,), features (k - p, 0, H): zero bytes each).
Versions 1 (three tensors) and 2 (DeepStack, five) have no chunk part (a 36-byte header) and are
still read as an unchunked state: chunk 0 of 1 from token 0.
Version 4 = version 3 + the frame's context (hybrid_vla_ros/context.py FrameContext) after the last tensor:
    context  "<4sHHI"      magic b"HVLC", context version (1), 0, n; then n bytes of UTF-8 JSON (FrameContext
                           to_dict, padded with spaces to a multiple of CONTEXT_ALIGN: a model's states keep one
                           size, and the shared-memory ring its slots), at most MAX_CONTEXT_BYTES
A state without a context is written as version 3 (what a receiver without the context block reads); a state
with one as version 4, which such a receiver refuses by its version.
"""

from __future__ import annotations

import json
import struct
import warnings

import torch

from ...context import FrameContext
from ...errors import InputError, expect
from ...types import BoundaryState, DeepStack
from ..chunking import MAX_CHUNKS

MAGIC = b"HVLB"
VERSION = 3                                   # without a context; CONTEXT_VERSION with one
CONTEXT_VERSION = 4
READS = (1, 2, 3, 4)
CONTEXT_HEAD = struct.Struct("<4sHHI")        # version 4: the context block's head after the last tensor
CONTEXT_MAGIC, CONTEXT_BLOCK_VERSION = b"HVLC", 1
CONTEXT_ALIGN, MAX_CONTEXT_BYTES = 1024, 1 << 20
BASE = struct.Struct("<4sHHIqqiI")            # versions 1 and 2: the whole header
CHUNK = struct.Struct("<HHi")                 # version 3: chunk_index, chunk_count, chunk_start after BASE
HEADER = struct.Struct("<4sHHIqqiIHHi")       # version 3: BASE + CHUNK, what encode writes
TENSOR_HEAD = struct.Struct("<BB")
U64 = struct.Struct("<Q")
DTYPE_CODES = {torch.float32: 1, torch.float16: 2, torch.bfloat16: 3, torch.int64: 4, torch.int32: 5}
CODE_DTYPES = {v: k for k, v in DTYPE_CODES.items()}
TENSOR_NAMES = ("hidden", "position_ids", "attention_mask")
DEEPSTACK_NAMES = ("deepstack_positions", "deepstack_features")
MAX_NDIM = 4
MAX_DIM = 2**31 - 1  # no boundary tensor has a side this long; a larger one is a damaged or hostile header


def _frombuffer(view: memoryview) -> torch.Tensor:
    if view.nbytes == 0:
        return torch.empty(0, dtype=torch.uint8)
    with warnings.catch_warnings():  # read-only buffers (bytes) are fine: we clone unless asked not to
        warnings.simplefilter("ignore", UserWarning)
        return torch.frombuffer(view, dtype=torch.uint8)


def tensors_size(tensors) -> int:
    """Bytes of `tensors` as write_tensor lays them out."""
    return sum(TENSOR_HEAD.size + U64.size * (t.dim() + 1) + t.numel() * t.element_size() for t in tensors)


def write_tensor(buffer, pos: int, t: torch.Tensor) -> int:
    """dtype code, ndim, dims, nbytes, raw bytes at `pos` -> the position after them."""
    expect(t.dtype in DTYPE_CODES, InputError, f"cannot encode tensor of dtype {t.dtype}")
    TENSOR_HEAD.pack_into(buffer, pos, DTYPE_CODES[t.dtype], t.dim())
    pos += TENSOR_HEAD.size
    for dim in t.shape:
        U64.pack_into(buffer, pos, dim)
        pos += U64.size
    nbytes = t.numel() * t.element_size()
    U64.pack_into(buffer, pos, nbytes)
    pos += U64.size
    if nbytes:  # one copy from wherever the tensor lives (a GPU prefix: device -> this buffer) into place
        destination = torch.frombuffer(buffer, dtype=torch.uint8, count=nbytes, offset=pos)
        destination.view(t.dtype).view(t.shape).copy_(t.detach())
    return pos + nbytes


def read_tensor(view: memoryview, pos: int, name: str, source: str, copy: bool = True) -> tuple[torch.Tensor, int]:
    """The tensor write_tensor wrote at `pos`, every field checked against the buffer -> (tensor, next pos)."""
    expect(view.nbytes >= pos + TENSOR_HEAD.size, InputError, f"{source}: truncated before tensor '{name}'")
    code, ndim = TENSOR_HEAD.unpack_from(view, pos)
    pos += TENSOR_HEAD.size
    expect(code in CODE_DTYPES, InputError, f"{source}: tensor '{name}' has unknown dtype code {code}")
    expect(0 < ndim <= MAX_NDIM, InputError, f"{source}: tensor '{name}' has {ndim} dims, expected 1..{MAX_NDIM}")
    expect(view.nbytes >= pos + U64.size * (ndim + 1), InputError, f"{source}: truncated in header of '{name}'")
    shape = [U64.unpack_from(view, pos + U64.size * i)[0] for i in range(ndim)]
    nbytes = U64.unpack_from(view, pos + U64.size * ndim)[0]
    pos += U64.size * (ndim + 1)
    expect(all(dim <= MAX_DIM for dim in shape), InputError,
           f"{source}: tensor '{name}' declares shape {tuple(shape)}, a side above {MAX_DIM}")
    dtype = CODE_DTYPES[code]
    expected = dtype.itemsize
    for dim in shape:
        expected *= dim
    expect(nbytes == expected, InputError,
           f"{source}: tensor '{name}' declares {nbytes} bytes, shape {tuple(shape)} of {dtype} needs {expected}")
    expect(view.nbytes >= pos + nbytes, InputError,
           f"{source}: tensor '{name}' truncated ({view.nbytes - pos} of {nbytes} bytes present)")
    tensor = _frombuffer(view[pos:pos + nbytes]).view(dtype).reshape(shape)
    return (tensor.clone() if copy else tensor), pos + nbytes


def _tensors(state: BoundaryState) -> tuple[torch.Tensor, ...]:
    tensors = (state.hidden, state.position_ids, state.attention_mask)
    ds = state.deepstack
    return tensors if ds is None else tensors + (ds.positions, ds.features)


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


def _context_json(state: BoundaryState) -> bytes:
    """The state's context as the block's padded JSON (b"" without one)."""
    if state.context is None:
        return b""
    text = json.dumps(state.context.to_dict(), separators=(",", ":"), allow_nan=False).encode()
    expect(len(text) <= MAX_CONTEXT_BYTES, InputError,
           f"boundary state of frame {state.seq}: a context of {len(text)} bytes (at most {MAX_CONTEXT_BYTES})")
    return text.ljust(-(-len(text) // CONTEXT_ALIGN) * CONTEXT_ALIGN)


def encoded_size(state: BoundaryState) -> int:
    context = _context_json(state)
    return HEADER.size + tensors_size(_tensors(state)) + (CONTEXT_HEAD.size + len(context) if context else 0)


def encode_into(state: BoundaryState, buffer, offset: int = 0) -> int:
    """Write the encoded state into a writable buffer (bytearray, mmap, shared memory). Returns bytes written."""
    tensors = _tensors(state)
    expect(state.deepstack is None or state.deepstack.first_block == state.partition, InputError,
           f"boundary state of frame {state.seq}: DeepStack from block {getattr(state.deepstack, 'first_block', 0)}, "
           f"cut at {state.partition}")
    check_chunk(state.chunk_index, state.chunk_count, state.chunk_start, f"boundary state of frame {state.seq}")
    context = _context_json(state)
    HEADER.pack_into(buffer, offset, MAGIC, CONTEXT_VERSION if context else VERSION, 0, state.partition, state.seq,
                     state.stamp_ns, state.query_index, len(tensors), state.chunk_index, state.chunk_count,
                     state.chunk_start)
    pos = offset + HEADER.size
    for t in tensors:
        pos = write_tensor(buffer, pos, t)
    if context:
        CONTEXT_HEAD.pack_into(buffer, pos, CONTEXT_MAGIC, CONTEXT_BLOCK_VERSION, 0, len(context))
        pos += CONTEXT_HEAD.size
        memoryview(buffer)[pos:pos + len(context)] = context
        pos += len(context)
    return pos - offset


def encode(state: BoundaryState) -> bytes:
    buffer = bytearray(encoded_size(state))
    encode_into(state, buffer)
    return bytes(buffer)


def decode(buffer, source: str = "boundary payload", copy: bool = True) -> BoundaryState:
    """Parse and check an encoded state. copy=False returns tensors that view `buffer` (zero-copy)."""
    view = memoryview(buffer)
    version, header, (index, count, start) = _header(view, source)
    _, _, _flags, partition, seq, stamp, query, tensor_count = header
    names = TENSOR_NAMES + (DEEPSTACK_NAMES if version >= 2 and tensor_count == 5 else ())
    expect(tensor_count == len(names), InputError, f"{source}: {tensor_count} tensors, expected "
           f"{len(TENSOR_NAMES)}{' or 5 (with DeepStack)' if version >= 2 else ''}")
    pos, tensors = (HEADER if version >= 3 else BASE).size, []
    for name in names:
        tensor, pos = read_tensor(view, pos, name, source, copy)
        tensors.append(tensor)
    context, pos = _read_context(view, pos, source) if version >= CONTEXT_VERSION else (None, pos)
    expect(pos == view.nbytes, InputError, f"{source}: {view.nbytes - pos} trailing bytes after the last "
           f"{'tensor' if version < CONTEXT_VERSION else 'block'}")
    deepstack = DeepStack(tensors[3], tensors[4], partition) if len(tensors) == 5 else None
    return BoundaryState(hidden=tensors[0], position_ids=tensors[1], attention_mask=tensors[2], partition=partition,
                         seq=seq, stamp_ns=stamp, query_index=query, deepstack=deepstack, chunk_index=index,
                         chunk_count=count, chunk_start=start, context=context)


def _read_context(view: memoryview, pos: int, source: str) -> tuple[FrameContext, int]:
    """The version 4 context block at `pos`, every field checked -> (context, next pos)."""
    expect(view.nbytes >= pos + CONTEXT_HEAD.size, InputError, f"{source}: truncated before the context block")
    magic, block_version, _, n = CONTEXT_HEAD.unpack_from(view, pos)
    expect(magic == CONTEXT_MAGIC, InputError, f"{source}: context block magic {magic!r}, expected {CONTEXT_MAGIC!r}")
    expect(block_version == CONTEXT_BLOCK_VERSION, InputError,
           f"{source}: context block version {block_version}, this decoder reads {CONTEXT_BLOCK_VERSION}")
    pos += CONTEXT_HEAD.size
    expect(n <= MAX_CONTEXT_BYTES and view.nbytes >= pos + n, InputError,
           f"{source}: context block of {n} bytes ({view.nbytes - pos} present, at most {MAX_CONTEXT_BYTES})")
    try:
        data = json.loads(bytes(view[pos:pos + n]).decode("utf-8"))
    except (UnicodeDecodeError, ValueError, RecursionError) as exc:
        raise InputError(f"{source}: context block is not JSON ({exc})") from exc
    return FrameContext.from_dict(data, f"{source}: context"), pos + n


def _header(view: memoryview, source: str) -> tuple[int, tuple, tuple[int, int, int]]:
    """-> (version, the BASE fields, (chunk_index, chunk_count, chunk_start)), each checked; versions 1 and 2
    are a whole frame (0, 1, 0)."""
    expect(view.nbytes >= BASE.size, InputError,
           f"{source}: {view.nbytes} bytes is shorter than the {BASE.size}-byte header")
    header = BASE.unpack_from(view, 0)
    magic, version = header[:2]
    expect(magic == MAGIC, InputError, f"{source}: magic {magic!r}, expected {MAGIC!r} (not a boundary state)")
    expect(version in READS, InputError, f"{source}: version {version}, this decoder reads versions {READS[:3]} "
           f"(and {CONTEXT_VERSION}: with a frame context)")
    if version < 3:
        return version, header, (0, 1, 0)
    expect(view.nbytes >= HEADER.size, InputError,
           f"{source}: {view.nbytes} bytes is shorter than the {HEADER.size}-byte version {version} header")
    chunk = CHUNK.unpack_from(view, BASE.size)
    check_chunk(*chunk, source)
    return version, header, chunk
