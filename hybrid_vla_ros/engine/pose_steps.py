"""Localization resets in the odometry stream (ROS-free): each kinematic state against the one before it.

A reset (a localization correction) is a discontinuity: two samples a few ms apart (50 Hz) but metres apart.
The whole-age check of engine/retime.py compares a frame's pose with the ego's present one, allowing what the
car could have driven in the frame's age; its 1 g term grows with that age (at 10 m/s, an ego 40 m from the
frame's pose passes it in a frame ~1.9 s old or older), and a real-size suffix takes seconds. Here every step between consecutive
samples is judged by the same physics over the samples' own gap dt: floor + max|speed| dt + 1 g dt^2/2
(and the yaw: floor + max|yaw rate| dt + 3 rad/s^2 dt^2/2), speeds from the two samples' twists. At 50 Hz
that is the floor plus centimetres, whatever the frame's age. A gap in the odometry is judged over its full
length (never a shorter, capped dt: the car drives on while its odometry is silent, and that is no reset):
a long gap allows what the whole-age check allows over as long, so that check stays, as the fallback.

Cost: O(1) per sample (the step to the previous one, a few float operations at 50 Hz); only the steps that
exceeded their bound are kept, the newest KEEP of them, and a frame looks at those alone: no scan of the
odometry history (10 s and more of it, engine/pipeline/camera_sync.py) per frame. Dropping older jumps loses
nothing: a frame's window runs from its stamp to the ego's newest sample, so whenever an older jump lies in
it, the newest one (taken with the ego's pose, under one lock) does too."""

from __future__ import annotations

import math
from collections import deque
from dataclasses import dataclass

from .pipeline.stamp_order import stamp_order
from .retime import CurrentPose, JumpLimits, reach

KEEP = 16   # jumps kept (the newest): a flood of them still leaves the newest, the one a frame needs


@dataclass(frozen=True)
class PoseStep:
    """A step between two consecutive odometry samples beyond what the car could have driven in between."""
    stamp_ns: int      # the later sample's stamp: the jump lies in (stamp_ns - gap, stamp_ns]
    gap_s: float       # between the two samples' stamps
    moved_m: float
    turned_rad: float
    reach_m: float     # the bound it exceeded (the allowances in force when the sample arrived)
    reach_rad: float

    def describe(self, frame_stamp_ns: int) -> str:
        return (f"{self.moved_m:.1f} m and {self.turned_rad:.2f} rad between two odometry samples "
                f"{self.gap_s * 1e3:.0f} ms apart (the later stamped {self.stamp_ns} ns, "
                f"{(self.stamp_ns - frame_stamp_ns) / 1e6:.0f} ms after the frame), where the car could have "
                f"gone at most {self.reach_m:.2f} m and {self.reach_rad:.2f} rad")


def step_between(a: CurrentPose, b: CurrentPose, jump: JumpLimits) -> PoseStep | None:
    """Sample b after sample a: the step, if it goes beyond the bound over their gap (else None)."""
    gap_s = (b.stamp_ns - a.stamp_ns) / 1e9
    moved = math.hypot(b.x - a.x, b.y - a.y)
    turned = abs(math.remainder(b.yaw - a.yaw, math.tau))
    reach_m, reach_rad = reach(jump, max(abs(a.speed), abs(b.speed)), max(abs(a.yaw_rate), abs(b.yaw_rate)),
                               gap_s)
    if moved > reach_m or turned > reach_rad:
        return PoseStep(b.stamp_ns, gap_s, moved, turned, reach_m, reach_rad)
    return None


def _finite(sample: CurrentPose) -> bool:
    return all(math.isfinite(v) for v in (sample.x, sample.y, sample.yaw, sample.speed, sample.yaw_rate))


class PoseSteps:
    """The jumps of one odometry stream, in stamp order. Not thread-safe: its owner holds a lock around `add`
    and `since` (ros/outputs/present.py)."""

    def __init__(self, keep: int = KEEP):
        self.last: CurrentPose | None = None
        self.jumps: deque = deque(maxlen=keep)   # PoseStep, oldest first

    def add(self, sample: CurrentPose, jump: JumpLimits) -> PoseStep | None:
        """The next sample: -> its step from the previous one when that is a jump (kept). An older stamp (late,
        duplicated) is skipped; one older by TIME_JUMP_S or more starts a new timeline (the jumps forgotten);
        a non-finite one is skipped (refused where it is the ego's pose: engine/retime.py)."""
        if not _finite(sample):
            return None
        order = "newer" if self.last is None else stamp_order(self.last.stamp_ns, sample.stamp_ns)
        if order == "older":
            return None
        if order == "jump":
            self.jumps.clear()
        step = step_between(self.last, sample, jump) if order == "newer" and self.last is not None else None
        if step is not None:
            self.jumps.append(step)
        self.last = sample
        return step

    def since(self, after_ns: int, until_ns: int) -> PoseStep | None:
        """The largest jump stamped in (after_ns, until_ns]: between a frame's stamp and the ego's pose (None:
        none). One stamped at after_ns is not in it: the frame's pose is then that sample's, after the jump."""
        inside = [step for step in self.jumps if after_ns < step.stamp_ns <= until_ns]
        return max(inside, key=lambda step: (step.moved_m, step.turned_rad), default=None)
