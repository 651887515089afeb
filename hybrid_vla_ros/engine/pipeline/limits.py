"""Time limits that hold at every size (ROS-free).

Fixed numbers chosen on small models (a frame in ~0.1 s) break at real size, where a CPU suffix frame takes
seconds: an output-age limit of 500 ms drops every frame, a 2 s token timeout fails every packed step. Each
limit here is either set explicitly or derived from what the stage measured:

    auto limit = max(floor, factor x the longest of the recent measured times)

The longest, not the median: a limit that drops or fails a frame must not fire on an ordinary slow frame.
An explicit value is kept as set (it may be a consumer's safety bound, which a node must never widen by
itself); when it lies below the measured time, `Limit.warning` says that every frame will be lost to it and
what to set instead, and the nodes put that in a log and their diagnostics.
"""

from __future__ import annotations

import threading
from collections import deque
from dataclasses import dataclass

AUTO = -1.0          # a parameter value: derive the limit from the measured times
RECENT = 16          # measured times a limit looks back on

OUTPUT_AGE = (5.0, 0.5)        # (factor, floor_s): 5 measured frame periods, never below 500 ms
TOKEN_TIMEOUT = (5.0, 2.0)     # 5 measured token round trips, never below 2 s
TOKEN_FIRST_S = 60.0           # auto token timeout before any round trip was measured (a first prefill)
WAIT = (0.5, 0.1)              # waits for a matching state: half a measured period, never below 0.1 s


class Recent:
    """The last RECENT measured durations (seconds) of one kind; thread-safe."""

    def __init__(self, size: int = RECENT):
        self._values: deque = deque(maxlen=size)
        self._lock = threading.Lock()

    def add(self, seconds: float) -> None:
        if seconds > 0:
            with self._lock:
                self._values.append(float(seconds))

    def longest(self) -> float:
        with self._lock:
            return max(self._values, default=0.0)

    def __len__(self) -> int:
        with self._lock:
            return len(self._values)


def derive(factor: float, floor_s: float, measured_s: float) -> float:
    """max(floor, factor x measured)."""
    return max(floor_s, factor * max(0.0, measured_s))


@dataclass(frozen=True)
class Limit:
    """An effective limit: `seconds` (None: never), how it was chosen, and a warning when an explicit value
    lies below the measured time (every frame would be lost to it)."""
    seconds: float | None
    source: str
    warning: str = ""


def resolve(name: str, setting: float, unit: str, measured_s: float, factor: float, floor_s: float,
            loss: str, never_at_zero: bool = False, unmeasured_s: float | None = None) -> Limit:
    """A limit from its parameter value `setting` (in `unit`: "ms" or "s"; AUTO = derived; 0 = never where
    `never_at_zero`) and the measured time it guards. unmeasured_s: the auto value while nothing is
    measured yet (default: the floor)."""
    scale = 1e3 if unit == "ms" else 1.0
    if setting == AUTO:
        if measured_s <= 0 and unmeasured_s is not None:
            return Limit(unmeasured_s, f"auto: {unmeasured_s:g} s until a time is measured")
        seconds = derive(factor, floor_s, measured_s)
        return Limit(seconds, f"auto: max({floor_s:g} s, {factor:g} x {measured_s:.3f} s measured)")
    if setting == 0 and never_at_zero:
        return Limit(None, "0: never")
    seconds = setting / scale
    warning = ""
    if measured_s > seconds:
        warning = (f"{name} {setting:g} {unit} is below the measured {measured_s * scale:.0f} {unit} this limit "
                   f"guards: every frame will be lost as {loss}; set it above {measured_s * scale:.0f} {unit} "
                   f"or {AUTO:g} (auto: {factor:g} x the measured time, at least {floor_s * scale:g} {unit})")
    return Limit(seconds, "set", warning)


def wait_s(measured_period_s: float) -> float:
    """How long a frame may wait for a matching state (kinematic state, pose): half the stage's measured
    period, at least WAIT's floor. Shorter than a period, so the waiting side keeps up even when the state
    never comes; at real size a late state (a localisation slowed by the same CPU) is still waited for."""
    factor, floor_s = WAIT
    return derive(factor, floor_s, measured_period_s)
