"""~/input/acceleration (geometry_msgs/AccelWithCovarianceStamped) into the real prefix node over DDS: each
frame's EgoState.accel_mps2 is the sample of its stamp (interpolated between two within the camera skew), 0
and counted when none lies within MATCH_S, and the `acceleration` diagnostic says which."""

import pytest

from hybrid_vla_ros.types import EgoState

pytestmark = pytest.mark.slow


def accel_msg(stamp_ns, ax):
    from geometry_msgs.msg import AccelWithCovarianceStamped
    from hybrid_vla_ros.ros import messages
    msg = AccelWithCovarianceStamped()
    msg.header.frame_id = "base_link"
    messages.ns_to_stamp(stamp_ns, msg.header.stamp)
    msg.accel.accel.linear.x = float(ax)
    return msg


def test_each_frame_gets_the_acceleration_of_its_stamp_and_a_missing_one_is_counted(domain):
    from geometry_msgs.msg import AccelWithCovarianceStamped
    from hybrid_vla_ros.ros.topics import REMAPS
    from ros_harness import Harness, wait_until
    h = Harness()
    try:
        served = h.served_frames()
        assert h.prefix.accel.check()[:2] == ("acceleration", 0)          # none received yet: said, OK
        pub = h.node.create_publisher(AccelWithCovarianceStamped, REMAPS["hybrid_vla_prefix"]["~/input/acceleration"], 50)
        stamp = h.frame(0).stamp_ns
        for dt_ms, ax in ((-10, 1.0), (10, 2.0)):                          # around frame 0: interpolated, 1.5
            pub.publish(accel_msg(stamp + dt_ms * 1_000_000, ax))
        assert wait_until(lambda: h.prefix.accel.received == 2, h.spin, 10)
        h.send_frame(0)
        assert served[-1].ego.accel_mps2 == pytest.approx(1.5)
        assert served[-1].ego.speed_mps == EgoState().speed_mps            # the rest of the ego state as before
        far = h.frame(30).stamp_ns                                         # 3 s later: no sample within 0.5 s
        h.send_frame(30)
        assert wait_until(lambda: served[-1].stamp_ns == far, h.spin, 10)
        assert served[-1].ego.accel_mps2 == 0.0
        assert (h.prefix.accel.matched, h.prefix.accel.missing) == (1, 1)
        name, level, message, values = h.prefix.accel.check()
        assert level == 1 and values["acceleration_missing"] == "1", message
    finally:
        h.close()


def test_interpolation_keeps_the_acceleration_between_two_states():
    a, b = EgoState(10.0, 0.1, -1.0), EgoState(12.0, 0.3, 1.0)
    mid = EgoState.between(a, b, 0.25)
    assert (mid.speed_mps, mid.yaw_rate_rps, mid.accel_mps2) == pytest.approx((10.5, 0.15, -0.5))
