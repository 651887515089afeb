"""The reader side of the shared-memory handover (ROS-free): the writers' rings this process reads, attached
by name, each beaten every READER_BEAT_S from a thread of its own while this process lives (shm_ring.py: a
writer takes a READY slot back only from a reader that stopped beating or read past it).

A ring is attached as soon as a descriptor naming it arrives (`watch`, on the receiving thread: the suffix's
executor), not only when the compute thread gets to that descriptor: a suffix busy with one frame for seconds
when a new ring appears (a restarted prefix, a ring grown for a deeper Qwen3-VL cut) left that ring's READY
slots unbeaten, and its writer took them back after RECLAIM_AFTER_S as a dead reader's: a frame lost under
`lossless`, counted twice (ring_slot_reclaimed at the prefix, invalid_boundary at the suffix).
"""

from __future__ import annotations

import threading

from ...types import BoundaryState
from .shm_ring import READER_BEAT_S, SharedMemoryRing, SlotDescriptor

MAX_READERS = 8   # rings kept attached at most (each restart of a writer brings a new one)


class RingReaders:
    def __init__(self, scope: str = "local"):
        self.scope = scope
        self._rings: dict[str, SharedMemoryRing] = {}   # segment name -> its current mapping, oldest first
        self._retired: list[SharedMemoryRing] = []      # mappings replaced by a new ring under the same name
        self._lock = threading.Lock()
        self._beating: threading.Event | None = None    # set: the heartbeat thread stops
        self.last: SharedMemoryRing | None = None       # the ring read last

    def watch(self, segment: str, ring_id: int, own: SharedMemoryRing | None = None) -> SharedMemoryRing:
        """The ring `segment` with this ring id, attached (or `own`, the caller's own writer ring) and beaten
        from now on. A new ring under a known name (a writer that made its ring again) replaces the old
        mapping. Raises InputError when the segment cannot be attached (shm_ring.py says why)."""
        with self._lock:
            ring = self._rings.get(segment)
        if ring is not None and ring.ring_id == ring_id:
            return ring
        ring = own if own is not None else SharedMemoryRing.attach(segment, scope=self.scope)
        ring.beat()
        with self._lock:
            old = self._rings.pop(segment, None)
            if old is not None and old is not ring:
                self._retired.append(old)
            self._rings[segment] = ring
        self._start_beating()
        return ring

    def read(self, desc: SlotDescriptor, own: SharedMemoryRing | None = None) -> BoundaryState:
        """Copy the state a descriptor names out of its ring (attached first if need be). The reading thread
        (one: the suffix's compute thread) also closes the mappings nobody needs any more."""
        ring = self.watch(desc.segment, desc.ring_id, own)
        self.last = ring
        try:
            return ring.read(desc)
        finally:
            self._prune(keep=ring)

    def _prune(self, keep: SharedMemoryRing) -> None:
        """Close replaced mappings, those whose segment is gone (its writer closed or died and was reclaimed)
        and, beyond MAX_READERS, the oldest. A writer's own ring (same process) is the writer's to close."""
        with self._lock:
            drop, self._retired = self._retired, []
            for segment, ring in list(self._rings.items()):
                if ring is not keep and not ring.path.exists():
                    drop.append(self._rings.pop(segment))
            for segment in list(self._rings)[:max(0, len(self._rings) - MAX_READERS)]:
                if self._rings[segment] is not keep:
                    drop.append(self._rings.pop(segment))
        for ring in drop:
            if not ring.owner:
                ring.close()

    def _start_beating(self) -> None:
        """The readers' heartbeat, from a thread of its own: a suffix computing for seconds still beats (torch
        releases the GIL in its kernels; Python code yields it every switch interval), so the writers leave
        its slots alone; a dead reader stops beating."""
        with self._lock:
            if self._beating is not None:
                return
            self._beating = stop = threading.Event()

        def beat_loop() -> None:
            while not stop.wait(READER_BEAT_S):
                with self._lock:
                    rings = list(self._rings.values())
                for ring in rings:
                    try:
                        ring.beat()
                    except (ValueError, OSError):   # its mapping closed meanwhile (pruned, or close)
                        pass
        threading.Thread(target=beat_loop, name="shm-reader-heartbeat", daemon=True).start()

    def close(self) -> None:
        with self._lock:
            if self._beating is not None:
                self._beating.set()
            rings, self._rings = [*self._rings.values(), *self._retired], {}
            self._retired = []
        for ring in rings:
            if not ring.owner:
                ring.close()
