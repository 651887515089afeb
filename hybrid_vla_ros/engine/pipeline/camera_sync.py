"""Multi-camera synchronisation by stamp (ROS-free): one image per camera within a skew makes a frame."""

from __future__ import annotations

import itertools
import threading
import time
from collections import Counter, deque
from typing import NamedTuple

import numpy as np

from .limits import RECENT, Recent
from .stamp_order import TIME_JUMP_S

KEEP_FLOOR_S = 10.0     # stamped states are kept at least this far back in stamp time ...
KEEP_FACTOR = 2.0       # ... and twice as far back as recent matches reached
MAX_STATES = 20_000     # a bound whatever the stamps say (100 s of a 200 Hz stream)
# A matched state is fresh within 5 of its stream's measured periods of the frame's stamp, clamped to
# [0.1 s, 1 s]: 0.1 s covers a 50-100 Hz stream's jitter; 1 s (also the bound before a period is measured)
# is about 3 m/s of speed at a hard brake, and the age at which Autoware's validator flags a trajectory.
STATE_AGE = (5.0, 0.1, 1.0)   # (periods, floor_s, ceiling_s)


class CameraSync:
    """Buffers the last few images per camera. When an image arrives and every camera holds an image within
    `skew_ns` of its stamp, those images form a frame (stamp = newest of them); everything older is discarded
    and counted in `discarded` (images). One frame, one loss: on_discard(stamp_ns) hears each incomplete set
    once (the first of its images discarded; the others, within `skew_ns` of it, are the same frame).
    Arrival order across cameras does not matter."""

    def __init__(self, num_cameras: int, skew_ns: int, depth: int = 4, on_discard=None):
        self.num_cameras, self.skew_ns = num_cameras, skew_ns
        self.on_discard = on_discard or (lambda stamp_ns: None)
        self.buffers: list[deque] = [deque(maxlen=depth) for _ in range(num_cameras)]
        self.discarded = 0
        self.lost_stamps: deque = deque(maxlen=depth * num_cameras)   # frames already heard as lost
        self.lock = threading.Lock()

    def _discard(self, stamp_ns: int) -> None:
        self.discarded += 1
        if not any(abs(stamp_ns - lost) <= self.skew_ns for lost in self.lost_stamps):
            self.lost_stamps.append(stamp_ns)
            self.on_discard(stamp_ns)

    def add(self, camera: int, stamp_ns: int, image: np.ndarray):
        with self.lock:
            buffer = self.buffers[camera]
            if len(buffer) == buffer.maxlen:
                self._discard(buffer[0][0])  # the oldest falls out unmatched
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
                    self._discard(entry[0])
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
    by TIME_JUMP_S or more says time went back: the old timeline is forgotten (`timeline` counts the
    forgettings, so that a reader can tell whether the stream itself went back)."""

    def __init__(self, depth: int = 200, between=None):
        self.entries: deque = deque(maxlen=MAX_STATES)
        self.depth, self.between = depth, between
        self.reach = Recent()   # seconds (stamp time) between the newest sample and the stamps matched
        self.arrived = threading.Condition()
        self.timeline = 0       # +1 each time the samples are forgotten (time went back, clear())

    def keep_s(self) -> float:
        return max(KEEP_FLOOR_S, KEEP_FACTOR * self.reach.longest())

    def add(self, stamp_ns: int, value) -> None:
        with self.arrived:
            if self.entries and self.entries[-1][0] - stamp_ns >= TIME_JUMP_S * 1e9:
                self.entries.clear()   # time went back (a bag loop, a /clock reset)
                self.timeline += 1
            self.entries.append((stamp_ns, value))
            oldest_kept = stamp_ns - self.keep_s() * 1e9
            while len(self.entries) > self.depth and self.entries[0][0] < oldest_kept:
                self.entries.popleft()
            self.arrived.notify_all()

    def clear(self) -> None:
        """Forget every sample (time went back: samples of the old timeline would match the new stamps)."""
        with self.arrived:
            self.entries.clear()
            self.timeline += 1

    def period_s(self) -> float:
        """The stream's own period: the median interval between the stamps of its last RECENT + 1 samples
        (0.0: fewer than two)."""
        with self.arrived:
            stamps = [entry[0] for entry in itertools.islice(reversed(self.entries), RECENT + 1)]
        gaps = sorted(newer - older for newer, older in zip(stamps, stamps[1:]) if newer > older)
        return gaps[len(gaps) // 2] / 1e9 if gaps else 0.0

    def gap_ns(self, stamp_ns: int) -> int | None:
        """How far the nearest sample lies from `stamp_ns`, before or after it (None: no sample)."""
        with self.arrived:
            return min((abs(entry[0] - stamp_ns) for entry in self.entries), default=None)

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


class Judgement(NamedTuple):
    verdict: str    # "fresh", "stale" (the nearest sample is too far from the frame) or "missing" (no sample)
    use: bool       # serve the frame with its matched state (fresh, or served flagged)
    why: str        # for the log and the rejection; empty when fresh


class StateFreshness:
    """Whether the state matched to a frame (its kinematic state) may be used. Fresh: the nearest sample lies
    within `bound_s()` of the frame's stamp (STATE_AGE: 5 x the stream's own measured period, within
    [0.1 s, 1 s]; 1 s before two samples came). Stale: further (a stream that stopped: a frame an hour later
    must not get the hour-old speed). Missing: no sample at all (none yet, or none since time went back).
    A frame is counted once by verdict and fate (`served.fresh`, `served_flagged.stale`, `refused.missing`);
    a stale or missing verdict lasts (`failing()`: diagnostics ERROR) until a frame is fresh again, or a sample
    comes that would make the last failing frame fresh (the stream is back)."""

    def __init__(self, history: StampedHistory, name: str):
        self.history, self.name = history, name
        self.counts: Counter = Counter()
        self.failure: tuple | None = None    # (stamp_ns, why) of the last frame judged, while it failed
        self.timeline_seen = history.timeline
        self.lock = threading.Lock()

    def bound_s(self) -> float:
        periods, floor_s, ceiling_s = STATE_AGE
        period_s = self.history.period_s()
        return ceiling_s if period_s <= 0 else min(ceiling_s, max(floor_s, periods * period_s))

    def judge(self, stamp_ns: int, serve_stale: bool = False) -> Judgement:
        """The frame stamped `stamp_ns`: fresh, or stale / missing and then served flagged (`serve_stale`) or
        refused."""
        self.timeline_seen = self.history.timeline
        gap_ns, bound_s = self.history.gap_ns(stamp_ns), self.bound_s()
        if gap_ns is not None and gap_ns <= bound_s * 1e9:
            judged = Judgement("fresh", True, "")
        elif gap_ns is None:
            judged = Judgement("missing", serve_stale, f"frame stamped {stamp_ns} ns: no {self.name} received")
        else:
            judged = Judgement("stale", serve_stale, f"frame stamped {stamp_ns} ns: the nearest {self.name} is "
                               f"{gap_ns / 1e6:.0f} ms away (bound {bound_s * 1e3:.0f} ms: {STATE_AGE[0]:g} x its "
                               f"measured period, within [{STATE_AGE[1]:g}, {STATE_AGE[2]:g}] s)")
        fate = "served" if judged.verdict == "fresh" else "served_flagged" if judged.use else "refused"
        with self.lock:
            self.counts[f"{fate}.{judged.verdict}"] += 1
            self.failure = None if judged.verdict == "fresh" else (stamp_ns, judged.why)
        return judged

    def failing(self) -> bool:
        with self.lock:
            failure = self.failure
        if failure is None:
            return False
        gap_ns = self.history.gap_ns(failure[0])
        return gap_ns is None or gap_ns > self.bound_s() * 1e9

    def time_went_back(self) -> None:
        """A frame's stamp went back (a bag loop, a /clock reset): the old timeline's samples are forgotten,
        unless the stream went back since the last frame judged (add() forgot them: what is held is new)."""
        if self.history.timeline == self.timeline_seen:
            self.history.clear()

    def check(self, policy: str | None) -> tuple[str, int, str, dict]:
        """(check name, level, message, key values) for the diagnostics; policy None: the state is not used."""
        name = self.name.replace(" ", "_")
        if policy is None:
            return name, 0, f"not used: the model is given a {self.name} of zeros", {"policy": "not used"}
        failing = self.failing()
        with self.lock:
            counts, failure = dict(self.counts), self.failure
        values = {"policy": policy, "bound_ms": f"{self.bound_s() * 1e3:.0f}",
                  "period_ms": f"{self.history.period_s() * 1e3:.1f}", **{k: str(v) for k, v in counts.items()}}
        if failing and failure is not None:
            return name, 2, f"{failure[1]} ({policy})", values
        return name, 0, f"within {values['bound_ms']} ms of each frame", values
