"""The shared-memory ring behind the `shm` handover (same host, other process), ROS-free.

Preallocated slots in /dev/shm with back-pressure, a sequence number, a partition epoch and a write
generation per slot; owner-only permissions. Segment names carry the user and a scope (the ROS graph:
`segment_name`), so a reader never opens another user's or another graph's ring. The owner holds a shared
flock on its segment for its whole life: a segment nobody holds a lock on is stale and is reclaimed; this
works across PID namespaces (containers sharing /dev/shm), where a PID says nothing.

A READY slot is the reader's while the reader lives, however slow (a 7B CPU suffix takes seconds per frame):
the reader beats in the ring header from a thread of its own (ring_reader.py) and records the newest frame it
took. The writer takes a READY slot back, counted, only when the reader is gone (silent for `reclaim_after_s`)
or has read past it (states are served in order); a reader copying that slot then sees the generation change
and refuses the copy. Attaching checks the segment's size against its header (a truncated one is refused).
The segment itself (its name, space reserved at creation, owner checked at attach, stale ones reclaimed) is
shm_segment.py's; a write that fails half-way hands its slot back (FREE), so the next write takes it.
"""

from __future__ import annotations

import atexit
import mmap
import os
import secrets
import struct
import time
from dataclasses import dataclass
from pathlib import Path

from ...errors import InputError, expect
from ...types import BoundaryState
from . import codec
from .shm_segment import (SEGMENT_PREFIX, SHM_DIR, _owner_alive, create_segment, open_segment,  # noqa: F401
                          reclaim_stale_segments, segment_prefix)  # (re-exported: the ring's names and reclaim)

RING_MAGIC = b"HVLARING"
RING_VERSION = 4                 # 4: slots hold HVLM messages (engine/handover/message.py)
RING_HEADER = struct.Struct("<8sIIQQI")       # magic, version, slots, slot capacity, ring id, owner pid
READER, READER_OFFSET = struct.Struct("<QQ"), 40  # reader's heartbeat (CLOCK_MONOTONIC ns), newest seq read + 1
# state, epoch(partition), seq, ring id, generation, payload length, written at (CLOCK_MONOTONIC ns)
SLOT_HEADER = struct.Struct("<IIQQIQQ")
SLOT_HEADER_SIZE = 64
FREE, WRITING, READY = 0, 1, 2
RECLAIM_AFTER_S = 1.0                         # a reader silent this long (no heartbeat) is gone
# A ring no reader has attached yet: its first descriptors may reach the reader seconds late. A reliable DDS
# writer's first samples, sent before the reader's side has matched it, are repaired at its next heartbeat
# (Fast DDS: every 3 s): measured, a descriptor 3.5 s late after a prefix restart. Reclaiming at 1 s lost
# that frame under `lossless` (test_slow_suffix, test_faults); the writer waits this long for first contact.
FIRST_CONTACT_S = 5.0
READER_BEAT_S = 0.1                           # how often a reader's transport beats
DESCRIPTOR = struct.Struct("<8sQIIQQ")        # magic, ring id, slot, epoch, seq, length
DESCRIPTOR_MAGIC = b"HVLASLOT"


def ring_bytes(slots: int, slot_capacity: int) -> int:
    """Size of a ring segment: the ring header block, then per slot its header and payload capacity."""
    return SLOT_HEADER_SIZE + slots * (SLOT_HEADER_SIZE + slot_capacity)


@dataclass(frozen=True)
class SlotDescriptor:
    """What travels on the topic (or the in-process queue) for a shared-memory handover: 40 bytes."""
    segment: str
    ring_id: int
    slot: int
    epoch: int
    seq: int
    length: int

    def pack(self) -> bytes:
        return DESCRIPTOR.pack(DESCRIPTOR_MAGIC, self.ring_id, self.slot, self.epoch, self.seq, self.length)

    @classmethod
    def unpack(cls, segment: str, data: bytes) -> "SlotDescriptor":
        expect(len(data) == DESCRIPTOR.size, InputError,
               f"slot descriptor: {len(data)} bytes, expected {DESCRIPTOR.size}")
        magic, ring_id, slot, epoch, seq, length = DESCRIPTOR.unpack(data)
        expect(magic == DESCRIPTOR_MAGIC, InputError, f"slot descriptor: magic {magic!r}, expected {DESCRIPTOR_MAGIC!r}")
        return cls(segment, ring_id, slot, epoch, seq, length)


class SharedMemoryRing:
    """A ring of preallocated slots in one /dev/shm segment. One writer (the owner), one reader.

    The writer fills a FREE slot, then flips it to READY; the reader copies the payload out and flips it back
    to FREE. A full ring blocks the writer (back-pressure) up to a timeout.
    """

    def __init__(self, path: Path, mm: mmap.mmap, fd: int, owner: bool):
        """Takes over `mm` and `fd`: both are closed when the header is refused (InputError)."""
        self.path, self._mm, self._fd, self.owner = path, mm, fd, owner
        try:
            self._check_header()
        except BaseException:
            mm.close()
            os.close(fd)
            raise
        self._next = 0
        self._closed = False
        self.reclaimed = 0  # writer: slots taken back from a reader that never read them
        self.reclaimed_seqs: list[int] = []  # frames lost with a gone reader, until the owner takes them (bounded)
        if owner:
            atexit.register(self.close)

    def _check_header(self) -> None:
        name, size = self.path.name, len(self._mm)
        magic, version, self.slots, self.slot_capacity, self.ring_id, self.owner_pid = \
            RING_HEADER.unpack_from(self._mm, 0)
        expect(magic == RING_MAGIC, InputError, f"shared-memory segment '{name}': not a boundary ring")
        expect(version == RING_VERSION, InputError,
               f"shared-memory segment '{name}': ring version {version}, expected {RING_VERSION}")
        needed = ring_bytes(self.slots, self.slot_capacity)
        expect(size >= needed, InputError,  # a truncated or foreign segment: never read past its end
               f"shared-memory segment '{name}': {size} bytes, its header promises {self.slots} slots of "
               f"{self.slot_capacity} B = {needed} B (truncated?)")

    # -- construction ----------------------------------------------------------------------------------
    @classmethod
    def create(cls, name: str, slots: int, slot_capacity: int, directory: Path = SHM_DIR,
               scope: str = "local") -> "SharedMemoryRing":
        """A new owner-only segment `<segment_prefix(scope)><pid>_<name>_<random>`, its space reserved, after
        reclaiming this user's stale segments (shm_segment.create_segment: a ConfigError says why it cannot be
        made, e.g. a /dev/shm too small, with the sizes and the remedy)."""
        expect(slots >= 1 and slot_capacity >= codec.MIN_SIZE, InputError,
               f"ring '{name}': slots={slots}, capacity={slot_capacity}: need >= 1 slot of >= {codec.MIN_SIZE} B")
        reclaim_stale_segments(directory)
        path, fd, mm = create_segment(
            f"{segment_prefix(scope)}{os.getpid()}_{name}", ring_bytes(slots, slot_capacity),
            lambda mm: RING_HEADER.pack_into(mm, 0, RING_MAGIC, RING_VERSION, slots, slot_capacity,
                                             secrets.randbits(63), os.getpid()), directory)
        return cls(path, mm, fd, owner=True)

    @classmethod
    def attach(cls, segment: str, directory: Path = SHM_DIR, scope: str | None = None) -> "SharedMemoryRing":
        """Open a writer's ring by name. scope: refuse any name outside this user's rings of that scope."""
        path = directory / segment
        expect(segment.startswith(SEGMENT_PREFIX) and "/" not in segment, InputError,
               f"shared-memory segment '{segment}': not a hybrid_vla_ros ring name")
        if scope is not None:
            expect(segment.startswith(segment_prefix(scope)), InputError,
                   f"shared-memory segment '{segment}': not one of this user's rings in graph scope '{scope}' "
                   f"(expected the prefix '{segment_prefix(scope)}')")
        fd, mm = open_segment(segment, directory, RING_HEADER.size)  # this user's regular file, or refused
        return cls(path, mm, fd, owner=False)

    @property
    def segment(self) -> str:
        return self.path.name

    def _slot_offset(self, index: int) -> int:
        return SLOT_HEADER_SIZE + index * (SLOT_HEADER_SIZE + self.slot_capacity)

    def _slot_state(self, index: int) -> int:
        return struct.unpack_from("<I", self._mm, self._slot_offset(index))[0]

    def free_slots(self) -> int:
        return sum(self._slot_state(i) == FREE for i in range(self.slots))

    def _slot_header(self, index: int) -> tuple:  # (state, epoch, seq, ring id, generation, length, written_ns)
        return SLOT_HEADER.unpack_from(self._mm, self._slot_offset(index))

    # -- writer ----------------------------------------------------------------------------------------
    def _wait_for_slot(self, index: int, timeout_s: float | None, reclaim_after_s: float) -> None:
        """Back-pressure: wait until the slot is FREE, as long as its reader lives (timeout_s: a bound anyway, None
        = none); take it back when the reader is gone or read past it (its frame lost, counted in `reclaimed`)."""
        deadline = None if timeout_s is None else time.monotonic() + timeout_s
        pause = 0.0002
        while True:
            flag, _, seq, *_, written_ns = self._slot_header(index)
            if flag == FREE:
                return
            done = self._reader_done_with(seq, written_ns, reclaim_after_s) if flag == READY else None
            if done is not None:
                self.reclaimed += 1
                if done == "gone":   # lost with its reader; one it read past, it dropped and counted itself
                    self.reclaimed_seqs = (self.reclaimed_seqs + [seq])[-self.slots * 4:]
                return
            if deadline is not None and time.monotonic() > deadline:
                raise TimeoutError(f"ring '{self.segment}': no free slot within {timeout_s} s (reader stalled?)")
            time.sleep(pause)
            pause = min(pause * 2, 0.005)   # a slow reader: poll less often the longer it takes

    def _reader_done_with(self, seq: int, written_ns: int, reclaim_after_s: float) -> str | None:
        """"gone" (silent since its last beat, or since the write), "passed" (it took a newer frame: this one
        will never be read) or None (the slot is still the reader's)."""
        beat_ns, read_past = READER.unpack_from(self._mm, READER_OFFSET)
        if read_past > seq + 1:
            return "passed"
        silent_s = reclaim_after_s if beat_ns else max(reclaim_after_s, FIRST_CONTACT_S)   # never attached yet
        return "gone" if time.monotonic_ns() - max(beat_ns, written_ns) > silent_s * 1e9 else None

    def beat(self, read_seq: int | None = None) -> None:
        """Reader: I am alive (the writer leaves my READY slots to me); read_seq: and I took this frame (the
        reading thread only: a plain beat, from any thread, writes the time alone, never an older progress)."""
        if read_seq is None:
            struct.pack_into("<Q", self._mm, READER_OFFSET, time.monotonic_ns())
        else:
            READER.pack_into(self._mm, READER_OFFSET, time.monotonic_ns(),
                             max(READER.unpack_from(self._mm, READER_OFFSET)[1], read_seq + 1))

    def write(self, state: BoundaryState, timeout_s: float | None = None,
              reclaim_after_s: float = RECLAIM_AFTER_S) -> SlotDescriptor:
        length = codec.encoded_size(state)
        expect(length <= self.slot_capacity, InputError,
               f"boundary state of frame {state.seq}: {length} bytes, ring slots hold {self.slot_capacity}")
        index = self._next
        self._wait_for_slot(index, timeout_s, reclaim_after_s)
        offset = self._slot_offset(index)
        generation = (self._slot_header(index)[4] + 1) & 0xFFFFFFFF
        SLOT_HEADER.pack_into(self._mm, offset, WRITING, 0, 0, self.ring_id, generation, 0, 0)  # readers: hands off
        try:
            codec.encode_into(state, self._mm, offset + SLOT_HEADER_SIZE)
        except BaseException:   # refused half-way (a malformed state, a failed device copy): nothing was
            struct.pack_into("<I", self._mm, offset, FREE)   # published, the slot is free for the next write
            raise
        SLOT_HEADER.pack_into(self._mm, offset, WRITING, state.partition, state.seq, self.ring_id, generation, length,
                              time.monotonic_ns())
        struct.pack_into("<I", self._mm, offset, READY)  # publish last
        self._next = (index + 1) % self.slots
        return SlotDescriptor(self.segment, self.ring_id, index, state.partition, state.seq, length)

    # -- reader ----------------------------------------------------------------------------------------
    def read(self, desc: SlotDescriptor) -> BoundaryState:
        """Copy the state out of its slot, check it against the descriptor, free the slot (unless the writer
        took it back meanwhile: then the copy is refused and the slot is left to the writer)."""
        where = f"ring '{self.segment}' slot {desc.slot}"
        expect(desc.ring_id == self.ring_id, InputError,
               f"{where}: descriptor is for ring {desc.ring_id}, this ring is {self.ring_id} (foreign slot)")
        expect(0 <= desc.slot < self.slots, InputError, f"{where}: slot outside 0..{self.slots - 1}")
        offset = self._slot_offset(desc.slot)
        state_flag, epoch, seq, ring_id, generation, length, _ = self._slot_header(desc.slot)
        expect(state_flag == READY, InputError, f"{where}: not ready (state {state_flag})")
        expect(ring_id == self.ring_id, InputError, f"{where}: written by ring {ring_id} (foreign slot)")
        expect((seq, epoch, length) == (desc.seq, desc.epoch, desc.length), InputError,
               f"{where}: holds frame {seq} partition {epoch} ({length} B), descriptor says frame {desc.seq} "
               f"partition {desc.epoch} ({desc.length} B)")
        try:  # the slot is ours from here on: free it whatever its payload holds
            expect(length <= self.slot_capacity, InputError, f"{where}: length {length} exceeds capacity")
            start = offset + SLOT_HEADER_SIZE
            state = codec.decode(memoryview(self._mm)[start:start + length], source=where, copy=True)
            expect(self._still(desc.slot, generation), InputError,
                   f"{where}: frame {seq} was taken back by the writer while being read (read too late)")
            expect((state.seq, state.partition) == (seq, epoch), InputError,
                   f"{where}: payload is frame {state.seq} partition {state.partition}, header says {seq}/{epoch}")
            self.beat(read_seq=seq)
            return state
        finally:
            if self._still(desc.slot, generation):  # else the writer owns it again: leave it alone
                struct.pack_into("<I", self._mm, offset, FREE)

    def _still(self, index: int, generation: int) -> bool:
        """The slot is READY with the generation the reader started from (not taken back by the writer)."""
        flag, _, _, _, now = self._slot_header(index)[:5]
        return flag == READY and now == generation

    def close(self) -> None:
        if self._closed:
            return
        self._closed = True
        try:
            self._mm.close()
        except BufferError:  # a zero-copy view is still alive; the OS frees it with the process
            pass
        os.close(self._fd)
        if self.owner:
            try:
                self.path.unlink()
            except FileNotFoundError:
                pass
