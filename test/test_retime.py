"""Trajectories of the present (issue 37, item 3): a frame's plan re-timed to the publish time
(engine/retime.py): waypoints already past dropped, the ego now at t = 0, a point every dt up to the horizon,
positions those of the plan at equal absolute times, speeds from the points; a frame too old, a missing or old
current pose, or NaN are refused with a reason. The graph test (a slow suffix, real Autoware messages over DDS)
is in test_retime_graph.py."""

import dataclasses
import math

import numpy as np
import pytest

from hybrid_vla_ros.engine.pipeline.camera_sync import StampedHistory
from hybrid_vla_ros.engine.retime import (INVALID_PLAN, NO_CURRENT_POSE, POSE_JUMP, TOO_OLD, CurrentPose,
                                          JumpLimits, RetimeError, retime, sample_times)
from hybrid_vla_ros.errors import ConfigError, NonFiniteError
from hybrid_vla_ros.types import Pose2D, Trajectory, accelerations

FRAME_NS = 1_000_000_000_000   # the frame's stamp
MS = 1_000_000


def curve_plan(n: int = 8, step_s: float = 0.5) -> np.ndarray:
    """A model's plan in the ego frame: (n, 5), a left curve at 10 m/s, waypoints every step_s from step_s."""
    t = step_s * np.arange(1, n + 1)
    heading = 0.05 * t
    x, y = 10.0 * np.sin(heading) / 0.05, 10.0 * (1.0 - np.cos(heading)) / 0.05
    return np.column_stack([x, y, heading, np.full(n, 10.0), t])


def in_map(plan: np.ndarray, pose: Pose2D) -> np.ndarray:
    return Trajectory(plan, seq=0, stamp_ns=FRAME_NS, partition=0).in_map(pose)


def raw_at(plan_map: np.ndarray, origin: Pose2D, times: np.ndarray) -> np.ndarray:
    """The un-retimed plan (origin at t = 0, then its waypoints) at plan times, linearly: (K, 2)."""
    knots = np.concatenate([[0.0], plan_map[:, 4]])
    x, y = np.concatenate([[origin.x], plan_map[:, 0]]), np.concatenate([[origin.y], plan_map[:, 1]])
    return np.stack([np.interp(times, knots, x), np.interp(times, knots, y)], axis=1)


ORIGIN = Pose2D(100.0, 50.0, 0.7)
EGO = CurrentPose(0, 103.5, 52.9, 0.72, z=12.5)   # stamped 20 ms before now (retimed), never before the frame


def retimed(age_ms: float = 1_234.0, dt_s: float = 0.1, ego: CurrentPose | None = EGO, plan=None):
    plan_map = in_map(curve_plan() if plan is None else plan, ORIGIN)
    now_ns = FRAME_NS + int(age_ms * MS)
    if ego is not None and ego.stamp_ns == 0:
        ego = dataclasses.replace(ego, stamp_ns=max(FRAME_NS, now_ns - 20 * MS))
    return plan_map, retime(plan_map, ORIGIN, FRAME_NS, now_ns, ego, dt_s)


def test_the_first_point_is_the_ego_now_at_t0_then_points_every_dt_up_to_the_horizon():
    plan_map, out = retimed(age_ms=1_234.0, dt_s=0.1)
    assert out.stamp_ns == FRAME_NS + 1_234 * MS and out.z == 12.5
    np.testing.assert_allclose(out.points[0, :3], [EGO.x, EGO.y, EGO.yaw])
    assert out.points[0, 4] == 0.0
    np.testing.assert_allclose(np.diff(out.points[:, 4]), 0.1, atol=1e-12)
    # horizon 4 s from the frame: 2.766 s left at 1.234 s of age -> 27 points after the ego
    assert len(out.points) == 1 + 27 and out.points[-1, 4] + 1.234 <= 4.0 + 1e-9
    assert out.dropped == 2 and out.age_s == pytest.approx(1.234)   # the waypoints at 0.5 s and 1.0 s are past


def test_positions_are_the_plans_at_equal_absolute_times():
    """Sample k is at absolute time stamp + k dt = the frame's stamp + age + k dt: the plan's position then,
    exactly at its own waypoints (age 0.3 s, dt 0.1 s: 0.5 s, 1.0 s, ... are samples) and on the segment
    between them elsewhere (within the linear interpolation of a curve: centimetres)."""
    plan_map, out = retimed(age_ms=300.0, dt_s=0.1)
    times = 0.3 + out.points[1:, 4]                                      # plan times of the samples
    np.testing.assert_allclose(out.points[1:, :2], raw_at(plan_map, ORIGIN, times), atol=1e-9)
    at_waypoints = np.isin(np.round(times, 6), np.round(plan_map[:, 4], 6))
    assert at_waypoints.sum() == 8   # 0.5 .. 4.0 s: every waypoint is a sample
    np.testing.assert_allclose(out.points[1:][at_waypoints, :2], plan_map[:, :2], atol=1e-9)
    np.testing.assert_allclose(out.points[1:][at_waypoints, 2], plan_map[:, 2], atol=1e-9)   # heading too
    truth_t = times[~at_waypoints]                                       # the curve itself between waypoints
    truth = in_map(np.column_stack([10 * np.sin(0.05 * truth_t) / 0.05, 10 * (1 - np.cos(0.05 * truth_t)) / 0.05,
                                    0.05 * truth_t, np.full(len(truth_t), 10.0), truth_t]), ORIGIN)
    np.testing.assert_allclose(out.points[1:][~at_waypoints, :2], truth[:, :2], atol=0.02)


def test_waypoints_already_past_are_dropped_and_the_horizon_is_kept():
    for age_ms, dropped in ((0.0, 0), (499.0, 0), (500.0, 1), (2_600.0, 5), (3_850.0, 7)):
        _, out = retimed(age_ms=age_ms, ego=CurrentPose(FRAME_NS + int(age_ms * MS), 0.0, 0.0, 0.0))
        assert out.dropped == dropped
        assert age_ms / 1e3 + out.points[-1, 4] <= 4.0 + 1e-9 < age_ms / 1e3 + out.points[-1, 4] + 0.1


def test_speeds_and_accelerations_follow_from_the_points():
    """Along the heading, central differences (one-sided at the ends); accelerations from the speeds. On the
    plan's straight-ish stretch the speed is the plan's 10 m/s."""
    _, out = retimed(age_ms=700.0, dt_s=0.1)
    p = out.points
    forward = (p[1:, :2] - p[:-1, :2]) / 0.1
    along = forward[:, 0] * np.cos(p[:-1, 2]) + forward[:, 1] * np.sin(p[:-1, 2])
    assert p[0, 3] == pytest.approx(along[0])                            # one-sided at the ego
    central = (p[2:, :2] - p[:-2, :2]) / 0.2
    np.testing.assert_allclose(p[1:-1, 3], central[:, 0] * np.cos(p[1:-1, 2]) + central[:, 1] * np.sin(p[1:-1, 2]))
    np.testing.assert_allclose(p[2:, 3], 10.0, rtol=2e-3)                # away from the ego's jump
    np.testing.assert_allclose(accelerations(p)[:-1], np.diff(p[:, 3]) / 0.1)


def test_headings_interpolate_the_short_way_round_across_pi():
    plan = curve_plan()
    turn = np.linspace(math.pi - 0.2, math.pi + 0.2, 8)
    plan[:, 2] = np.arctan2(np.sin(turn), np.cos(turn))                 # through +-pi, wrapped as a model gives it
    origin = Pose2D(0.0, 0.0, 0.0)
    out = retime(in_map(plan, origin), origin, FRAME_NS, FRAME_NS + 600 * MS,
                 CurrentPose(FRAME_NS + 600 * MS, 0.0, 0.0, 3.0), 0.1)
    assert np.all(np.abs(np.abs(out.points[1:, 2]) - math.pi) <= 0.2 + 1e-9)   # never through 0


def test_a_frame_whose_whole_plan_is_past_is_refused_as_too_old():
    for age_ms in (3_950.0, 4_000.0, 60_000.0):
        with pytest.raises(RetimeError, match="nothing of it lies 0.1 s or more ahead") as caught:
            retimed(age_ms=age_ms, ego=CurrentPose(FRAME_NS + int(age_ms * MS) - 10 * MS, 0.0, 0.0, 0.0))
        assert caught.value.reason == TOO_OLD
    with pytest.raises(RetimeError) as caught:   # the age is judged before the poses: the telling reason
        retimed(age_ms=60_000.0, ego=None)
    assert caught.value.reason == TOO_OLD


def test_no_current_pose_newer_than_the_frame_or_an_old_one_is_refused():
    with pytest.raises(RetimeError, match="none received") as caught:
        retimed(ego=None)
    assert caught.value.reason == NO_CURRENT_POSE
    with pytest.raises(RetimeError, match="the newest is 20 ms before it") as caught:
        retimed(ego=CurrentPose(FRAME_NS - 20 * MS, 0.0, 0.0, 0.0))
    assert caught.value.reason == NO_CURRENT_POSE
    with pytest.raises(RetimeError, match="1500 ms old at publish time") as caught:
        retimed(age_ms=2_000.0, ego=CurrentPose(FRAME_NS + 500 * MS, 0.0, 0.0, 0.0))
    assert caught.value.reason == NO_CURRENT_POSE


def test_non_finite_plans_or_poses_and_plans_without_increasing_times_are_refused():
    plan = curve_plan()
    plan[3, 1] = np.nan
    with pytest.raises(NonFiniteError) as caught:
        retimed(plan=plan)
    assert caught.value.reason == "nonfinite_output"
    with pytest.raises(NonFiniteError):
        retimed(ego=CurrentPose(0, np.inf, 0.0, 0.0))
    with pytest.raises(NonFiniteError):
        retimed(ego=CurrentPose(0, 0.0, 0.0, 0.0, z=np.nan))
    plan = curve_plan()
    plan[4, 4] = plan[3, 4]
    with pytest.raises(RetimeError, match="times must increase") as caught:
        retimed(plan=plan)
    assert caught.value.reason == INVALID_PLAN


def test_a_frame_stamped_after_now_counts_as_age_zero_and_sample_times_stop_at_the_horizon():
    plan_map = in_map(curve_plan(), ORIGIN)
    out = retime(plan_map, ORIGIN, FRAME_NS, FRAME_NS - 50 * MS, CurrentPose(FRAME_NS, 1.0, 2.0, 0.0), 0.5)
    assert out.age_s == 0.0 and len(out.points) == 9 and out.dropped == 0
    np.testing.assert_allclose(out.points[1:, :2], plan_map[:, :2], atol=1e-9)
    np.testing.assert_allclose(sample_times(0.25, 1.0, 0.25), [0.5, 0.75, 1.0])
    assert len(sample_times(1.0, 1.0, 0.1)) == 0


def test_a_path_carries_the_retimed_points_at_their_absolute_times_and_the_egos_height():
    """nav_msgs/Path (output_type path, or RViz) gets the same points as the Trajectory: header stamp = the
    publish time, each pose stamped with the time the car is to be there, z = the ego's."""
    from nav_msgs.msg import Path
    from hybrid_vla_ros.ros import messages
    _, out = retimed(age_ms=800.0)
    frame = Trajectory(curve_plan(), seq=3, stamp_ns=FRAME_NS, partition=2)
    msg = messages.trajectory_to_msg(frame, Path, "path", "map", out.points, stamp_ns=out.stamp_ns, z=out.z)
    assert messages.stamp_to_ns(msg.header.stamp) == out.stamp_ns == FRAME_NS + 800 * MS
    assert [messages.stamp_to_ns(p.header.stamp) - out.stamp_ns for p in msg.poses] == \
        [k * 100 * MS for k in range(len(out.points))]
    xyz = np.array([[p.pose.position.x, p.pose.position.y, p.pose.position.z] for p in msg.poses])
    np.testing.assert_allclose(xyz, np.column_stack([out.points[:, :2], np.full(len(out.points), 12.5)]))


# ---- pose jumps (issue 50, item 5): the ego's present pose against the frame's ----------------------------------

JUMP = JumpLimits(floor_m=2.0, floor_rad=0.3)   # the shipped output_pose_jump_m / _rad


def ahead_of(pose: Pose2D, metres: float, sideways: float = 0.0) -> tuple[float, float]:
    c, s = math.cos(pose.yaw), math.sin(pose.yaw)
    return pose.x + metres * c - sideways * s, pose.y + metres * s + sideways * c


def jumped(ego_ms: float, metres: float, sideways: float = 0.0, yaw: float = 0.0, speed: float = 10.0,
           yaw_rate: float = 0.0, jump=JUMP):
    """The frame's plan re-timed 20 ms after the ego's pose, stamped ego_ms after the frame: the ego `metres`
    along the frame's heading and `sideways` to its left, turned by `yaw`."""
    x, y = ahead_of(ORIGIN, metres, sideways)
    ego_ns = FRAME_NS + int(ego_ms * MS)
    ego = CurrentPose(ego_ns, x, y, ORIGIN.yaw + yaw, speed=speed, yaw_rate=yaw_rate)
    return retime(in_map(curve_plan(), ORIGIN), ORIGIN, FRAME_NS, ego_ns + 20 * MS, ego, 0.1, jump)


def reach_m(t: float, speed: float) -> float:
    return 2.0 + abs(speed) * t + 9.8 * t * t / 2   # docs/INTERFACES.md: the allowance


def test_an_ego_further_from_the_frames_pose_than_the_car_could_drive_is_refused_as_a_pose_jump():
    """The car drove 10 m/s x 0.6 s: served. Reset 40 m sideways (issue 50): refused with how far and why, where
    the plan would have been published starting with a step of that size from the ego at t = 0."""
    out = jumped(600.0, 6.0)
    assert np.hypot(*(out.points[1, :2] - out.points[0, :2])) < 1.5   # the ego, then 0.1 s on along the plan
    unchecked = jumped(600.0, 6.0, sideways=40.0, jump=None)          # the step the reset made (no check)
    assert np.hypot(*(unchecked.points[1, :2] - unchecked.points[0, :2])) > 38.0
    with pytest.raises(RetimeError, match=r"jumped: 40\.4 m and 0\.00 rad from the frame's pose 600 ms earlier, "
                                          r"where the car could have gone at most 9\.8 m") as caught:
        jumped(600.0, 6.0, sideways=40.0)
    assert caught.value.reason == POSE_JUMP and "localization reset" in str(caught.value)


def test_the_allowance_is_the_floor_plus_speed_times_time_plus_1g_and_without_twist_the_car_stands():
    for t_ms, speed in ((100.0, 10.0), (600.0, 10.0), (1_500.0, 25.0), (600.0, -5.0), (600.0, 0.0)):
        t = t_ms / 1e3
        jumped(t_ms, 0.0, sideways=reach_m(t, speed) - 0.01, speed=speed)     # just inside: served
        with pytest.raises(RetimeError) as caught:
            jumped(t_ms, 0.0, sideways=reach_m(t, speed) + 0.01, speed=speed)
        assert caught.value.reason == POSE_JUMP
    with pytest.raises(RetimeError, match="at 0.0 m/s") as caught:   # 5 m in 0.5 s by a car that stands (no twist)
        jumped(500.0, 5.0, speed=0.0)
    assert caught.value.reason == POSE_JUMP


def test_a_yaw_jump_is_refused_and_the_yaw_is_compared_the_short_way_round():
    # 0.5 s: 0.3 rad + 3 rad/s^2 x 0.5^2 / 2 = 0.675 rad going straight; + 0.4 rad/s x 0.5 s turning
    jumped(500.0, 5.0, yaw=0.6)
    for yaw, rate in ((0.7, 0.0), (-0.7, 0.0), (math.pi, 0.0), (0.9, 0.4)):
        with pytest.raises(RetimeError, match="rad from the frame's pose") as caught:
            jumped(500.0, 5.0, yaw=yaw, yaw_rate=rate)
        assert caught.value.reason == POSE_JUMP
    jumped(500.0, 5.0, yaw=0.85, yaw_rate=-0.4)   # the yaw rate's sign does not matter
    origin = Pose2D(0.0, 0.0, math.pi - 0.05)     # across +-pi: 0.1 rad, not 2 pi - 0.1
    retime(in_map(curve_plan(), origin), origin, FRAME_NS, FRAME_NS + 20 * MS,
           CurrentPose(FRAME_NS, 0.0, 0.0, -math.pi + 0.05), 0.1, JUMP)


def test_a_non_finite_twist_or_a_negative_allowance_is_refused():
    with pytest.raises(NonFiniteError) as caught:
        jumped(500.0, 5.0, speed=np.nan)
    assert caught.value.reason == "nonfinite_output"
    with pytest.raises(NonFiniteError):
        jumped(500.0, 5.0, yaw_rate=np.inf)
    with pytest.raises(ConfigError, match="allowances must be 0 or more"):
        jumped(500.0, 5.0, jump=JumpLimits(-1.0, 0.3))


def test_a_reset_in_the_odometry_costs_only_the_frames_stamped_before_it():
    """Odometry at 50 Hz of a car at 10 m/s, reset 40 m sideways at RESET_MS; frames matched in the history
    the node keeps (StampedHistory, Pose2D.between) and re-timed 600 ms later. Stamped before the reset, or
    between its last sample and the first after it (the pose interpolated across the reset): refused. Stamped
    after it: matched to poses after it alone, served, starting at the ego with no step."""
    reset_ms, heading = 1_000, 0.4
    start = Pose2D(5.0, -3.0, heading)

    def truth(ms: float) -> tuple[float, float]:
        return ahead_of(start, 10.0 * ms / 1e3, sideways=40.0 if ms >= reset_ms else 0.0)

    history = StampedHistory(between=Pose2D.between)
    for ms in range(0, 3_000, 20):
        history.add(FRAME_NS + ms * MS, Pose2D(*truth(ms), heading))
    served = {}
    for frame_ms in (400.0, 990.0, 995.0, 1_005.0, 1_400.0, 2_000.0):
        pose, matched = history.match(FRAME_NS + int(frame_ms * MS), 50 * MS)
        assert matched
        ego_ms = frame_ms + 600.0
        ego = CurrentPose(FRAME_NS + int(ego_ms * MS), *truth(ego_ms), heading, speed=10.0)
        try:
            out = retime(in_map(curve_plan(), pose), pose, FRAME_NS + int(frame_ms * MS), ego.stamp_ns, ego, 0.1,
                         JUMP)
        except RetimeError as exc:
            assert exc.reason == POSE_JUMP
            continue
        served[frame_ms] = float(np.hypot(*(out.points[1, :2] - out.points[0, :2])))
    # 1 005 ms: after the reset (1 000 ms) but interpolated between its samples at 1 000 and 1 020 ms: both after
    assert sorted(served) == [1_005.0, 1_400.0, 2_000.0]
    assert max(served.values()) < 1.5, served
