"""Frames in flight and the just-in-time start: the one definition the benchmark pipeline and the ROS graph
share (ROS-free).

`max_in_flight` = frames the prefix has taken and the suffix has not finished. The prefix calls `admit()`
before it takes its next frame (so under latest-frame-wins it takes the newest one once a slot is free); the
suffix calls `suffix_finished()` (or the prefix calls `release()` when a frame ends early or leaves the
process). With the suffix the slower stage, `admit()` also delays the prefix so that its frame is ready just
when the suffix frees up: the same period, no frame left waiting at the handover (fresher input).

A slot that nobody releases (a handle whose message was lost) is reclaimed after `slot_timeout_s` and
counted, so the prefix can never stall for good. `slot_timeout_s="auto"` derives it from the measured stage
times (`slot_timeout()`): a slot lives about prefix_s + max_in_flight x suffix_s; a 7B CPU suffix takes
seconds per frame, so a fixed 10 s would reclaim live slots.
"""

from __future__ import annotations

import threading
import time
from collections import deque

from ...errors import ConfigError, expect

POLL_S = 0.05
SLOT_TIMEOUT_FLOOR_S = 10.0   # auto slot timeout: never below this ...
SLOT_TIMEOUT_FACTOR = 5.0     # ... else this many times a slot's measured lifetime


def ema(previous: float, sample: float, weight: float = 0.3) -> float:
    return sample if previous == 0.0 else (1 - weight) * previous + weight * sample


class FlightControl:
    def __init__(self, max_in_flight: int, just_in_time: bool = True, slot_timeout_s: float | str | None = None):
        """slot_timeout_s: seconds, "auto" (derived: slot_timeout()) or None (never reclaimed)."""
        expect(isinstance(max_in_flight, int) and 1 <= max_in_flight <= 64, ConfigError,
               f"max_in_flight={max_in_flight!r}, expected an integer in 1..64")
        expect(slot_timeout_s in (None, "auto") or isinstance(slot_timeout_s, (int, float)) and slot_timeout_s > 0,
               ConfigError, f"slot_timeout_s={slot_timeout_s!r}: expected seconds > 0, 'auto' or None")
        self.max_in_flight, self.just_in_time, self.slot_timeout_s = max_in_flight, just_in_time, slot_timeout_s
        self._cond = threading.Condition()
        self._taken: deque[float] = deque()   # admission times of the slots in use, oldest first
        self.max_seen = 0
        self.reclaimed = 0
        self._owed = 0                        # reclaimed slots whose late release is still to come
        self.prefix_s = 0.0                   # EMA of the prefix's time per frame
        self.prefix_lead_s = 0.0              # EMA of its time to the frame's first handed-over state (0: = prefix_s)
        self.suffix_s = 0.0                   # EMA of the suffix's time per frame (0: not known here)
        self._handed = 0                      # handed to the suffix, not started
        self._suffix_started: float | None = None
        self.last_waits_s = (0.0, 0.0)        # the last admit's wait for a slot and its just-in-time wait (the
                                              # admitting thread's frame reports them: ~/debug/frame_info)

    @property
    def in_flight(self) -> int:
        with self._cond:
            return len(self._taken)

    # ---- the prefix side ---------------------------------------------------------------------------------
    def admit(self, stopped=lambda: False) -> bool:
        """Block until a slot is free (False once `stopped()`), then wait just in time."""
        start = time.monotonic()
        with self._cond:
            while len(self._taken) >= self.max_in_flight:
                if stopped():
                    return False
                self._reclaim_expired()
                self._cond.wait(POLL_S)
            self._taken.append(time.monotonic())
            self.max_seen = max(self.max_seen, len(self._taken))
        slot = time.monotonic()
        self._wait_just_in_time(stopped)
        self.last_waits_s = (slot - start, time.monotonic() - slot)
        return not stopped()

    def release(self) -> None:
        """A frame left the pipeline (finished, failed, dropped, or handed out of this process). The late release
        of a reclaimed slot settles that reclaim instead of freeing the slot of a frame still in flight."""
        with self._cond:
            if self._owed:
                self._owed -= 1
            elif self._taken:
                self._taken.popleft()
            self._cond.notify_all()

    def prefix_finished(self, seconds: float, handed_to_suffix: bool = True) -> None:
        with self._cond:
            self.prefix_s = ema(self.prefix_s, seconds)
            self._handed += handed_to_suffix

    def handed_over(self, lead_s: float, lead_known: bool = True) -> None:
        """A frame's first boundary state reached the suffix's queue, lead_s after the prefix started it (a
        chunked frame: its first chunk; the just-in-time start aims at that one being ready). Call
        prefix_finished(..., handed_to_suffix=False) when the frame's prefix is done."""
        with self._cond:
            if lead_known:
                self.prefix_lead_s = ema(self.prefix_lead_s, lead_s)
            self._handed += 1

    # ---- the suffix side (only where it shares the process) --------------------------------------------
    def suffix_started(self) -> None:
        with self._cond:
            self._handed = max(0, self._handed - 1)
            self._suffix_started = time.perf_counter()

    def suffix_dropped(self) -> None:
        """A handed-over frame the suffix will not run (it was not active): the slot is free now, and the
        suffix's time per frame is left as it was."""
        with self._cond:
            self._handed = max(0, self._handed - 1)
        self.release()

    def suffix_finished(self, seconds: float) -> None:
        with self._cond:
            self.suffix_s = ema(self.suffix_s, seconds)
            self._suffix_started = None
        self.release()

    # ---- internals ---------------------------------------------------------------------------------------
    def slot_timeout(self) -> float | None:
        """The age after which the oldest slot counts as lost. auto: max(SLOT_TIMEOUT_FLOOR_S, SLOT_TIMEOUT_FACTOR
        x (prefix_s + max_in_flight x suffix_s)), suffix_s at least as long as the frame it runs now (a first,
        unmeasured frame of a slow suffix is not taken for a lost one)."""
        if self.slot_timeout_s != "auto":
            return self.slot_timeout_s
        running = time.perf_counter() - self._suffix_started if self._suffix_started is not None else 0.0
        lifetime = self.prefix_s + self.max_in_flight * max(self.suffix_s, running)
        return max(SLOT_TIMEOUT_FLOOR_S, SLOT_TIMEOUT_FACTOR * lifetime)

    def _reclaim_expired(self) -> None:
        """Called with the lock held."""
        timeout = self.slot_timeout()
        if timeout is not None and self._taken and time.monotonic() - self._taken[0] > timeout:
            self._taken.popleft()
            self.reclaimed += 1
            self._owed += 1

    def suffix_free_in(self) -> float:
        """Estimated seconds until the suffix has finished everything handed to it so far."""
        with self._cond:
            busy_left = 0.0
            if self._suffix_started is not None:
                busy_left = max(0.0, self._suffix_started + self.suffix_s - time.perf_counter())
            return busy_left + self._handed * self.suffix_s

    def _wait_just_in_time(self, stopped) -> None:
        """Start the prefix `lead` before the suffix is free. The suffix's finish is estimated again at each poll
        (never later than first estimated): a frame that ends before its estimate (a first frame measured slow
        sets suffix_s high) ends the wait with it, instead of holding the next frame for the stale estimate."""
        if not (self.just_in_time and self.max_in_flight > 1 and self.prefix_s > 0 and self.suffix_s > 0):
            return
        lead = self.prefix_lead_s or self.prefix_s    # chunked: the first chunk need only be ready in time
        deadline = time.monotonic() + self.suffix_free_in() - lead
        while not stopped():
            now = time.monotonic()
            deadline = min(deadline, now + self.suffix_free_in() - lead)
            if now >= deadline - 0.0005:
                return
            with self._cond:   # woken at once by suffix_finished / release (notify_all)
                self._cond.wait(min(POLL_S, deadline - now))
