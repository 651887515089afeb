"""One message format for what crosses the cut, for every model kind (issue 51): `HVLM` version 1. A message is
a header, a table of entries (one per frame it carries) and named parts (tensors and small values), each part
belonging to one entry or to the message. The kind's own code says which parts a crossing has; this module checks
the structure (sizes, tags, which part may carry which value) and refuses the formats it replaced by name.
Never pickle.

Layout (little endian):
    header  "<4sHBBHHiIQQqQQI"  magic b"HVLM", version 1, kind (KINDS), direction (1 forward: prefix -> suffix,
            2 back), flags (ABORT, REFUSED; the carrier: INPROC, SHM, else inline), entry count (1..MAX_ENTRIES), partition (-1: none), sender pid, run
            (random per prefix server), step (message number in the run), deadline_ns (0: none), model id (0: not
            checked), shm domain, part count
    entry*  "<qqqIHHHiiii"  seq, stamp_ns, arrival_ns, index (the frame's message number), crossing code,
            chunk_index, chunk_count, slot, start, row, count
    part*   "<BBH"  part code (PARTS), value tag, entry (MESSAGE_PART: the message's own), then by tag:
            T tensor (the handover codec's record) | I "<q" | F "<d" | S "<I" length + UTF-8 | V "<I" n + n "<d"
            | B "<I" length + raw bytes
A message's tensors can travel elsewhere (the carrier): in this process (INPROC: a `handle` part) or in a
shared-memory slot (SHM: `shm_segment`, `shm_slot`), which then holds the whole message, inline.
"""

from __future__ import annotations

import os
import struct
from dataclasses import dataclass, field

import torch

from ...errors import InputError, expect
from .tensor_record import read_tensor, tensors_size, write_tensor

MAGIC, VERSION = b"HVLM", 1
HEADER = struct.Struct("<4sHBBHHiIQQqQQI")
ENTRY = struct.Struct("<qqqIHHHiiii")
PART = struct.Struct("<BBH")
I64, F64, U32 = struct.Struct("<q"), struct.Struct("<d"), struct.Struct("<I")
KINDS = {"waypoints": 1, "tokens": 2, "alpamayo": 3}
FORWARD, BACK = 1, 2
ABORT, REFUSED = 1, 2                     # flags: the prefix gave the frame up / the suffix refused it
INPROC, SHM = 4, 8                        # flags: where the tensors are (neither: inline, in this message)
KNOWN_FLAGS = ABORT | REFUSED | INPROC | SHM
MESSAGE_PART = 0xFFFF
MAX_ENTRIES, MAX_PARTS, MAX_TEXT = 1024, 8192, 1 << 20
# part name -> (code, tag): the codes are the wire format (test_message.py pins them); a part arriving with another
# tag is refused. A new part takes a new code; a code is never reused.
PARTS = {
    "hidden": (1, "T"), "positions": (2, "T"), "mask": (3, "T"), "ds_first": (4, "I"), "ds_positions": (5, "T"),
    "ds_features": (6, "T"), "rope_delta": (7, "I"), "stream": (8, "I"), "history_xyz": (9, "T"),
    "history_rot": (10, "T"), "step": (11, "I"), "token": (12, "I"), "feed": (13, "I"), "done": (14, "I"),
    "x": (15, "T"), "t": (16, "T"), "times": (17, "V"), "seed": (18, "I"), "temperature": (19, "F"),
    "top_p": (20, "F"), "max_new_tokens": (21, "I"), "flow_steps": (22, "I"), "guidance_weight": (23, "F"),
    "guidance": (24, "I"), "reason": (25, "S"), "text": (26, "S"), "query_index": (27, "I"), "context": (28, "S"),
    "slots": (29, "I"), "handle": (30, "I"), "shm_segment": (31, "S"), "shm_slot": (32, "B"), "kv_segments": (33, "T")}
NAMES = {code: name for name, (code, _) in PARTS.items()}
# the formats HVLM replaced: refused by name, never read as something else
OLD_FORMATS = {b"HVLE": "waypoint boundary envelope", b"HVLB": "bare boundary state",
               b"HVLP": "ActionFlow packed step", b"HVLT": "ActionFlow tokens", b"HVAF": "Alpamayo forward message",
               b"HVAB": "Alpamayo answer", b"HVLX": "Alpamayo crossing"}


class OldMessageError(InputError):
    """A message in a format this release no longer reads: counted under its own reason."""
    reason = "old_message"


@dataclass
class Entry:
    """One frame's share of a message; `parts` are its named values."""
    seq: int
    stamp_ns: int
    arrival_ns: int = 0
    index: int = 0
    crossing: int = 0
    chunk_index: int = 0
    chunk_count: int = 1
    slot: int = -1
    start: int = 0
    row: int = 0
    count: int = 0
    parts: dict = field(default_factory=dict)


@dataclass
class Message:
    kind: int
    direction: int
    entries: list[Entry]
    parts: dict = field(default_factory=dict)     # the message's own: times, a frame's opening, a refusal
    flags: int = 0
    partition: int = -1
    run: int = 0
    step: int = 0
    deadline_ns: int = 0
    model_id: int = 0
    domain: int = 0
    pid: int = field(default_factory=os.getpid)


# ---- writing -----------------------------------------------------------------------------------------------------
def _small(name: str, value) -> bytes:
    """A non-tensor part's value bytes; a value of another kind is an InputError, never converted."""
    tag, what = PARTS[name][1], f"HVLM part {name!r}"
    if tag in ("I", "F"):
        kinds = int if tag == "I" else (int, float)
        expect(isinstance(value, kinds), InputError, f"{what}: a number, got {type(value).__name__}")
        expect(tag == "F" or -2**63 <= value < 2**63, InputError, f"{what}: {value} does not fit 64 bits")
        return I64.pack(value) if tag == "I" else F64.pack(float(value))
    if tag == "V":
        expect(all(isinstance(v, (int, float)) for v in value), InputError, f"{what}: numbers only")
        return U32.pack(len(value)) + struct.pack(f"<{len(value)}d", *map(float, value))
    expect(isinstance(value, (bytes, bytearray, memoryview) if tag == "B" else str), InputError,
           f"{what}: {'bytes' if tag == 'B' else 'text'}, got {type(value).__name__}")
    raw = bytes(value) if tag == "B" else value.encode()
    expect(len(raw) <= MAX_TEXT, InputError, f"{what}: {len(raw)} bytes, at most {MAX_TEXT}")
    return U32.pack(len(raw)) + raw


def _layout(message: Message) -> list[tuple[int, str, object]]:
    """(owner, name, tensor or value bytes) of every part, checked, in the order they are written."""
    count = len(message.entries)
    expect(1 <= count <= MAX_ENTRIES, InputError, f"HVLM: {count} entries, expected 1..{MAX_ENTRIES}")
    owned = [(MESSAGE_PART, message.parts)] + [(i, e.parts) for i, e in enumerate(message.entries)]
    out = []
    for owner, parts in owned:
        for name, value in parts.items():
            expect(name in PARTS, InputError, f"HVLM: no part named {name!r}")
            if PARTS[name][1] == "T":
                expect(isinstance(value, torch.Tensor), InputError,
                       f"HVLM part {name!r}: a tensor, got {type(value).__name__}")
                out.append((owner, name, value))
            else:
                out.append((owner, name, _small(name, value)))
    return out


def _size(layout) -> int:
    return sum(PART.size + (tensors_size([v]) if isinstance(v, torch.Tensor) else len(v)) for _, _, v in layout)


def encoded_size(message: Message) -> int:
    return HEADER.size + ENTRY.size * len(message.entries) + _size(_layout(message))


def encode_into(message: Message, buffer, offset: int = 0) -> int:
    """Write the message into a writable buffer (bytearray, mmap, shared memory; each tensor copied once, from
    wherever it lives, into place). -> bytes written."""
    layout, m = _layout(message), message
    HEADER.pack_into(buffer, offset, MAGIC, VERSION, m.kind, m.direction, m.flags, len(m.entries), m.partition,
                     m.pid, m.run, m.step, m.deadline_ns, m.model_id, m.domain, len(layout))
    pos = offset + HEADER.size
    for e in m.entries:
        ENTRY.pack_into(buffer, pos, e.seq, e.stamp_ns, e.arrival_ns, e.index, e.crossing, e.chunk_index,
                        e.chunk_count, e.slot, e.start, e.row, e.count)
        pos += ENTRY.size
    view = memoryview(buffer)
    for owner, name, value in layout:
        code, tag = PARTS[name]
        PART.pack_into(buffer, pos, code, ord(tag), owner)
        pos += PART.size
        if isinstance(value, torch.Tensor):
            pos = write_tensor(buffer, pos, value.contiguous())
        else:
            view[pos:pos + len(value)] = value
            pos += len(value)
    return pos - offset


def encode(message: Message) -> bytes:
    """The message as HVLM version 1 bytes."""
    buffer = bytearray(encoded_size(message))
    encode_into(message, buffer)
    return bytes(buffer)


# ---- reading -----------------------------------------------------------------------------------------------------
def _check_magic(view: memoryview, source: str) -> None:
    expect(view.nbytes >= 4, InputError, f"{source}: {view.nbytes} bytes, shorter than a magic")
    magic = bytes(view[:4])
    if magic in OLD_FORMATS:
        raise OldMessageError(f"{source}: a {OLD_FORMATS[magic]} (magic {magic!r}) from a hybrid_vla_ros release "
                              f"before the one message format; this node reads {MAGIC!r} version {VERSION} only: "
                              f"run prefix and suffix from one release")
    expect(magic == MAGIC, InputError, f"{source}: magic {magic!r}, expected {MAGIC!r}")


def _head(view: memoryview, source: str) -> tuple[Message, int, int]:
    """Header and entry table -> (message without parts, part count, position after the table)."""
    _check_magic(view, source)
    expect(view.nbytes >= HEADER.size, InputError, f"{source}: {view.nbytes} bytes, shorter than the header")
    (_, version, kind, direction, flags, count, partition, pid, run, step, deadline, model_id, domain,
     part_count) = HEADER.unpack_from(view, 0)
    expect(version == VERSION, OldMessageError if 0 < version < VERSION else InputError,
           f"{source}: HVLM version {version}; this node reads version {VERSION}")
    expect(kind in KINDS.values(), InputError, f"{source}: unknown model kind {kind}")
    expect(direction in (FORWARD, BACK), InputError, f"{source}: unknown direction {direction}")
    expect(flags & ~KNOWN_FLAGS == 0 and flags & (INPROC | SHM) != INPROC | SHM, InputError,
           f"{source}: unknown flags {flags:#x}")
    expect(1 <= count <= MAX_ENTRIES and part_count <= MAX_PARTS, InputError,
           f"{source}: {count} entries and {part_count} parts, expected 1..{MAX_ENTRIES} and <= {MAX_PARTS}")
    end = HEADER.size + ENTRY.size * count
    expect(view.nbytes >= end, InputError, f"{source}: truncated in its entry table ({count} entries)")
    entries = [Entry(*ENTRY.unpack_from(view, HEADER.size + ENTRY.size * i)) for i in range(count)]
    message = Message(kind, direction, entries, {}, flags, partition, run, step, deadline, model_id, domain, pid)
    return message, part_count, end


def peek(buffer) -> Message | None:
    """The header and entries alone (no part read), or None where they are not readable HVLM: a message whose
    parts are damaged still names the frames to refuse."""
    try:
        return _head(memoryview(buffer), "HVLM message")[0]
    except InputError:
        return None


def _read_value(view: memoryview, pos: int, name: str, tag: str, source: str, copy: bool = True):
    if tag == "T":
        return read_tensor(view, pos, name, source, copy)
    size = {"I": I64.size, "F": F64.size}.get(tag, U32.size)
    expect(view.nbytes >= pos + size, InputError, f"{source}: truncated in part {name!r}")
    if tag in ("I", "F"):
        return (I64 if tag == "I" else F64).unpack_from(view, pos)[0], pos + size
    n, pos = U32.unpack_from(view, pos)[0], pos + size
    length = n * F64.size if tag == "V" else n
    expect(tag == "V" or n <= MAX_TEXT, InputError, f"{source}: part {name!r} declares {n} bytes")
    expect(view.nbytes >= pos + length, InputError, f"{source}: truncated in part {name!r}")
    if tag == "V":
        return struct.unpack_from(f"<{n}d", view, pos), pos + length
    if tag == "B":
        return bytes(view[pos:pos + length]), pos + length
    try:
        return bytes(view[pos:pos + length]).decode(), pos + length
    except UnicodeDecodeError as exc:
        raise InputError(f"{source}: part {name!r} is not UTF-8 ({exc})") from None


def _read_part(view: memoryview, pos: int, message: Message, source: str, copy: bool) -> int:
    expect(view.nbytes >= pos + PART.size, InputError, f"{source}: truncated before a part")
    code, tag, owner = PART.unpack_from(view, pos)
    expect(code in NAMES, InputError, f"{source}: unknown part code {code}")
    name = NAMES[code]
    expect(chr(tag) == PARTS[name][1], InputError, f"{source}: part {name!r} tagged {chr(tag)!r}, expected "
           f"{PARTS[name][1]!r}")
    expect(owner == MESSAGE_PART or owner < len(message.entries), InputError,
           f"{source}: part {name!r} of entry {owner}; the message has {len(message.entries)}")
    parts = message.parts if owner == MESSAGE_PART else message.entries[owner].parts
    expect(name not in parts, InputError, f"{source}: part {name!r} twice for one owner")
    parts[name], pos = _read_value(view, pos + PART.size, name, PARTS[name][1], source, copy)
    return pos


def decode(buffer, source: str = "HVLM message", kind: int | None = None, direction: int | None = None,
           copy: bool = True) -> Message:
    """The message `encode` wrote, every structure checked (InputError naming what does not fit; an old format:
    OldMessageError). `kind` / `direction`: what the caller serves; another is refused with both named.
    copy=False: tensors that view `buffer` (zero copy)."""
    view = memoryview(buffer)
    message, part_count, pos = _head(view, source)
    names = {v: k for k, v in KINDS.items()}
    expect(kind is None or message.kind == kind, InputError,
           f"{source}: a message of a {names[message.kind]} model; this node serves a {names.get(kind)} model")
    expect(direction is None or message.direction == direction, InputError,
           f"{source}: direction {message.direction}, expected {direction}")
    for _ in range(part_count):
        pos = _read_part(view, pos, message, source, copy)
    expect(pos == view.nbytes, InputError, f"{source}: {view.nbytes - pos} trailing bytes")
    return message
