"""Multi-camera synchronisation by stamp (ROS-free): one image per camera within a skew makes a frame."""

from __future__ import annotations

import threading
from collections import deque

import numpy as np


class CameraSync:
    """Buffers the last few images per camera. When an image arrives and every camera holds an image within
    `skew_ns` of its stamp, those images form a frame (stamp = newest of them); everything older is discarded
    and counted in `discarded` (on_discard(stamp_ns) hears each). Arrival order across cameras does not matter."""

    def __init__(self, num_cameras: int, skew_ns: int, depth: int = 4, on_discard=None):
        self.num_cameras, self.skew_ns = num_cameras, skew_ns
        self.on_discard = on_discard or (lambda stamp_ns: None)
        self.buffers: list[deque] = [deque(maxlen=depth) for _ in range(num_cameras)]
        self.discarded = 0
        self.lock = threading.Lock()

    def add(self, camera: int, stamp_ns: int, image: np.ndarray):
        with self.lock:
            buffer = self.buffers[camera]
            if len(buffer) == buffer.maxlen:
                self.discarded += 1  # the oldest falls out unmatched
                self.on_discard(buffer[0][0])
            buffer.append((stamp_ns, image))
            chosen = []
            for other in self.buffers:
                near = [entry for entry in other if abs(entry[0] - stamp_ns) <= self.skew_ns]
                if not near:
                    return None
                chosen.append(min(near, key=lambda entry: abs(entry[0] - stamp_ns)))
            for other, pick in zip(self.buffers, chosen):  # consume the set and everything older
                while other:
                    entry = other.popleft()
                    if entry is pick:
                        break
                    self.discarded += 1
                    self.on_discard(entry[0])
            return [image for _, image in chosen], max(stamp for stamp, _ in chosen)


class StampedHistory:
    """The last `depth` stamped values of a stream (odometry), matched to a frame by stamp: the newest value
    stamped at most `skew_ns` after the frame, accepted when it is at least `skew_ns` recent; waits up to
    `wait_s` for it (callbacks of one time step may run in any order)."""

    def __init__(self, depth: int = 200):
        self.entries: deque = deque(maxlen=depth)
        self.arrived = threading.Condition()

    def add(self, stamp_ns: int, value) -> None:
        with self.arrived:
            self.entries.append((stamp_ns, value))
            self.arrived.notify_all()

    def _newest_until(self, stamp_ns: int):
        matches = [entry for entry in self.entries if entry[0] <= stamp_ns]
        return max(matches, key=lambda entry: entry[0]) if matches else None

    def match(self, stamp_ns: int, skew_ns: int, wait_s: float = 0.0):
        """-> (value or None, matched): `matched` is False when the value is older than the skew (or absent);
        the newest older value is still returned then."""
        def ready():
            best = self._newest_until(stamp_ns + skew_ns)
            return best is not None and best[0] >= stamp_ns - skew_ns

        with self.arrived:
            self.arrived.wait_for(ready, wait_s)
            best = self._newest_until(stamp_ns + skew_ns)
        if best is None:
            return None, False
        return best[1], best[0] >= stamp_ns - skew_ns
