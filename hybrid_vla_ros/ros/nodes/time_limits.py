"""The stage nodes' time limits, derived from what they measured (engine/pipeline/limits.py), and their
`time_limits` diagnostic: the effective values, how each was chosen, and a WARN with a reason (also logged)
when an explicit value lies below the measured time it guards, so that every frame would be lost to it.

suffix: max_output_age_ms (-1 = auto) and the wait for a frame's pose (map-frame output).
prefix: the wait for a frame's kinematic state, the in-flight slot timeout (engine/pipeline/flight.py) and,
for action-token models, token_timeout_s (-1 = auto, engine/actionflow/prefix_server.py).
"""

from __future__ import annotations

import time

from ...engine.pipeline.limits import AUTO, OUTPUT_AGE, Limit, Recent, resolve, wait_s
from ...errors import ConfigError

WARN_EVERY_S = 10.0


def _period_s(health) -> float:
    """A stage's measured frame period: the median interval between its frames or its median stage time,
    whichever is longer."""
    return max(health.period_ms(), health.stage_ms()) / 1e3


def _ms(seconds: float | None) -> str:
    return "never" if seconds is None else f"{seconds * 1e3:.0f}"


def _check(node, values: dict, warnings: list[str]) -> tuple:
    for warning in warnings:
        node.get_logger().warning(warning, throttle_duration_sec=WARN_EVERY_S)
    message = "; ".join(warnings) or "derived from measured times where set to auto"
    return ("time_limits", 1 if warnings else 0, message, values)


class SuffixTimeLimits:
    """max_output_age_ms: a trajectory older than the limit at publish time is dropped (stale_output).
    auto: max(500 ms, 5 x T), T the measured frame time: the longest of the last 16 published frames' times
    from arrival at the prefix to output less their wait in this node's queue, the median interval between the
    frames served, or this frame's own compute (an action-token frame's: prefill to last token), whichever is
    longest. Only published frames count: old states replayed to a restarted suffix (the boundary topic's
    history) do not raise the limit that refuses them."""

    def __init__(self, node):
        self.node = node
        self.frames = Recent()   # seconds: arrival at the prefix to output, less the wait in this node's queue
        self.last = (0.0, 0.0)   # the last frame judged: its compute and its time so far (s), for the diagnostics
        self.started_ns = 0      # when the node became active (wall clock)

    def measured_s(self, compute_s: float = 0.0) -> float:
        return max(self.frames.longest(), self.node.health.period_ms() / 1e3, compute_s)

    def output_age(self, compute_s: float = 0.0, own_s: float = 0.0) -> Limit:
        """own_s: this frame's time so far (arrival to now, less its wait here). It never raises the auto
        limit (a frame cannot excuse itself), but an explicit value below it is below one frame's time."""
        factor, floor_s = OUTPUT_AGE
        return resolve("max_output_age_ms", self.node.params["max_output_age_ms"], "ms",
                       self.frame_time_s(compute_s, own_s), factor, floor_s, "stale_output", never_at_zero=True)

    def frame_time_s(self, compute_s: float = 0.0, own_s: float = 0.0) -> float:
        measured = self.measured_s(compute_s)
        return measured if self.node.params["max_output_age_ms"] == AUTO else max(measured, own_s)

    def fresh(self, seq: int, stamp_ns: int, arrival_ns: int, queue_s: float = 0.0, compute_s: float = 0.0,
              final: bool = False) -> bool:
        """False (counted as stale_output) when the frame arrived at the prefix longer ago than the limit: a
        planner must never get a trajectory for a world that has moved on. Ages come from the prefix's wall
        clock (hosts of one car are time-synchronised); arrival 0 = unknown (not checked). final: the check at
        publish time, with the frame's compute known."""
        if not arrival_ns:
            return True
        age_s = (time.time_ns() - arrival_ns) / 1e9
        if not final and self.node.params["max_output_age_ms"] == AUTO and self.measured_s() == 0:
            return self._not_replayed(seq, stamp_ns, arrival_ns, age_s)
        own_s = max(0.0, age_s - queue_s)
        self.last = (compute_s, own_s)
        limit = self.output_age(compute_s, own_s)
        if limit.warning:
            self.node.get_logger().warning(limit.warning, throttle_duration_sec=WARN_EVERY_S)
        if limit.seconds is None or age_s <= limit.seconds:
            if final:
                self.frames.add(own_s)
            return True
        self.node._reject("stale_output", ConfigError(
            f"trajectory of frame {seq} is {age_s * 1e3:.0f} ms old {'at publish time' if final else 'when taken'} "
            f"(max_output_age_ms {self.node.params['max_output_age_ms']:g}, limit {limit.seconds * 1e3:.0f} ms: "
            f"{limit.source})"), stamp_ns)
        return False

    def _not_replayed(self, seq: int, stamp_ns: int, arrival_ns: int, age_s: float) -> bool:
        """auto, nothing measured yet: a frame is judged at publish (its own compute is part of what it may
        take), unless it arrived at the prefix before this node was active (by more than the floor): replayed
        from the boundary topic's history to a suffix that was not up, refused before any compute."""
        before_s = (self.started_ns - arrival_ns) / 1e9
        if before_s <= OUTPUT_AGE[1]:
            return True
        self.node._reject("stale_output", ConfigError(
            f"boundary state of frame {seq} arrived at the prefix {before_s:.1f} s before this suffix was active "
            f"({age_s * 1e3:.0f} ms old): replayed from the topic's history"), stamp_ns)
        return False

    def pose_wait_s(self) -> float:
        """How long the output thread waits for a frame's pose: half the measured period, at least 0.1 s."""
        return wait_s(_period_s(self.node.health))

    def check(self) -> tuple:
        limit = self.output_age(*self.last)   # the current setting, as the last frame measured
        warnings = [limit.warning] if limit.warning else []
        return _check(self.node, {
            "max_output_age_ms": _ms(limit.seconds), "max_output_age_source": limit.source,
            "frame_time_ms": _ms(self.frame_time_s(*self.last)), "pose_wait_ms": _ms(self.pose_wait_s())},
            warnings)


class PrefixTimeLimits:
    """The wait for a frame's kinematic state (half the measured period, at least 0.1 s), the in-flight slot
    timeout and, for action-token models, the token timeout."""

    def __init__(self, node):
        self.node = node

    def kinematic_wait_s(self) -> float:
        return wait_s(_period_s(self.node.health))

    def check(self) -> tuple:
        node = self.node
        values = {"kinematic_wait_ms": _ms(self.kinematic_wait_s())}
        side, warnings = node.serving.time_limits()   # the kind's own: the in-flight slots, the token round trip
        values.update({k: _ms(v) if k.endswith("_ms") else str(v) for k, v in side.items()})
        return _check(node, values, warnings)


# ---- where a frame's time went (issue 50: a frame held for seconds somewhere between camera and output) ------
def waits_to_suffix(arrival_ns: int, received: float) -> dict:
    """to_suffix_ms: from the frame's arrival at the prefix (its wall clock) to its boundary state's receipt here
    (`received`, perf_counter): the prefix's wait, compute and the handover (~/debug/frame_info splits the first)."""
    if not arrival_ns:
        return {}
    received_ns = time.time_ns() - int((time.perf_counter() - received) * 1e9)
    return {"to_suffix_ms": f"{(received_ns - arrival_ns) / 1e6:.1f}"}


def with_output_wait(values: dict) -> dict:
    """values with the compute's end ("done", perf_counter) replaced by output_wait_ms: the output thread's queue
    and the wait for the frame's pose."""
    values = dict(values)
    done = values.pop("done", None)
    if done is not None:
        values["output_wait_ms"] = f"{(time.perf_counter() - done) * 1e3:.1f}"
    return values


def timeline(trajectory, values: dict) -> str:
    """One line: where a refused frame's time went, camera stamp to now."""
    age_ms = (time.time_ns() - trajectory.stamp_ns) / 1e6
    parts = [f"{key} {values[key]}" for key in ("to_suffix_ms", "queue_ms", "suffix_ms", "output_wait_ms")
             if values.get(key)]
    return f"frame {trajectory.seq} ({age_ms:.0f} ms since its stamp): " + ", ".join(parts) + \
        " (the prefix's share: its ~/debug/frame_info)"
