"""Localization resets found between consecutive odometry samples (engine/pose_steps.py): the gap the whole-age
pose_jump check leaves (issue 50: its 1 g term grows with the frame's age, so a 40 m reset at 10 m/s hid in a
frame older than ~1.9 s), closed by judging every step over its own stamp gap. The frames go through what the
suffix node does with them (ros/outputs/present.py): matched in a StampedHistory, the jumps since the frame taken with
the ego's newest sample, re-timed by engine/retime.py."""

import math

import numpy as np
import pytest

from hybrid_vla_ros.engine.pipeline.camera_sync import StampedHistory
from hybrid_vla_ros.engine.pose_steps import KEEP, PoseSteps, step_between
from hybrid_vla_ros.engine.retime import POSE_JUMP, CurrentPose, JumpLimits, RetimeError, retime
from hybrid_vla_ros.types import Pose2D

T0_NS = 1_000_000_000_000
MS = 1_000_000
JUMP = JumpLimits(floor_m=2.0, floor_rad=0.3)   # the shipped output_pose_jump_m / _rad
START = Pose2D(5.0, -3.0, 0.4)                  # the ego at T0_NS, heading 0.4 rad


def at(ms: float, speed: float = 10.0, reset_ms: float | None = None, sideways: float = 40.0) -> CurrentPose:
    """The ego `ms` after T0 driving straight at `speed`, moved `sideways` to its left from reset_ms on."""
    c, s = math.cos(START.yaw), math.sin(START.yaw)
    ahead, left = speed * ms / 1e3, sideways if reset_ms is not None and ms >= reset_ms else 0.0
    return CurrentPose(T0_NS + int(round(ms * MS)), START.x + ahead * c - left * s, START.y + ahead * s + left * c,
                       START.yaw, speed=speed)


def feed(samples, history: StampedHistory, steps: PoseSteps) -> None:
    for sample in samples:   # as ros/outputs/present.py add_odometry: kept for matching, the step judged
        history.add(sample.stamp_ns, Pose2D(sample.x, sample.y, sample.yaw))
        steps.add(sample, JUMP)


def plan_from(pose: Pose2D, speed: float = 10.0) -> np.ndarray:
    """(64, 5) straight on from the frame's pose at `speed`, every 0.1 s."""
    t = 0.1 * np.arange(1, 65)
    return np.column_stack([pose.x + speed * t * math.cos(pose.yaw), pose.y + speed * t * math.sin(pose.yaw),
                            np.full(64, pose.yaw), np.full(64, speed), t])


def publish(frame_ms: float, ego: CurrentPose, history: StampedHistory, steps: PoseSteps, with_steps=True):
    """The frame stamped frame_ms after T0 as the node re-times it, 20 ms after the ego's newest sample."""
    stamp_ns = T0_NS + int(round(frame_ms * MS))
    pose, matched = history.match(stamp_ns, 50 * MS)
    assert matched
    stepped = steps.since(stamp_ns, ego.stamp_ns) if with_steps else None
    return retime(plan_from(pose), pose, stamp_ns, ego.stamp_ns + 20 * MS, ego, 0.1, JUMP, stepped)


def first_step(out) -> float:
    return float(np.hypot(*(out.points[1, :2] - out.points[0, :2])))


def drive_through_a_reset(until_ms: int = 3_000, reset_ms: int = 1_500):
    history, steps = StampedHistory(between=Pose2D.between), PoseSteps()
    samples = [at(ms, reset_ms=reset_ms) for ms in range(0, until_ms + 1, 20)]   # 50 Hz
    feed(samples, history, steps)
    return history, steps, samples[-1]


def test_a_40m_reset_in_a_frame_3s_old_at_10mps_is_refused_where_the_whole_age_check_let_it_through():
    """The frame at 0 s, the reset at 1.5 s, the ego's pose at 3 s: 2 + 10 x 3 + 4.9 x 9 = 76 m allowed over the
    whole age, so that check alone publishes a 40 m step from the ego; the step between the samples at 1.48 and
    1.5 s (20 ms apart: 2.2 m allowed) gives the reset away."""
    history, steps, ego = drive_through_a_reset()
    unchecked = publish(0.0, ego, history, steps, with_steps=False)
    assert first_step(unchecked) > 38.0                                # the step the whole-age check let out
    with pytest.raises(RetimeError, match=r"jumped 40\.0 m and 0\.00 rad between two odometry samples 20 ms "
                                          rf"apart \(the later stamped {T0_NS + 1_500 * MS} ns, 1500 ms after "
                                          r"the frame\), where the car could have gone at most 2\.20 m") as caught:
        publish(0.0, ego, history, steps)
    assert caught.value.reason == POSE_JUMP and "localization reset" in str(caught.value)
    for frame_ms in (1_520.0, 2_000.0, 2_900.0):   # stamped after the reset: served, from the ego, no step
        assert first_step(publish(frame_ms, ego, history, steps)) < 1.5


def test_only_the_jumps_between_the_frames_stamp_and_the_egos_count():
    history, steps, _ = drive_through_a_reset()
    reset_ns = T0_NS + 1_500 * MS
    assert steps.since(T0_NS, reset_ns - 1) is None          # the ego's sample from before the reset
    assert steps.since(reset_ns, T0_NS + 3_000 * MS) is None   # the frame's pose is the sample after the reset
    assert steps.since(reset_ns - 1, reset_ns).stamp_ns == reset_ns
    assert len(steps.jumps) == 1                              # 150 samples, one step out of bounds


def test_each_step_is_allowed_the_floor_plus_speed_times_its_gap_plus_1g():
    for gap_ms, speed in ((20.0, 10.0), (20.0, 0.0), (100.0, 30.0), (2_000.0, 10.0), (20.0, -8.0)):
        gap = gap_ms / 1e3
        bound = 2.0 + abs(speed) * gap + 9.8 * gap * gap / 2
        a = CurrentPose(T0_NS, 0.0, 0.0, 0.0, speed=speed)
        for metres, jumps in ((bound - 0.01, False), (bound + 0.01, True)):
            b = CurrentPose(T0_NS + int(gap_ms * MS), 0.0, metres, 0.0, speed=speed)
            assert (step_between(a, b, JUMP) is not None) == jumps, (gap_ms, speed, metres)
    for speeds, jumps in (((0.0, 10.0), False), ((10.0, 0.0), False), ((0.0, 0.0), True)):   # 2.15 m in 20 ms
        a, b = (CurrentPose(T0_NS + k * 20 * MS, 0.0, 2.15 * k, 0.0, speed=v) for k, v in enumerate(speeds))
        assert (step_between(a, b, JUMP) is not None) == jumps   # the faster sample's speed: 2 + 0.2 + 0.002 m


def test_a_yaw_jump_between_samples_is_one_and_the_yaw_is_compared_the_short_way_round():
    a = CurrentPose(T0_NS, 0.0, 0.0, math.pi - 0.1)
    assert step_between(a, CurrentPose(T0_NS + 20 * MS, 0.0, 0.0, -math.pi + 0.1), JUMP) is None   # 0.2 rad
    turned = step_between(a, CurrentPose(T0_NS + 20 * MS, 0.0, 0.0, math.pi - 0.5), JUMP)
    assert turned is not None and turned.turned_rad == pytest.approx(0.4)
    spinning = CurrentPose(T0_NS + 20 * MS, 0.0, 0.0, math.pi - 0.5, yaw_rate=-6.0)   # 0.3 + 6 x 0.02 > 0.4
    assert step_between(a, spinning, JUMP) is None


def test_a_gap_in_the_odometry_is_judged_over_its_length():
    """2 s without odometry at 10 m/s: the car drove 20 m, no reset (a dt capped short would refuse it). A 40 m
    reset over a 0.5 s gap: caught. The limit, as documented: hidden in a 3 s gap (2 + 30 + 44 = 76 m allowed),
    40 m sideways and 30 m on cannot be told from driving, by the steps or by the whole-age check."""
    history, steps = StampedHistory(between=Pose2D.between), PoseSteps()
    feed([at(ms) for ms in (*range(0, 1_001, 20), *range(3_000, 3_201, 20))], history, steps)
    assert not steps.jumps
    feed([at(ms, reset_ms=3_700) for ms in range(3_700, 4_001, 20)], history, steps)
    assert [(j.stamp_ns, round(j.gap_s, 3)) for j in steps.jumps] == [(T0_NS + 3_700 * MS, 0.5)]
    history, steps = StampedHistory(between=Pose2D.between), PoseSteps()
    feed([at(ms, reset_ms=4_000) for ms in (*range(0, 1_001, 20), *range(4_000, 4_201, 20))], history, steps)
    assert not steps.jumps
    assert first_step(publish(1_000.0, at(4_200.0, reset_ms=4_000), history, steps)) > 38.0


def test_late_duplicated_non_finite_samples_and_time_going_back():
    steps = PoseSteps()
    for ms in range(0, 201, 20):
        steps.add(at(ms), JUMP)
    assert steps.add(at(100.0, reset_ms=0.0), JUMP) is None and steps.last.stamp_ns == T0_NS + 200 * MS   # late
    assert steps.add(at(200.0), JUMP) is None                                                              # again
    nan = CurrentPose(T0_NS + 220 * MS, math.nan, 0.0, 0.0, speed=10.0)
    assert steps.add(nan, JUMP) is None and steps.last.stamp_ns == T0_NS + 200 * MS   # skipped, not the last
    assert steps.add(at(240.0, reset_ms=240.0), JUMP) is not None                     # a reset across it: caught
    back = CurrentPose(T0_NS - 5_000 * MS, 500.0, 500.0, 0.0)                          # a bag looped: 5 s back
    assert steps.add(back, JUMP) is None and not steps.jumps and steps.last == back


def test_the_kept_jumps_are_bounded_and_the_newest_in_a_window_is_among_them():
    steps = PoseSteps()
    steps.add(at(0.0), JUMP)
    for k in range(1, 3 * KEEP + 1):   # every sample a 40 m jump from the one before (left, right, left, ...)
        steps.add(at(20.0 * k, sideways=40.0 * (k % 2), reset_ms=0.0), JUMP)
    assert len(steps.jumps) == KEEP
    assert steps.since(T0_NS, T0_NS + 60 * KEEP * MS).stamp_ns > T0_NS + 40 * KEEP * MS


def test_driving_and_turning_with_localization_noise_makes_no_jump():
    """10 s at 50 Hz: 15 m/s on a 0.2 rad/s curve, 5 cm and 5 mrad of noise on each sample: no step refused."""
    rng = np.random.default_rng(3)
    steps = PoseSteps()
    x = y = yaw = 0.0
    for k in range(500):
        noisy = CurrentPose(T0_NS + k * 20 * MS, x + rng.normal(0, 0.05), y + rng.normal(0, 0.05),
                            yaw + rng.normal(0, 0.005), speed=15.0, yaw_rate=0.2)
        assert steps.add(noisy, JUMP) is None, k
        x, y, yaw = x + 0.3 * math.cos(yaw), y + 0.3 * math.sin(yaw), yaw + 0.004
