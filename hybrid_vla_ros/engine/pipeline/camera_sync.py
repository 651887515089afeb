"""Multi-camera synchronisation by stamp (ROS-free): one image per camera within a skew makes a frame."""

from __future__ import annotations

import threading
import time
from collections import deque

import numpy as np

from .limits import Recent
from .stamp_order import TIME_JUMP_S

KEEP_FLOOR_S = 10.0     # stamped states are kept at least this far back in stamp time ...
KEEP_FACTOR = 2.0       # ... and twice as far back as recent matches reached
MAX_STATES = 20_000     # a bound whatever the stamps say (100 s of a 200 Hz stream)


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
    """The recent stamped values of a stream (odometry), matched to a frame by stamp: the sample nearest
    the frame's stamp within `skew_ns`, or, where one sample before and one after the stamp are both within
    it, the value between them at the stamp (`between(a, b, w)`, e.g. Pose2D.between). A sample 50 ms off is
    about 1 m at 20 m/s: the first one inside the skew is not good enough. Waits up to `wait_s` for a sample
    within the skew (callbacks of one time step may run in any order).

    Kept: at least the newest `depth`, and every sample within `keep_s()` of the newest stamp: KEEP_FACTOR x
    how far behind the newest sample recent matches reached, at least KEEP_FLOOR_S. A real-size frame is
    matched seconds after its stamp (its trajectory comes out seconds later): a fixed count (200 samples,
    2-4 s of odometry) would have dropped its sample before it was asked for. A sample older than the newest
    by TIME_JUMP_S or more says time went back: the old timeline is forgotten."""

    def __init__(self, depth: int = 200, between=None):
        self.entries: deque = deque(maxlen=MAX_STATES)
        self.depth, self.between = depth, between
        self.reach = Recent()   # seconds (stamp time) between the newest sample and the stamps matched
        self.arrived = threading.Condition()

    def keep_s(self) -> float:
        return max(KEEP_FLOOR_S, KEEP_FACTOR * self.reach.longest())

    def add(self, stamp_ns: int, value) -> None:
        with self.arrived:
            if self.entries and self.entries[-1][0] - stamp_ns >= TIME_JUMP_S * 1e9:
                self.entries.clear()   # time went back (a bag loop, a /clock reset)
            self.entries.append((stamp_ns, value))
            oldest_kept = stamp_ns - self.keep_s() * 1e9
            while len(self.entries) > self.depth and self.entries[0][0] < oldest_kept:
                self.entries.popleft()
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
        self.reach.add((entries[-1][0] - stamp_ns) / 1e9)
        before = max((e for e in entries if e[0] <= stamp_ns), key=lambda e: e[0], default=None)
        after = min((e for e in entries if e[0] >= stamp_ns), key=lambda e: e[0], default=None)
        near = [e for e in (before, after) if e is not None and within(e)]
        if len(near) == 2 and self.between is not None and after[0] > before[0]:
            return self.between(before[1], after[1], (stamp_ns - before[0]) / (after[0] - before[0])), True
        nearest = min(near or entries, key=lambda e: abs(e[0] - stamp_ns))
        return nearest[1], bool(near)


class WaitForState:
    """Frames wait here, in order, until the stamped state they need (their kinematic state) is in `history`
    within `skew_ns`, or `wait_s` has passed (a number, or a callable giving it when the frame comes: a
    wait derived from the stage's measured period, engine/pipeline/limits.py wait_s); then they go on to
    `forward(frame)`. Called from the thread that feeds frames and states (the executor): no compute thread
    waits, so no other frame is delayed."""

    def __init__(self, history: StampedHistory, skew_ns: int, wait_s, forward):
        self.history, self.skew_ns, self.wait_s, self.forward = history, skew_ns, wait_s, forward
        self.waiting: deque = deque()   # (frame, deadline)

    def add(self, frame) -> None:
        wait = self.wait_s() if callable(self.wait_s) else self.wait_s
        self.waiting.append((frame, time.monotonic() + wait))
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
