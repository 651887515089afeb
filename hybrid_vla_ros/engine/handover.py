"""The boundary handover, in one place (ROS-free): which transport carries a state, the envelope that the
boundary topic carries, the prefix-side encoder and the suffix-side decoder. Built on transport.py's classes.

Envelope (docs/INTERFACES.md): header "<4sBBHIQq" = magic b"HVLE", version, kind, reserved, sender pid,
host id, stamp_ns; then the body:
    kind 1 inproc: "<Q" handle into the sender's in-process registry (zero copy)
    kind 2 shm:    "<H" segment name length, segment name, 40-byte slot descriptor
    kind 3 inline: the codec's serialised boundary state
"""

from __future__ import annotations

import os
import socket
import struct
import threading
import zlib

from ..errors import InputError, expect
from ..types import BoundaryState
from . import codec
from .transport import SHM_DIR, InProcessTransport, SharedMemoryTransport

ENVELOPE = struct.Struct("<4sBBHIQq")
ENVELOPE_MAGIC = b"HVLE"
ENVELOPE_VERSION = 1
KINDS = {"inproc": 1, "shm": 2, "inline": 3}
KIND_NAMES = {v: k for k, v in KINDS.items()}
TRANSPORT_CHOICES = ("auto", *KINDS)
BOUNDARY_LABEL = "hybrid_vla_ros/boundary/v1"
HANDLE = struct.Struct("<Q")
NAME_LENGTH = struct.Struct("<H")


def host_id() -> int:
    """Stable id of this host (boot id when readable): shared memory is only valid on the same host."""
    try:
        with open("/proc/sys/kernel/random/boot_id", "rb") as f:
            seed = f.read().strip()
    except OSError:
        seed = socket.gethostname().encode()
    return zlib.crc32(seed) | (zlib.crc32(seed[::-1]) << 32)


HOST_ID = host_id()
def _release_evicted(state: BoundaryState) -> None:
    if state.flight is not None:
        state.flight.release()


PROCESS_REGISTRY = InProcessTransport(max_pending=64, on_evict=_release_evicted)  # handles inside this process
_local_receivers: set[int] = set()                      # suffix decoders living in this process
_local_lock = threading.Lock()


def choose_transport(same_process: bool, same_host: bool) -> str:
    """In-process when the peer shares the process, shared memory on one host, inline bytes otherwise."""
    if same_process:
        return "inproc"
    return "shm" if same_host and SHM_DIR.is_dir() else "inline"


def pack_envelope(kind: str, stamp_ns: int, body: bytes) -> bytes:
    return ENVELOPE.pack(ENVELOPE_MAGIC, ENVELOPE_VERSION, KINDS[kind], 0, os.getpid(), HOST_ID, stamp_ns) + body


class HandoverEncoder:
    """Prefix side. `transport` is a parameter value: auto (in-process when a decoder lives in this process,
    else shared memory), inproc, shm or inline. The shared-memory ring is created at the first state."""

    def __init__(self, transport: str, ring_slots: int, ring_name: str, flight=None):
        """flight: the sender's FlightControl, when an in-process receiver frees the slot (the graph's prefix
        node); the state then carries it to the receiver. None when the caller manages slots itself."""
        expect(transport in TRANSPORT_CHOICES, InputError,
               f"boundary transport '{transport}' is not one of {list(TRANSPORT_CHOICES)}")
        self.transport, self.flight = transport, flight
        self.shm = SharedMemoryTransport(slots=ring_slots, name=ring_name) if transport in ("auto", "shm") else None

    def kind(self) -> str:
        if self.transport != "auto":
            return self.transport
        with _local_lock:
            return choose_transport(same_process=bool(_local_receivers), same_host=True)

    def encode(self, state: BoundaryState, kind: str | None = None) -> bytes:
        """state -> envelope bytes (kind: from kind() when not given). Raises InputError (too large for the
        ring) or TimeoutError (ring full)."""
        kind = kind or self.kind()
        if kind == "inproc":
            state.flight = self.flight
            body = HANDLE.pack(PROCESS_REGISTRY.send(state, owner=self))
        elif kind == "shm":
            segment, packed = self.shm.send(state)
            name = segment.encode()
            body = NAME_LENGTH.pack(len(name)) + name + packed
        else:
            body = codec.encode(state)
        return pack_envelope(kind, state.stamp_ns, body)

    def pending(self) -> int:
        """This encoder's in-process states not yet taken by the receiver."""
        return PROCESS_REGISTRY.pending(owner=self)

    def close(self) -> None:
        PROCESS_REGISTRY.discard(self)  # states nobody will take any more must not hold their tensors
        if self.shm:
            self.shm.close()


class HandoverDecoder:
    """Suffix side: envelope bytes -> BoundaryState. Every malformed input is an InputError that says what."""

    def __init__(self):
        self.shm = SharedMemoryTransport()
        with _local_lock:
            _local_receivers.add(id(self))

    def decode(self, data: bytes) -> tuple[BoundaryState, str]:
        view = memoryview(data)
        expect(view.nbytes >= ENVELOPE.size, InputError,
               f"boundary message: {view.nbytes} bytes, shorter than the {ENVELOPE.size}-byte envelope")
        magic, version, kind, _, pid, host, _stamp = ENVELOPE.unpack_from(view, 0)
        expect(magic == ENVELOPE_MAGIC, InputError, f"boundary message: magic {magic!r}, expected {ENVELOPE_MAGIC!r}")
        expect(version == ENVELOPE_VERSION, InputError,
               f"boundary message: envelope version {version}, this node reads {ENVELOPE_VERSION}")
        expect(kind in KIND_NAMES, InputError, f"boundary message: unknown kind {kind}")
        body, name = view[ENVELOPE.size:], KIND_NAMES[kind]
        if name == "inproc":
            return self._inproc(body, pid, host), name
        if name == "shm":
            return self._shm(body, host), name
        return codec.decode(body, source="inline boundary payload"), name

    def _inproc(self, body: memoryview, pid: int, host: int) -> BoundaryState:
        expect(pid == os.getpid() and host == HOST_ID, InputError,
               f"boundary message: in-process handle from process {pid}, this is process {os.getpid()} "
               f"(set the prefix's boundary_transport to shm or inline)")
        expect(body.nbytes == HANDLE.size, InputError,
               f"boundary message: in-process body of {body.nbytes} bytes, expected {HANDLE.size}")
        return PROCESS_REGISTRY.receive(HANDLE.unpack(body)[0])

    def _shm(self, body: memoryview, host: int) -> BoundaryState:
        expect(host == HOST_ID, InputError, "boundary message: shared-memory descriptor from another host")
        expect(body.nbytes >= NAME_LENGTH.size, InputError,
               f"boundary message: shared-memory body of {body.nbytes} bytes has no segment name")
        (length,) = NAME_LENGTH.unpack_from(body, 0)
        expect(body.nbytes >= NAME_LENGTH.size + length, InputError,
               f"boundary message: segment name of {length} bytes, body has {body.nbytes - NAME_LENGTH.size}")
        segment = bytes(body[NAME_LENGTH.size:NAME_LENGTH.size + length]).decode("ascii", errors="replace")
        return self.shm.receive((segment, bytes(body[NAME_LENGTH.size + length:])))

    def close(self) -> None:
        with _local_lock:
            _local_receivers.discard(id(self))
        self.shm.close()
