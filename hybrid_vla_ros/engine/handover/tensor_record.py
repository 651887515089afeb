"""A tensor as bytes and back, the record every boundary message uses for its tensors (engine/handover/message.py):
    "<BB" dtype code, ndim (1..MAX_NDIM); ndim x "<Q" dims; "<Q" nbytes; then nbytes raw bytes.
Every field is checked against the buffer on the way in; never pickle."""

from __future__ import annotations

import struct
import warnings

import torch

from ...errors import InputError, expect

TENSOR_HEAD = struct.Struct("<BB")
U64 = struct.Struct("<Q")
DTYPE_CODES = {torch.float32: 1, torch.float16: 2, torch.bfloat16: 3, torch.int64: 4, torch.int32: 5}
CODE_DTYPES = {v: k for k, v in DTYPE_CODES.items()}
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
