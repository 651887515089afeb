"""A crossing (crossings.py) as bytes and back, for any transport. Never pickle. Tensors use the handover
codec's tensor layout and checks (engine/handover/codec.py write_tensor / read_tensor).

Layout (little endian):
    header  "<4sHHI"  magic b"HVLX", version 1, kind (1-based index in crossings.KINDS), field count
    field*  one tag byte, then:  b"I" "<q" int | b"B" "<q" bool | b"T" tensor | b"N" nothing (None) |
                                 b"D" "<q" DeepStack's first block, then its positions and features tensors
Fields in the dataclass's order; each tag checked against the field's declared type.
"""

from __future__ import annotations

import struct
from dataclasses import fields

import torch

from ...errors import InputError, expect
from ...types import DeepStack
from ..handover.codec import read_tensor, tensors_size, write_tensor
from .crossings import KINDS

MAGIC, VERSION = b"HVLX", 1
HEADER = struct.Struct("<4sHHI")
I64 = struct.Struct("<q")
ALLOWED = {"torch.Tensor": b"T", "int": b"I", "bool": b"B", "DeepStack | None": b"DN"}


def _tensor(t: torch.Tensor) -> bytes:
    buffer = bytearray(tensors_size([t]))
    write_tensor(buffer, 0, t.contiguous())
    return bytes(buffer)


def _field(value) -> bytes:
    if isinstance(value, torch.Tensor):
        return b"T" + _tensor(value)
    if value is None:
        return b"N"
    if isinstance(value, bool):
        return b"B" + I64.pack(int(value))
    if isinstance(value, int):
        return b"I" + I64.pack(value)
    expect(isinstance(value, DeepStack), InputError, f"crossing field of type {type(value).__name__}: not encodable")
    return b"D" + I64.pack(value.first_block) + _tensor(value.positions) + _tensor(value.features)


def encode(state) -> bytes:
    kind = type(state)
    expect(kind in KINDS, InputError, f"{kind.__name__} is not a split Alpamayo crossing")
    names = [f.name for f in fields(kind)]
    body = b"".join(_field(getattr(state, name)) for name in names)
    return HEADER.pack(MAGIC, VERSION, KINDS.index(kind) + 1, len(names)) + body


def _int(view: memoryview, pos: int, source: str) -> tuple[int, int]:
    expect(view.nbytes >= pos + I64.size, InputError, f"{source}: truncated in an integer field")
    return I64.unpack_from(view, pos)[0], pos + I64.size


def _read_field(view: memoryview, pos: int, name: str, allowed: bytes, source: str):
    expect(view.nbytes > pos, InputError, f"{source}: truncated before field '{name}'")
    tag = bytes(view[pos:pos + 1])
    expect(tag in allowed, InputError, f"{source}: field '{name}' tagged {tag!r}, expected one of {allowed!r}")
    pos += 1
    if tag == b"T":
        return read_tensor(view, pos, name, source)
    if tag == b"N":
        return None, pos
    if tag in (b"I", b"B"):
        value, pos = _int(view, pos, source)
        return (bool(value) if tag == b"B" else value), pos
    first, pos = _int(view, pos, source)
    positions, pos = read_tensor(view, pos, f"{name}.positions", source)
    features, pos = read_tensor(view, pos, f"{name}.features", source)
    return DeepStack(positions, features, first), pos


def decode(buffer, source: str = "split Alpamayo crossing"):
    """The crossing `encode` wrote, every field checked (InputError naming the first that does not fit)."""
    view = memoryview(buffer)
    expect(view.nbytes >= HEADER.size, InputError, f"{source}: {view.nbytes} bytes, shorter than the header")
    magic, version, kind, count = HEADER.unpack_from(view, 0)
    expect(magic == MAGIC and version == VERSION, InputError,
           f"{source}: magic {magic!r} version {version}, expected {MAGIC!r} version {VERSION}")
    expect(1 <= kind <= len(KINDS), InputError, f"{source}: unknown kind {kind}")
    cls = KINDS[kind - 1]
    declared = fields(cls)
    expect(count == len(declared), InputError, f"{source}: {count} fields, a {cls.__name__} has {len(declared)}")
    pos, values = HEADER.size, {}
    for f in declared:
        values[f.name], pos = _read_field(view, pos, f.name, ALLOWED[f.type], source)
    expect(pos == view.nbytes, InputError, f"{source}: {view.nbytes - pos} trailing bytes")
    return cls(**values)


def roundtrip(state):
    """Through bytes and back: what a transport between two processes delivers."""
    return decode(encode(state))
