"""A frame's kinematic state must be recent (docs/RELIABILITY.md): a frame whose nearest odometry sample lies
further from its stamp than a few of the odometry's own measured periods, or that has none while odometry is
expected (use_kinematic_state), is refused and counted (or, with stale_kinematic_state serve_flagged, served and
flagged); the prefix's `kinematic_state` diagnostic is ERROR while it lasts and OK again once odometry returns."""

import numpy as np
import pytest

from hybrid_vla_ros.types import EgoState

from ros_harness import Harness, wait_until

MS = 1_000_000
S = 1_000_000_000
OK, ERROR = 0, 2


# ---- the bound, ROS-free -------------------------------------------------------------------------------
@pytest.mark.parametrize("period_ms, bound_ms", [(20, 100), (100, 500), (1000, 1000)])
def test_the_freshness_bound_is_five_measured_odometry_periods_within_a_floor_and_a_ceiling(period_ms, bound_ms):
    from hybrid_vla_ros.engine.pipeline.camera_sync import StampedHistory, StateFreshness
    history = StampedHistory()
    freshness = StateFreshness(history, "kinematic state")
    assert freshness.bound_s() == pytest.approx(1.0)          # nothing measured yet: the ceiling
    for k in range(20):
        history.add(k * period_ms * MS, k)
    assert freshness.bound_s() == pytest.approx(bound_ms / 1e3)
    newest = 19 * period_ms * MS
    assert freshness.judge(newest + bound_ms * MS - MS).verdict == "fresh"
    assert freshness.judge(newest + bound_ms * MS + MS).verdict == "stale"


def test_no_sample_is_missing_and_the_failure_lasts_until_a_sample_fresh_for_that_frame_comes():
    from hybrid_vla_ros.engine.pipeline.camera_sync import StampedHistory, StateFreshness
    history = StampedHistory()
    freshness = StateFreshness(history, "kinematic state")
    judged = freshness.judge(5 * S)
    assert judged.verdict == "missing" and "no kinematic state" in judged.why
    assert freshness.failing()
    history.add(2 * S, 0)              # 3 s before the frame, beyond the bound (1 s): still failing
    assert freshness.failing()
    history.add(5 * S + 10 * MS, 0)    # odometry is back
    assert not freshness.failing()


# ---- the prefix node over DDS ----------------------------------------------------------------------------
def odometry(stamp_ns, speed_mps):
    from nav_msgs.msg import Odometry
    from hybrid_vla_ros.ros import messages
    msg = Odometry()
    messages.ns_to_stamp(stamp_ns, msg.header.stamp)
    msg.twist.twist.linear.x = float(speed_mps)
    return msg


def odometry_publisher(h):
    from nav_msgs.msg import Odometry
    pub = h.node.create_publisher(Odometry, "/localization/kinematic_state", 10)
    assert wait_until(lambda: pub.get_subscription_count() > 0, h.spin, 10)
    return pub


def lost_frames(h) -> list:
    """(reason, stamp_ns) of each frame the prefix reports lost on ~/debug/dropped_frames."""
    from diagnostic_msgs.msg import DiagnosticStatus
    lost = []

    def heard(msg):
        values = {kv.key: kv.value for kv in msg.values}
        lost.append((values["reason"], int(values["stamp_ns"])))

    h.node.create_subscription(DiagnosticStatus, "/hybrid_vla_prefix/debug/dropped_frames", heard, 50)
    assert wait_until(lambda: h.prefix.lost_pub.get_subscription_count() > 0, h.spin, 10)
    return lost


def kinematic_check(h):
    """-> (level, values) of the prefix's `kinematic_state` diagnostic."""
    found = {name: (level, values) for name, level, _text, values in h.prefix._extra_checks()}
    return found["kinematic_state"]


def expected_xy(h, seq, speed_mps):
    from hybrid_vla_ros.engine.stages import reference_forward
    from hybrid_vla_ros.model.load import load_vla
    frame = h.frame(seq)
    frame.ego = EgoState(speed_mps=speed_mps)
    return reference_forward(load_vla(preset="tiny"), frame)[1].points[:, :2]


def path_xy(path):
    return np.array([[p.pose.position.x, p.pose.position.y] for p in path.poses])


@pytest.mark.slow
def test_a_frame_an_hour_after_the_last_odometry_is_refused_and_errors_until_odometry_returns(domain):
    """Before: the frame got the hour-old 20 m/s, its trajectory went out, only `kinematic_state_late` counted."""
    h = Harness({"hybrid_vla_prefix": {"use_kinematic_state": True}})
    try:
        lost, pub = lost_frames(h), odometry_publisher(h)
        frame = h.frame(0)
        for k in range(5):   # 10 Hz odometry up to the frame: bound 5 x 100 ms
            pub.publish(odometry(frame.stamp_ns - (4 - k) * 100 * MS, 20.0))
        h.settle(0.3)
        h.send_frame(0)
        hour_later = frame.stamp_ns + 3600 * S
        h.publish_images(frame.images, hour_later)
        assert wait_until(lambda: h.prefix.health.rejected["kinematic_state_stale"] == 1, h.spin, 5), \
            (f"{len(h.infos)} trajectories", h.prefix.health.rejected)
        assert wait_until(lambda: ("kinematic_state_stale", hour_later) in lost, h.spin, 5)
        h.settle(0.3)
        assert len(h.infos) == 1   # no trajectory for it
        assert h.prefix.health.rejected["kinematic_state_late"] == 0
        level, values = kinematic_check(h)
        assert level == ERROR and values["bound_ms"] == "500" and values["refused.stale"] == "1"
        pub.publish(odometry(hour_later + 100 * MS, 20.0))   # odometry is back: OK before the next frame
        assert wait_until(lambda: kinematic_check(h)[0] == OK, h.spin, 5)
        h.publish_images(frame.images, hour_later + 100 * MS)
        assert wait_until(lambda: len(h.infos) == 2, h.spin, 10)
        assert h.prefix.health.rejected["kinematic_state_stale"] == 1
    finally:
        h.close()


@pytest.mark.slow
def test_with_odometry_expected_and_none_received_a_frame_is_refused_or_served_flagged(domain):
    """Before: served with EgoState() (0 m/s). Now refused as kinematic_state_missing; with stale_kinematic_state
    serve_flagged (a run-time parameter) served, counted as flagged, diagnostics ERROR all the same."""
    from rclpy.parameter import Parameter
    h = Harness({"hybrid_vla_prefix": {"use_kinematic_state": True}})
    try:
        lost = lost_frames(h)
        first = h.send_frame(0, wait=False)
        assert wait_until(lambda: ("kinematic_state_missing", first.stamp_ns) in lost, h.spin, 5), \
            (f"{len(h.infos)} trajectories", h.prefix.health.rejected)
        h.settle(0.3)
        assert len(h.infos) == 0 and h.prefix.health.rejected["kinematic_state_missing"] == 1
        assert kinematic_check(h)[0] == ERROR
        result = h.prefix.set_parameters([Parameter("stale_kinematic_state", value="serve_flagged")])
        assert result[0].successful
        h.send_frame(1)
        level, values = kinematic_check(h)
        assert level == ERROR and values["served_flagged.missing"] == "1" and values["refused.missing"] == "1"
        assert wait_until(lambda: len(h.paths) == 1, h.spin, 5)
        np.testing.assert_allclose(path_xy(h.paths[0]), expected_xy(h, 1, 0.0), atol=1e-5)
    finally:
        h.close()


@pytest.mark.slow
def test_after_a_bag_loop_the_new_timelines_odometry_is_used(domain):
    """A bag played in a loop: its first odometry arrives before its first frame. Before: the prefix forgot that
    odometry when it saw the frame's stamp go back, and gave the frame 0 m/s."""
    h = Harness({"hybrid_vla_prefix": {"use_kinematic_state": True}})
    try:
        pub = odometry_publisher(h)
        start = h.frame(0).stamp_ns
        for served, (stamp, speed) in enumerate(((start, 5.0), (start + 3 * S, 6.0)), start=1):
            pub.publish(odometry(stamp, speed))
            h.settle(0.2)
            h.publish_images(h.frame(0).images, stamp)
            assert wait_until(lambda: len(h.paths) == served, h.spin, 10)
        pub.publish(odometry(start, 7.0))    # the loop: time goes back 3 s
        h.settle(0.2)
        h.publish_images(h.frame(0).images, start)
        assert wait_until(lambda: len(h.paths) == 3, h.spin, 10), h.prefix.health.rejected
        np.testing.assert_allclose(path_xy(h.paths[2]), expected_xy(h, 0, 7.0), atol=1e-5)
    finally:
        h.close()
