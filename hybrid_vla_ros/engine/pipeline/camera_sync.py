"""Multi-camera synchronisation by stamp (ROS-free): one image per camera within a skew makes a frame."""

from __future__ import annotations

import threading
import time
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
    """The last `depth` stamped values of a stream (odometry), matched to a frame by stamp: the sample nearest
    the frame's stamp within `skew_ns`, or, where one sample before and one after the stamp are both within
    it, the value between them at the stamp (`between(a, b, w)`, e.g. Pose2D.between). A sample 50 ms off is
    about 1 m at 20 m/s: the first one inside the skew is not good enough. Waits up to `wait_s` for a sample
    within the skew (callbacks of one time step may run in any order)."""

    def __init__(self, depth: int = 200, between=None):
        self.entries: deque = deque(maxlen=depth)
        self.between = between
        self.arrived = threading.Condition()

    def add(self, stamp_ns: int, value) -> None:
        with self.arrived:
            self.entries.append((stamp_ns, value))
            self.arrived.notify_all()

    def clear(self) -> None:
        """Forget every sample (time went back: samples of the old timeline would match the new stamps)."""
        with self.arrived:
            self.entries.clear()

    def match(self, stamp_ns: int, skew_ns: int, wait_s: float = 0.0):
        """-> (value or None, matched): `matched` is False when no sample lies within the skew; the nearest
        sample is still returned then (None when there is none)."""
        def within(entry) -> bool:
            return abs(entry[0] - stamp_ns) <= skew_ns

        with self.arrived:
            self.arrived.wait_for(lambda: any(within(e) for e in self.entries), wait_s)
            entries = list(self.entries)
        if not entries:
            return None, False
        before = max((e for e in entries if e[0] <= stamp_ns), key=lambda e: e[0], default=None)
        after = min((e for e in entries if e[0] >= stamp_ns), key=lambda e: e[0], default=None)
        near = [e for e in (before, after) if e is not None and within(e)]
        if len(near) == 2 and self.between is not None and after[0] > before[0]:
            return self.between(before[1], after[1], (stamp_ns - before[0]) / (after[0] - before[0])), True
        nearest = min(near or entries, key=lambda e: abs(e[0] - stamp_ns))
        return nearest[1], bool(near)


class WaitForState:
    """Frames wait here, in order, until the stamped state they need (their kinematic state) is in `history`
    within `skew_ns`, or `wait_s` has passed; then they go on to `forward(frame)`. Called from the thread
    that feeds frames and states (the executor): no compute thread waits, so no other frame is delayed."""

    def __init__(self, history: StampedHistory, skew_ns: int, wait_s: float, forward):
        self.history, self.skew_ns, self.wait_s, self.forward = history, skew_ns, wait_s, forward
        self.waiting: deque = deque()   # (frame, deadline)

    def add(self, frame) -> None:
        self.waiting.append((frame, time.monotonic() + self.wait_s))
        self.poll()

    def poll(self) -> None:
        """Forward every frame at the head whose state is in, or whose wait is over."""
        while self.waiting:
            frame, deadline = self.waiting[0]
            if not self.history.match(frame.stamp_ns, self.skew_ns)[1] and time.monotonic() < deadline:
                return
            self.waiting.popleft()
            self.forward(frame)

    def clear(self) -> list:
        """-> the frames still waiting (the caller accounts for them)."""
        frames = [frame for frame, _ in self.waiting]
        self.waiting.clear()
        return frames
