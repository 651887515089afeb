"""The boundary handover, in one place (ROS-free): which transport carries a state, the envelope that the
boundary topic carries, the prefix-side encoder and the suffix-side decoder. Built on transport.py's classes.

Envelope (docs/INTERFACES.md), version 3: header "<4sBBBBIQqqQ" (44 bytes) = magic b"HVLE", version, kind,
chunk_index, chunk_count (1..64; 1 = the whole frame: chunked prefill, engine/chunking.py), sender pid, shm
domain (the host and /dev/shm the sender's rings live in), stamp_ns, arrival_ns (wall clock when the prefix
had the frame: the output's age is measured from it), model id (engine: a mismatch is refused); then the body:
    kind 1 inproc: "<Q" handle into the sender's in-process registry (zero copy)
    kind 2 shm:    "<H" segment name length, segment name, 40-byte slot descriptor
    kind 3 inline: the codec's serialised boundary state
The decoder refuses a state whose chunk index or count differs from the envelope's (inproc: the state object;
shm, inline: the codec header). Version 2 (the same layout with a reserved "<H" where the chunk fields are) is
still read, as a whole frame (chunk 0 of 1): a new suffix keeps taking an old prefix's states in a graph
upgraded one node at a time, and a chunked state inside a version 2 envelope is refused as a mismatch.
"""

from __future__ import annotations

import array
import os
import socket
import struct
import threading
import weakref
import zlib

from ...errors import InputError, expect
from ...types import BoundaryState
from . import codec
from .transport import SHM_DIR, InProcessTransport, SharedMemoryTransport

ENVELOPE = struct.Struct("<4sBBBBIQqqQ")   # version 3; version 2 had "<H" reserved where the chunk fields are
ENVELOPE_MAGIC = b"HVLE"
ENVELOPE_VERSION = 3
ENVELOPE_READS = (2, 3)
KINDS = {"inproc": 1, "shm": 2, "inline": 3}
KIND_NAMES = {v: k for k, v in KINDS.items()}
TRANSPORT_CHOICES = ("auto", *KINDS)
BOUNDARY_LABEL = "hybrid_vla_ros/boundary/v1"
HANDLE = struct.Struct("<Q")
NAME_LENGTH = struct.Struct("<H")


def host_id() -> int:
    """Which shared memory this process can reach: the boot id (the kernel) and the identity of /dev/shm (a
    container or mount namespace with its own /dev/shm is another domain). Equal ids: `shm` works between
    the two processes; otherwise only `inline` does."""
    try:
        with open("/proc/sys/kernel/random/boot_id", "rb") as f:
            seed = f.read().strip()
    except OSError:
        seed = socket.gethostname().encode()
    try:
        shm = os.stat(SHM_DIR)
        seed += f":{shm.st_dev}:{shm.st_ino}".encode()
    except OSError:
        seed += b":no-shm"
    return zlib.crc32(seed) | (zlib.crc32(seed[::-1]) << 32)


HOST_ID = host_id()


def _release_evicted(state: BoundaryState) -> None:
    if state.flight is not None:
        state.flight.release()


# Handles inside this process, bounded: 64 frames in flight (max_in_flight's limit), each of up to MAX_CHUNKS
# chunk states (chunked prefill): the same tensors as 64 whole frames.
PROCESS_REGISTRY = InProcessTransport(max_pending=64, on_evict=_release_evicted)  # raised by reserve()
_local_receivers: "weakref.WeakSet[HandoverDecoder]" = weakref.WeakSet()  # suffix decoders living in this process
# (weak: a decoder dropped without close() stops counting once collected, instead of keeping `auto` on
# in-process handles that nobody here reads)
_local_lock = threading.Lock()


def choose_transport(same_process: bool, same_host: bool) -> str:
    """In-process when the peer shares the process, shared memory on one host, inline bytes otherwise."""
    if same_process:
        return "inproc"
    return "shm" if same_host and SHM_DIR.is_dir() else "inline"


def envelope_stamp(data: bytes) -> int | None:
    """The frame stamp of an envelope, or None when it is not one (to report a lost frame by its stamp)."""
    view = memoryview(data)
    if view.nbytes < ENVELOPE.size or bytes(view[:4]) != ENVELOPE_MAGIC:
        return None
    return ENVELOPE.unpack_from(view, 0)[7]


def pack_envelope(kind: str, stamp_ns: int, body: bytes, arrival_ns: int = 0, model_id: int = 0,
                  chunk: tuple[int, int] = (0, 1)) -> bytes:
    """chunk: (index, count) of the state in the body (engine/chunking.py); (0, 1) for a whole frame."""
    buffer = bytearray(ENVELOPE.size)
    pack_envelope_into(buffer, kind, stamp_ns, arrival_ns, model_id, chunk)
    return bytes(buffer) + body


def pack_envelope_into(buffer, kind: str, stamp_ns: int, arrival_ns: int, model_id: int,
                       chunk: tuple[int, int]) -> None:
    index, count = chunk
    codec.check_chunk_index(index, count, f"boundary envelope of the frame stamped {stamp_ns}")
    ENVELOPE.pack_into(buffer, 0, ENVELOPE_MAGIC, ENVELOPE_VERSION, KINDS[kind], index, count, os.getpid(),
                       HOST_ID, stamp_ns, arrival_ns, model_id)


def unpack_envelope(view: memoryview) -> tuple:
    """-> (version, kind, (chunk index, count), pid, host, stamp_ns, arrival_ns, model id), magic, version and
    chunk fields checked (version 2: a whole frame, (0, 1)); raises InputError with the reason."""
    expect(view.nbytes >= ENVELOPE.size, InputError,
           f"boundary message: {view.nbytes} bytes, shorter than the {ENVELOPE.size}-byte envelope")
    magic, version, kind, index, count, *rest = ENVELOPE.unpack_from(view, 0)
    expect(magic == ENVELOPE_MAGIC, InputError, f"boundary message: magic {magic!r}, expected {ENVELOPE_MAGIC!r}")
    expect(version in ENVELOPE_READS, InputError,
           f"boundary message: envelope version {version}, this node reads versions {ENVELOPE_READS}")
    if version < 3:
        index, count = 0, 1
    codec.check_chunk_index(index, count, f"boundary message: envelope of chunk {index} of {count}")
    return (version, kind, (index, count), *rest)


class HandoverEncoder:
    """Prefix side. `transport` is a parameter value: auto (in-process when a decoder lives in this process,
    else shared memory when every receiver reported this host's shm domain (`receivers`), else inline bytes),
    inproc, shm or inline. The shared-memory ring is created at the first state, named in `scope`, with
    ring_slots slots: frames in flight x chunks per frame (chunked prefill hands over a state per chunk)."""

    def __init__(self, transport: str, ring_slots: int, ring_name: str, flight=None, scope: str = "local",
                 model_id: int = 0):
        """flight: the sender's FlightControl, when an in-process receiver frees the slot (the graph's prefix
        node); the state then carries it to the receiver. None when the caller manages slots itself.
        model_id: written into every envelope (receivers running another model refuse the state)."""
        expect(transport in TRANSPORT_CHOICES, InputError,
               f"boundary transport '{transport}' is not one of {list(TRANSPORT_CHOICES)}")
        self.transport, self.flight, self.model_id = transport, flight, model_id
        if transport in ("auto", "inproc"):
            PROCESS_REGISTRY.reserve(ring_slots)   # every state in flight may wait there (chunks: several per frame)
        self.shm = SharedMemoryTransport(slots=ring_slots, name=ring_name, scope=scope) \
            if transport in ("auto", "shm") else None
        # shm domains of the receivers (None: not known, e.g. an engine pipeline whose decoder is on this host)
        self.receivers: set[int] | None = None

    def kind(self) -> str:
        if self.transport != "auto":
            return self.transport
        with _local_lock:
            if _local_receivers:
                return "inproc"
        return choose_transport(same_process=False, same_host=self.receivers in (None, {HOST_ID}))

    def encode(self, state: BoundaryState, kind: str | None = None) -> bytes:
        """state -> envelope bytes (kind: from kind() when not given). Raises InputError (too large for the
        ring) or TimeoutError (ring full)."""
        kind = kind or self.kind()
        codec.check_chunk(state.chunk_index, state.chunk_count, state.chunk_start,   # before any slot or handle
                          f"boundary state of frame {state.seq}")
        if kind == "inproc":
            state.flight = self.flight
            body = HANDLE.pack(PROCESS_REGISTRY.send(state, owner=self))
        elif kind == "shm":
            expect(self.shm is not None, InputError, f"boundary transport '{self.transport}' has no shared-memory ring")
            segment, packed = self.shm.send(state)
            name = segment.encode()
            body = NAME_LENGTH.pack(len(name)) + name + packed
        else:
            return self._inline(state)
        return pack_envelope(kind, state.stamp_ns, body, state.arrival_ns, self.model_id,
                             (state.chunk_index, state.chunk_count))

    def _inline(self, state: BoundaryState) -> array.array:
        """Envelope and serialised state written once into one buffer of the type a uint8[] message field
        keeps (array 'B'): rclpy takes it without a conversion, and nothing is copied on the way."""
        buffer = array.array("B", bytes(ENVELOPE.size + codec.encoded_size(state)))
        pack_envelope_into(buffer, "inline", state.stamp_ns, state.arrival_ns, self.model_id,
                           (state.chunk_index, state.chunk_count))
        codec.encode_into(state, memoryview(buffer), ENVELOPE.size)
        return buffer

    def check_ring_room(self, state_bytes: int, chunked: bool, local_receiver: bool) -> None:
        """Configure: ConfigError (sizes, remedy) when /dev/shm cannot hold the shared-memory ring this encoder will
        make (shm; auto unless a receiver shares this process): refused at start-up, not at the first frame."""
        if self.shm is not None and not (self.transport == "auto" and local_receiver):
            self.shm.check_room(state_bytes, chunked)

    def pending(self) -> int:
        """This encoder's in-process states not yet taken by the receiver."""
        return PROCESS_REGISTRY.pending(owner=self)

    @property
    def reclaimed(self) -> int:
        """Ring slots taken back from a receiver that never read them (frames lost with it)."""
        return self.shm.reclaimed if self.shm is not None else 0

    def take_reclaimed(self) -> list[int]:
        """The frame seqs lost in ring slots taken back since the last call."""
        ring = self.shm.ring if self.shm is not None else None
        if ring is None or not ring.reclaimed_seqs:
            return []
        seqs, ring.reclaimed_seqs = ring.reclaimed_seqs, []
        return list(dict.fromkeys(seqs))   # a chunked frame's slots share its seq: one loss per frame

    def close(self) -> None:
        PROCESS_REGISTRY.discard(self)  # states nobody will take any more must not hold their tensors
        if self.shm:
            self.shm.close()


class HandoverDecoder:
    """Suffix side: envelope bytes -> BoundaryState. Every malformed input is an InputError that says what.
    scope: attach only to this user's rings of this graph; model_id (0: any): refuse states of another model."""

    def __init__(self, scope: str = "local", model_id: int = 0):
        self.shm = SharedMemoryTransport(scope=scope)
        self.model_id = model_id
        with _local_lock:
            _local_receivers.add(self)

    def decode(self, data: bytes) -> tuple[BoundaryState, str]:
        view = memoryview(data)
        _version, kind, chunk, pid, host, _stamp, arrival_ns, model_id = unpack_envelope(view)
        expect(kind in KIND_NAMES, InputError, f"boundary message: unknown kind {kind}")
        expect(not self.model_id or model_id == self.model_id, InputError,
               f"boundary message from model {model_id:016x}, this stage runs model {self.model_id:016x} "
               f"(prefix and suffix must load the same weights)")
        body, name = view[ENVELOPE.size:], KIND_NAMES[kind]
        if name == "inproc":
            state = self._inproc(body, pid, host)
        elif name == "shm":
            state = self._shm(body, host)
        else:
            state = codec.decode(body, source="inline boundary payload")
        expect((state.chunk_index, state.chunk_count) == chunk, InputError,
               f"boundary message ({name}): the envelope says chunk {chunk[0]} of {chunk[1]}, the state it carries "
               f"is chunk {state.chunk_index} of {state.chunk_count} (frame {state.seq}); refused")
        state.arrival_ns = arrival_ns
        return state, name

    def _inproc(self, body: memoryview, pid: int, host: int) -> BoundaryState:
        expect(pid == os.getpid() and host == HOST_ID, InputError,
               f"boundary message: in-process handle from process {pid}, this is process {os.getpid()} "
               f"(set the prefix's boundary_transport to shm or inline)")
        expect(body.nbytes == HANDLE.size, InputError,
               f"boundary message: in-process body of {body.nbytes} bytes, expected {HANDLE.size}")
        return PROCESS_REGISTRY.receive(HANDLE.unpack(body)[0])

    def watch(self, data: bytes) -> None:
        """A message just received, before it waits behind earlier frames: a shared-memory descriptor's ring
        is attached and beaten from now on (engine/handover/ring_reader.py). Anything else, or anything
        malformed, is left to decode() to refuse with its reason."""
        view = memoryview(data)
        if view.nbytes < ENVELOPE.size or bytes(view[:4]) != ENVELOPE_MAGIC:
            return
        version, kind, _, _, _, host, *_ = ENVELOPE.unpack_from(view, 0)[1:]
        if version in ENVELOPE_READS and KIND_NAMES.get(kind) == "shm":
            try:
                self.shm.watch(self._shm_handle(view[ENVELOPE.size:], host))
            except InputError:
                pass

    def _shm(self, body: memoryview, host: int) -> BoundaryState:
        return self.shm.receive(self._shm_handle(body, host))

    def _shm_handle(self, body: memoryview, host: int) -> tuple[str, bytes]:
        expect(host == HOST_ID, InputError, "boundary message: shared-memory descriptor from another host or "
               "/dev/shm (set the prefix's boundary_transport to auto or inline)")
        expect(body.nbytes >= NAME_LENGTH.size, InputError,
               f"boundary message: shared-memory body of {body.nbytes} bytes has no segment name")
        (length,) = NAME_LENGTH.unpack_from(body, 0)
        expect(body.nbytes >= NAME_LENGTH.size + length, InputError,
               f"boundary message: segment name of {length} bytes, body has {body.nbytes - NAME_LENGTH.size}")
        segment = bytes(body[NAME_LENGTH.size:NAME_LENGTH.size + length]).decode("ascii", errors="replace")
        return segment, bytes(body[NAME_LENGTH.size + length:])

    def close(self) -> None:
        with _local_lock:
            _local_receivers.discard(self)
        self.shm.close()
