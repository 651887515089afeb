"""A frame's plan re-timed to the present (ROS-free, numpy): what the suffix publishes in a world frame (map)
with `output_retime` on.

The model's waypoints are times after the frame's stamp, and a real-size suffix finishes them seconds later.
Autoware's planners take a trajectory that starts now (the concatenator drops a candidate set stamped more
than 0.2 s ago): stamped at publish time, its first point the ego as the newest odometry has it (t = 0), then
a point every `dt_s` (0.1 s: the trajectory processor's smoother's step) up to the plan's horizon. The plan's
own times are shifted by the frame's age: waypoints already in the past are gone, the rest is sampled at the
present's times (position linear between the plan's points, heading the short way round); speeds are what
the sampled points imply (finite differences, along the heading), accelerations follow from the speeds
(types.accelerations). The plan starts at the ego of the frame's time (its matched pose, t = 0), so a sample
before the first waypoint lies on the segment from it.

Refused (RetimeError, its `reason` counted by the node): no current pose (no odometry, none at or after the
frame's stamp, or the newest one older than STATE_AGE's ceiling at publish time), a plan wholly in the past
(the frame's age plus one step beyond its horizon), a plan whose times do not increase, and (with `jump`
limits) a pose jump (a localization reset: the plan, placed at the old pose, would start with a step of
tens of metres from the ego at t = 0): a step between consecutive odometry samples since the frame further
than the car could have driven between them (engine/pose_steps.py), or the ego's present pose further from
the frame's pose than the car could have driven or turned between the two. NaN/Inf anywhere in what goes in: NonFiniteError (nonfinite_output).
Nothing non-finite comes out.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from ..errors import ConfigError, InputError, expect, expect_finite
from ..types import Pose2D
from .pipeline.camera_sync import STATE_AGE

TOO_OLD = "retime_too_old"             # the frame's whole plan lies in the past at publish time
NO_CURRENT_POSE = "retime_no_current_pose"   # no odometry at or after the frame, or the newest one is old
INVALID_PLAN = "retime_invalid_plan"   # the plan's times do not increase from > 0
POSE_JUMP = "pose_jump"                # the ego now lies further from the frame's pose than it could have moved
CURRENT_POSE_AGE_S = STATE_AGE[2]      # 1 s: the validator's latency threshold; an older pose is not "now"


class RetimeError(InputError):
    """A frame's plan that cannot be re-timed to the present: refused, counted under `reason`."""

    def __init__(self, message: str, reason: str):
        super().__init__(message)
        self.reason = reason


@dataclass(frozen=True)
class CurrentPose:
    """The ego as the newest odometry has it, in the output frame."""
    stamp_ns: int
    x: float
    y: float
    yaw: float
    z: float = 0.0
    speed: float = 0.0      # m/s, the odometry's twist (its sign ignored)
    yaw_rate: float = 0.0   # rad/s, the odometry's twist


@dataclass
class Retimed:
    points: np.ndarray   # (M, 5) x, y, heading, speed, time_from_start (s after stamp_ns); M >= 2, row 0 the ego
    stamp_ns: int        # the present the plan was re-timed to (the publish time)
    z: float             # the ego's height (every point's: the plan is flat)
    age_s: float         # the frame's age at stamp_ns
    dropped: int         # the plan's waypoints already in the past


# How far the car can have moved between the frame's pose and its present one, beyond what the newest
# odometry's twist explains: its speed and yaw rate may have changed since the frame. MAX_ACCEL_MPS2 is 1 g
# (tyres on a dry road give about that, braking or accelerating); MAX_YAW_ACCEL_RPS2 bounds how fast the yaw
# rate changes (a car turns at most ~1.4 rad/s, 1 g of lateral grip on a ~5 m radius: sqrt(9.8 / 5), and a
# steering swing takes ~0.5 s to get there). Both are generous on purpose (a refusal costs a frame); the price:
# over a frame's whole age, a 40 m reset (issue 50) at 10 m/s is caught in frames up to ~1.9 s old only
# (2 + 10 t + 4.9 t^2 < 40). Hence the same bound per odometry step (engine/pose_steps.py): t = 20 ms at 50 Hz.
MAX_ACCEL_MPS2 = 9.8
MAX_YAW_ACCEL_RPS2 = 3.0


@dataclass(frozen=True)
class JumpLimits:
    """The allowance beyond the car's motion (output_pose_jump_m / _rad): localization noise and the frame's
    pose matched up to POSE_SKEW_NS (50 ms: 1 m at 20 m/s) off its stamp. The car may lie up to
    floor_m + |speed| t + MAX_ACCEL t^2 / 2 from the frame's pose, and have turned up to
    floor_rad + |yaw_rate| t + MAX_YAW_ACCEL t^2 / 2, t the time from the frame to the ego's pose.

    Refused, not re-anchored: which pose was wrong (the old one or the corrected one) is not known here, and
    moving the plan by the correction would need the car's motion since the frame from something other than
    the poses that jumped. Only the frames in flight at the reset are lost: the next frame is matched to a
    pose after it, and its plan starts at the ego again."""
    floor_m: float
    floor_rad: float


def wrap(angle: np.ndarray) -> np.ndarray:
    """Angles into (-pi, pi]."""
    return np.arctan2(np.sin(angle), np.cos(angle))


def sample_times(age_s: float, horizon_s: float, dt_s: float) -> np.ndarray:
    """Plan times of the present's points after the first: age + k dt, k = 1, 2, ..., up to the horizon. (K,)"""
    count = int(np.floor((horizon_s - age_s) / dt_s + 1e-6)) if horizon_s > age_s else 0
    return age_s + dt_s * np.arange(1, count + 1)


def plan_at(plan: np.ndarray, origin: Pose2D, times: np.ndarray) -> np.ndarray:
    """plan (N, 5) in the output frame, times from the frame's stamp; origin: the ego at the frame's stamp (t = 0).
    -> (K, 3) x, y, heading at `times` (K,): linear between the knots, heading unwrapped before, wrapped after."""
    knots = np.concatenate([[0.0], plan[:, 4]])                            # (N + 1,)
    x = np.concatenate([[origin.x], plan[:, 0]])                           # (N + 1,)
    y = np.concatenate([[origin.y], plan[:, 1]])                           # (N + 1,)
    heading = np.unwrap(np.concatenate([[origin.yaw], plan[:, 2]]))        # (N + 1,) no jump at +-pi
    return np.stack([np.interp(times, knots, x), np.interp(times, knots, y),
                     wrap(np.interp(times, knots, heading))], axis=1)     # (K, 3)


def longitudinal_speeds(xy: np.ndarray, heading: np.ndarray, t: np.ndarray) -> np.ndarray:
    """(M, 2) positions, (M,) headings, (M,) times, M >= 2 -> (M,) velocity along the heading (m/s): central
    differences inside, one-sided at the ends (np.gradient)."""
    vx, vy = np.gradient(xy[:, 0], t), np.gradient(xy[:, 1], t)
    return vx * np.cos(heading) + vy * np.sin(heading)


def _check_plan(plan: np.ndarray) -> None:
    expect_finite(plan, "nonfinite_output", "the plan to re-time")
    knots = np.concatenate([[0.0], plan[:, 4]]) if plan.ndim == 2 and plan.shape[1] == 5 else np.zeros(1)
    if len(knots) < 2 or not np.all(np.diff(knots) > 0):
        raise RetimeError(f"plan of shape {plan.shape}: its times must increase from above 0", INVALID_PLAN)


def _check_poses(origin: Pose2D, frame_stamp_ns: int, ego: CurrentPose | None, now_ns: int) -> None:
    if ego is None or ego.stamp_ns < frame_stamp_ns:
        raise RetimeError("no odometry at or after the frame's stamp " + (
            "(none received)" if ego is None else f"(the newest is {(frame_stamp_ns - ego.stamp_ns) / 1e6:.0f} ms "
            "before it)") + ": the ego's current pose is unknown", NO_CURRENT_POSE)
    if (now_ns - ego.stamp_ns) / 1e9 > CURRENT_POSE_AGE_S:
        raise RetimeError(f"the newest odometry is {(now_ns - ego.stamp_ns) / 1e6:.0f} ms old at publish time (more "
                          f"than {CURRENT_POSE_AGE_S:g} s): not the ego's current pose", NO_CURRENT_POSE)
    expect_finite(np.array([origin.x, origin.y, origin.yaw, ego.x, ego.y, ego.yaw, ego.z]), "nonfinite_output",
                  "the poses of the frame and of the ego")


def reach(jump: JumpLimits, speed: float, yaw_rate: float, t: float) -> tuple[float, float]:
    """How far (m) and how much (rad) the car can have moved in t seconds from `speed` and `yaw_rate` (their
    signs ignored), changing at most MAX_ACCEL_MPS2 and MAX_YAW_ACCEL_RPS2, plus the floors."""
    return (jump.floor_m + abs(speed) * t + MAX_ACCEL_MPS2 * t * t / 2,
            jump.floor_rad + abs(yaw_rate) * t + MAX_YAW_ACCEL_RPS2 * t * t / 2)


def _check_step(frame_stamp_ns: int, stepped) -> None:
    """A jump in the odometry since the frame (engine/pose_steps.py PoseStep, None: none): refused (POSE_JUMP)."""
    if stepped is not None:
        raise RetimeError(f"the ego's pose jumped {stepped.describe(frame_stamp_ns)}: a localization reset? The "
                          "frame's plan, placed at its pose from before it, would start with that step from the "
                          "ego: refused", POSE_JUMP)


def _check_jump(origin: Pose2D, frame_stamp_ns: int, ego: CurrentPose, jump: JumpLimits) -> None:
    """The ego's present pose against the frame's: refused (POSE_JUMP) further than the car could have gone."""
    expect_finite(np.array([ego.speed, ego.yaw_rate]), "nonfinite_output", "the ego's speed and yaw rate")
    t = (ego.stamp_ns - frame_stamp_ns) / 1e9                            # >= 0: _check_poses
    moved = float(np.hypot(ego.x - origin.x, ego.y - origin.y))
    turned = abs(float(wrap(ego.yaw - origin.yaw)))
    reach_m, reach_rad = reach(jump, ego.speed, ego.yaw_rate, t)
    if moved > reach_m or turned > reach_rad:
        raise RetimeError(
            f"the ego's pose jumped: {moved:.1f} m and {turned:.2f} rad from the frame's pose {t * 1e3:.0f} ms "
            f"earlier, where the car could have gone at most {reach_m:.1f} m and {reach_rad:.2f} rad (at "
            f"{abs(ego.speed):.1f} m/s and {abs(ego.yaw_rate):.2f} rad/s by the odometry, changing at most "
            f"{MAX_ACCEL_MPS2:g} m/s^2 and {MAX_YAW_ACCEL_RPS2:g} rad/s^2, plus "
            f"{jump.floor_m:g} m and {jump.floor_rad:g} rad): a localization reset? Its plan, placed at the "
            "frame's pose, would start with that step from the ego: refused", POSE_JUMP)


def retime(plan: np.ndarray, origin: Pose2D, frame_stamp_ns: int, now_ns: int, ego: CurrentPose | None,
           dt_s: float, jump: JumpLimits | None = None, stepped=None) -> Retimed:
    """plan (N, 5) in the output frame, times from frame_stamp_ns; origin: the ego at that stamp (its matched
    pose); ego: the newest odometry. -> the plan as of now_ns: the ego at t = 0, then every dt_s up to the
    plan's horizon. A frame stamped after now_ns (unsynchronised clocks) counts as age 0. Checked in this
    order: the plan (finite, times increasing), its age (too old), the poses (a current one, finite), then,
    given `jump` (None: not checked, a simulation without localization), a jump in the odometry between the
    frame's stamp and the ego's (`stepped`: engine/pose_steps.py PoseSteps.since), and the ego's pose against
    the frame's over the whole age (the fallback where the odometry had a gap)."""
    expect(dt_s > 0, ConfigError, f"output_dt_s={dt_s!r}: must be above 0")
    expect(jump is None or (jump.floor_m >= 0 and jump.floor_rad >= 0), ConfigError,
           f"{jump!r}: the pose jump allowances must be 0 or more")
    _check_plan(plan)
    age_s = max(0.0, (now_ns - frame_stamp_ns) / 1e9)
    times = sample_times(age_s, float(plan[-1, 4]), dt_s)                 # (K,) plan times
    if len(times) == 0:
        raise RetimeError(f"the frame is {age_s * 1e3:.0f} ms old at publish time, its plan ends at "
                          f"{plan[-1, 4]:.2f} s: nothing of it lies {dt_s:g} s or more ahead", TOO_OLD)
    _check_poses(origin, frame_stamp_ns, ego, now_ns)
    if jump is not None:
        _check_step(frame_stamp_ns, stepped)
        _check_jump(origin, frame_stamp_ns, ego, jump)
    ahead = plan_at(plan, origin, times)                                  # (K, 3)
    xyh = np.concatenate([[[ego.x, ego.y, wrap(ego.yaw)]], ahead])       # (M, 3), M = K + 1
    t = dt_s * np.arange(len(xyh))                                        # (M,) from now
    speeds = longitudinal_speeds(xyh[:, :2], xyh[:, 2], t)                # (M,)
    points = np.column_stack([xyh, speeds, t])                            # (M, 5)
    expect_finite(points, "nonfinite_output", "the re-timed plan")
    return Retimed(points, int(now_ns), float(ego.z), age_s, int(np.sum(plan[:, 4] <= age_s)))
