"""The boundary handover, in one place (ROS-free): which transport carries a state, the message the boundary topic
carries, the prefix-side encoder and the suffix-side decoder. Built on transport.py's classes.

Every boundary message is HVLM (engine/handover/message.py; a waypoint state: codec.py), kind `waypoints`, whose
header names the sender's pid, its shm domain (the host and /dev/shm its rings live in) and the model id (a
mismatch is refused), and whose entry names the frame (seq, stamp_ns, arrival_ns: wall clock when the prefix had
the frame, the output's age is measured from it) and the chunk (chunked prefill, engine/chunking.py). The
carrier says where the tensors are:
    inline (no carrier flag): in the message itself (codec.py's parts)
    INPROC: a `handle` into the sender's in-process registry (zero copy)
    SHM:    `shm_segment`, the ring's name, and `shm_slot`, the 40-byte slot descriptor; the slot holds the state
            as an inline message
The decoder refuses a state whose chunk index or count differs from the message's entry. The formats before HVLM
(the HVLE envelope, the bare HVLB state) are refused by name (old_message).
"""

from __future__ import annotations

import array
import os
import socket
import threading
import weakref
import zlib

from ...errors import InputError, expect
from ...types import BoundaryState
from . import codec
from . import message as hvlm
from .transport import SHM_DIR, InProcessTransport, SharedMemoryTransport

KINDS = {"inproc": 1, "shm": 2, "inline": 3}
KIND_NAMES = {v: k for k, v in KINDS.items()}
CARRIER_FLAGS = {"inproc": hvlm.INPROC, "shm": hvlm.SHM, "inline": 0}
CARRIER_PARTS = {"inproc": {"handle"}, "shm": {"shm_segment", "shm_slot"}}
TRANSPORT_CHOICES = ("auto", *KINDS)
BOUNDARY_LABEL = "hybrid_vla_ros/boundary/v1"


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
    """The frame stamp of a boundary message, or None when it is not one (to report a lost frame by its stamp)."""
    head = hvlm.peek(data)
    if head is None or head.kind != codec.KIND:
        return None
    return head.entries[0].stamp_ns


def carrier_of(message: hvlm.Message) -> str:
    return "inproc" if message.flags & hvlm.INPROC else "shm" if message.flags & hvlm.SHM else "inline"


def pack_envelope(kind: str, stamp_ns: int, parts: dict, arrival_ns: int = 0, model_id: int = 0,
                  chunk: tuple[int, int] = (0, 1), seq: int = 0, partition: int = 0, start: int | None = None) -> bytes:
    """A boundary message whose carrier `kind` holds the state (parts: the carrier's, e.g. {"handle": 3});
    chunk: (index, count) of the state it names (engine/chunking.py), from token `start` (None: 0 for the first
    chunk, else its index); (0, 1) for a whole frame."""
    index, count = chunk
    start = (index if index > 0 else 0) if start is None else start
    codec.check_chunk(index, count, start, f"boundary message of the frame stamped {stamp_ns}")
    entry = hvlm.Entry(seq, stamp_ns, arrival_ns, index, codec.ROWS, index, count, start=start, parts=parts)
    return hvlm.encode(hvlm.Message(codec.KIND, hvlm.FORWARD, [entry], flags=CARRIER_FLAGS[kind],
                                    partition=partition, model_id=model_id, domain=HOST_ID))


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
            parts = {"handle": PROCESS_REGISTRY.send(state, owner=self)}
        elif kind == "shm":
            expect(self.shm is not None, InputError, f"boundary transport '{self.transport}' has no shared-memory ring")
            segment, packed = self.shm.send(state)
            parts = {"shm_segment": segment, "shm_slot": packed}
        else:
            return self._inline(state)
        return hvlm.encode(hvlm.Message(codec.KIND, hvlm.FORWARD, [codec.entry_of(state, parts)],
                                        flags=CARRIER_FLAGS[kind], partition=state.partition,
                                        model_id=self.model_id, domain=HOST_ID))

    def _inline(self, state: BoundaryState) -> array.array:
        """The state written once into one buffer of the type a uint8[] message field keeps (array 'B'): rclpy
        takes it without a conversion, and nothing is copied on the way."""
        message = codec.state_message(state, HOST_ID, self.model_id)
        buffer = array.array("B", bytes(hvlm.encoded_size(message)))
        hvlm.encode_into(message, memoryview(buffer))
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
        head = hvlm.peek(view)
        if head is None:   # what is wrong, said by the full read: an old format (old_message), a truncation, ...
            hvlm.decode(view, "boundary message", codec.KIND, hvlm.FORWARD)
        expect(head.kind == codec.KIND and head.direction == hvlm.FORWARD, InputError,
               f"boundary message of model kind {head.kind}, direction {head.direction}: not a waypoint state")
        expect(not self.model_id or head.model_id == self.model_id, InputError,
               f"boundary message from model {head.model_id:016x}, this stage runs model {self.model_id:016x} "
               f"(prefix and suffix must load the same weights)")
        name = carrier_of(head)
        if name == "inline":
            return codec.decode(view, source="inline boundary payload"), name
        message = hvlm.decode(view, "boundary message", codec.KIND, hvlm.FORWARD)
        expect(message.flags == CARRIER_FLAGS[name], InputError,
               f"boundary message ({name}): flags {message.flags:#x}, expected {CARRIER_FLAGS[name]:#x}")
        entry = codec.check_entry(message, "boundary message")
        expect(set(entry.parts) == CARRIER_PARTS[name] and not message.parts, InputError,
               f"boundary message ({name}): parts {sorted(entry.parts)}, expected {sorted(CARRIER_PARTS[name])}")
        if name == "inproc":
            state = self._inproc(entry.parts["handle"], message.pid, message.domain)
        else:
            state = self._shm((entry.parts["shm_segment"], entry.parts["shm_slot"]), message.domain)
        chunk = (entry.chunk_index, entry.chunk_count)
        expect((state.chunk_index, state.chunk_count) == chunk, InputError,
               f"boundary message ({name}): the message says chunk {chunk[0]} of {chunk[1]}, the state it carries "
               f"is chunk {state.chunk_index} of {state.chunk_count} (frame {state.seq}); refused")
        state.arrival_ns = entry.arrival_ns
        return state, name

    def _inproc(self, handle: int, pid: int, host: int) -> BoundaryState:
        expect(pid == os.getpid() and host == HOST_ID, InputError,
               f"boundary message: in-process handle from process {pid}, this is process {os.getpid()} "
               f"(set the prefix's boundary_transport to shm or inline)")
        return PROCESS_REGISTRY.receive(handle)

    def watch(self, data: bytes) -> None:
        """A message just received, before it waits behind earlier frames: a shared-memory descriptor's ring
        is attached and beaten from now on (engine/handover/ring_reader.py). Anything else, or anything
        malformed, is left to decode() to refuse with its reason."""
        head = hvlm.peek(data)
        if head is None or head.kind != codec.KIND or carrier_of(head) != "shm":
            return
        try:
            parts = hvlm.decode(data, "boundary message", codec.KIND, hvlm.FORWARD).entries[0].parts
            self.shm.watch(self._shm_handle((parts["shm_segment"], parts["shm_slot"]), head.domain))
        except (InputError, KeyError):
            pass

    def _shm(self, handle: tuple[str, bytes], host: int) -> BoundaryState:
        return self.shm.receive(self._shm_handle(handle, host))

    @staticmethod
    def _shm_handle(handle: tuple[str, bytes], host: int) -> tuple[str, bytes]:
        expect(host == HOST_ID, InputError, "boundary message: shared-memory descriptor from another host or "
               "/dev/shm (set the prefix's boundary_transport to auto or inline)")
        segment = handle[0]
        expect(segment.isascii() and segment.isprintable() and "/" not in segment, InputError,
               f"boundary message: shared-memory segment name {segment[:80]!r} is not a file name in /dev/shm")
        return handle

    def close(self) -> None:
        with _local_lock:
            _local_receivers.discard(self)
        self.shm.close()
