"""Boundary transports: how a BoundaryState gets from the prefix to the suffix.

- InProcessTransport: same process; the handle is a small integer and the suffix gets the very tensor.
- SharedMemoryTransport: same host, other process; the ring of engine/handover/shm_ring.py.
- InlineTransport: anywhere (remote peers, recording): the codec's bytes, carried inline on the topic.

engine/handover/endpoints.py chooses one and wraps it in the envelope the boundary topic carries. Every receive checks
what it is given.
"""

from __future__ import annotations

import itertools
import os
import secrets
import threading

from ...errors import InputError, expect
from ...types import BoundaryState
from . import codec
from ..chunking import MAX_CHUNKS
from .pinning import register_for_device_copies, unregister
from .ring_reader import RingReaders
from .shm_ring import SHM_DIR, SharedMemoryRing, SlotDescriptor, ring_bytes  # noqa: F401 (SHM_DIR: re-exported)
from .shm_segment import check_room


class InProcessTransport:
    """Zero-copy handover inside one process: a registry of live states keyed by a small handle."""

    name = "inproc"

    def __init__(self, max_pending: int | None = None, on_evict=None):
        """max_pending bounds the states waiting to be taken (a handle whose message never arrives must not
        hold its tensor forever): beyond it the oldest is evicted, counted in `evicted` and given to
        on_evict(item)."""
        self._states: dict[int, BoundaryState] = {}
        self._owners: dict[int, object] = {}
        self.on_evict = on_evict
        self._ids = itertools.count(1)
        self._lock = threading.Lock()
        self.owner_pid = os.getpid()
        self.max_pending = max_pending
        self.evicted = 0

    def send(self, state: BoundaryState, owner: object = None) -> int:
        with self._lock:
            handle = next(self._ids)
            self._states[handle] = state
            self._owners[handle] = owner
            evicted = []
            while self.max_pending is not None and len(self._states) > self.max_pending:
                oldest = next(iter(self._states))
                evicted.append(self._states.pop(oldest))
                self._owners.pop(oldest, None)
                self.evicted += 1
        for item in evicted:
            if self.on_evict is not None:
                self.on_evict(item)
        return handle

    def reserve(self, states: int) -> None:
        """Let at least `states` wait at once (a chunked sender: max_in_flight x chunks); never lowers the bound."""
        with self._lock:
            if self.max_pending is not None:
                self.max_pending = max(self.max_pending, states)

    def receive(self, handle: int) -> BoundaryState:
        with self._lock:
            state = self._states.pop(handle, None)
            self._owners.pop(handle, None)
        expect(state is not None, InputError, f"in-process handle {handle}: unknown or already taken")
        return state

    def pending(self, owner: object = None) -> int:
        """States waiting to be taken (only `owner`'s when given)."""
        with self._lock:
            return len(self._states) if owner is None else sum(o is owner for o in self._owners.values())

    def discard(self, owner: object) -> int:
        """Forget `owner`'s states (its sender closed: nobody will take them). -> how many."""
        with self._lock:
            handles = [h for h, o in self._owners.items() if o is owner]
            for handle in handles:
                self._states.pop(handle, None)
                self._owners.pop(handle, None)
        return len(handles)

    def close(self) -> None:
        with self._lock:
            self._states.clear()
            self._owners.clear()


class InlineTransport:
    name = "inline"

    def send(self, state: BoundaryState) -> bytes:
        return codec.encode(state)

    def receive(self, payload: bytes) -> BoundaryState:
        return codec.decode(payload, source="inline boundary payload")

    def close(self) -> None:
        pass


MAX_RING_SLOTS = 64 * MAX_CHUNKS   # max_in_flight's limit (64 frames) x the chunks of each (chunked prefill)
CHUNK_HEADROOM = 1.25             # a chunked state's slots hold this many times its bytes (see slot_capacity)


def slot_capacity(state: BoundaryState, size: int) -> int:
    """Slot bytes of a new ring for `state` (`size` bytes encoded), the first or one that outgrew the ring.
    A whole frame: exactly its size (a frame's states keep their size until the cut or the prompt changes).
    A chunk (chunked prefill): a frame's chunks differ in size (a near-equal split's last chunk can be a few
    tokens longer or hold all the query tokens, a chunk with image tokens carries DeepStack additions,
    per-camera chunks differ), so the slots get CHUNK_HEADROOM times the largest chunk seen: a slightly
    larger chunk fits, and each new ring is at least CHUNK_HEADROOM times the last (a few rings, not one
    for every larger chunk)."""
    return int(size * CHUNK_HEADROOM) + 1 if state.chunked else size


class SharedMemoryTransport:
    """Same host: the prefix side owns the ring (created at the first state, sized by slot_capacity); the
    handle is the 40-byte descriptor; the suffix side attaches by segment name, only to this user's rings
    of its `scope` (the ROS graph), and beats each ring it attached (ring_reader.py). slots: states in flight,
    max_in_flight x chunks per frame (1..MAX_RING_SLOTS); timeout_s: how long a write waits for a free slot
    (None: as long as the reader lives) before a TimeoutError."""

    name = "shm"

    def __init__(self, slots: int = 2, name: str | None = None, scope: str = "local",
                 timeout_s: float | None = None):
        expect(isinstance(slots, int) and not isinstance(slots, bool) and 1 <= slots <= MAX_RING_SLOTS, InputError,
               f"shared-memory ring of {slots!r} slots: expected 1..{MAX_RING_SLOTS} (frames in flight x chunks "
               f"per frame)")
        self.slots, self.scope, self.timeout_s = slots, scope, timeout_s
        self.name_hint = name or f"ring{secrets.token_hex(4)}"
        self.ring: SharedMemoryRing | None = None
        self._retired: list[SharedMemoryRing] = []     # outgrown rings (see _grow), closed with this transport
        self.readers = RingReaders(scope)              # the rings this side reads, each beaten
        self.pinned: str | None = None                 # the ring's pages registered with CUDA (pinning.py)
        self._registered: list[SharedMemoryRing] = []  # ... unregistered before they are unmapped

    @property
    def reclaimed(self) -> int:
        """Slots the writer took back from a reader that never read them (frames lost with a dead reader)."""
        return self.ring.reclaimed if self.ring is not None else 0

    def check_room(self, state_bytes: int, chunked: bool = False) -> None:
        """ConfigError (the sizes, the remedy) unless /dev/shm can hold the ring this side will make for states of
        about `state_bytes` (a node's configure; the ring itself reserves its space when the first state comes)."""
        capacity = int(state_bytes * CHUNK_HEADROOM) + 1 if chunked else state_bytes
        check_room(f"the boundary ring ({self.slots} slots of {capacity} B)", ring_bytes(self.slots, capacity),
                   SHM_DIR)

    def send(self, state: BoundaryState) -> tuple[str, bytes]:
        size = codec.encoded_size(state)
        if self.ring is None or size > self.ring.slot_capacity:
            self._grow(slot_capacity(state, size))
        if state.hidden.is_cuda and self.pinned is None:   # a GPU prefix: DMA straight into the slots
            self.pinned = register_for_device_copies(self.ring._mm)
            if self.pinned == "pinned":
                self._registered.append(self.ring)
        desc = self.ring.write(state, timeout_s=self.timeout_s)
        return desc.segment, desc.pack()

    def _grow(self, size: int) -> None:
        """A ring whose slots hold `size` bytes. A state larger than the ring's slots (a Qwen3-VL cut moved
        below the DeepStack depth: its additions travel too; a longer chunk than any before) gets a new ring
        under a new name; the reader re-attaches on the new name. The old ring stays mapped until close():
        slots already handed over are still read from it."""
        if self.ring is not None:
            self._retired.append(self.ring)
            self.pinned = None
        name = self.name_hint if self.ring is None else f"{self.name_hint}g{len(self._retired)}"
        self.ring = SharedMemoryRing.create(name, self.slots, size, scope=self.scope)

    def receive(self, handle: tuple[str, bytes]) -> BoundaryState:
        segment, packed = handle
        desc = SlotDescriptor.unpack(segment, packed)  # checked before any segment is opened
        # first state, a restarted writer, or one that made a new ring under the same name (cleanup + configure,
        # a container reusing the PID): the ring id tells them apart; the old mapping was unlinked
        return self.readers.read(desc, own=self._own(segment))

    def watch(self, handle: tuple[str, bytes]) -> None:
        """A descriptor arrived (not yet read): attach its ring now, so that it is beaten while this side is
        still busy with earlier frames. Raises InputError like receive()."""
        segment, packed = handle
        self.readers.watch(segment, SlotDescriptor.unpack(segment, packed).ring_id, own=self._own(segment))

    def _own(self, segment: str) -> SharedMemoryRing | None:
        return self.ring if self.ring is not None and self.ring.segment == segment else None

    def close(self) -> None:
        self.readers.close()
        for ring in self._registered:
            unregister(ring._mm)
        self._registered.clear()
        for ring in (self.ring, *self._retired):
            if ring is not None:
                ring.close()


TRANSPORTS = {"inproc": InProcessTransport, "shm": SharedMemoryTransport, "inline": InlineTransport}


def make_transport(name: str, slots: int = 2):
    expect(name in TRANSPORTS, InputError, f"transport '{name}' is not one of {sorted(TRANSPORTS)}")
    return SharedMemoryTransport(slots) if name == "shm" else TRANSPORTS[name]()
