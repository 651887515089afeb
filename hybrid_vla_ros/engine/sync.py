"""Multi-camera synchronisation by stamp (ROS-free): one image per camera within a skew makes a frame."""

from __future__ import annotations

import threading
from collections import deque

import numpy as np


class CameraSync:
    """Buffers the last few images per camera. When an image arrives and every camera holds an image within
    `skew_ns` of its stamp, those images form a frame (stamp = newest of them); everything older is discarded
    and counted in `discarded`. Arrival order across cameras does not matter."""

    def __init__(self, num_cameras: int, skew_ns: int, depth: int = 4):
        self.num_cameras, self.skew_ns = num_cameras, skew_ns
        self.buffers: list[deque] = [deque(maxlen=depth) for _ in range(num_cameras)]
        self.discarded = 0
        self.lock = threading.Lock()

    def add(self, camera: int, stamp_ns: int, image: np.ndarray):
        with self.lock:
            buffer = self.buffers[camera]
            if len(buffer) == buffer.maxlen:
                self.discarded += 1  # the oldest falls out unmatched
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
            return [image for _, image in chosen], max(stamp for stamp, _ in chosen)
