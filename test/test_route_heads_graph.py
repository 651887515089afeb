"""A head that needs the route, in the ROS graph (issue 38: "a model whose head needs the route gets a different
plan when the route's command changes"): tiny-orion (ORION's command-chosen planner modes) behind the real prefix
and suffix nodes, a real LaneletRoute, odometry and the cameras' geometry in over DDS; the boundary state carries the frame's context
through the codec to the suffix, whose head picks the mode the route's command names."""

import numpy as np
import pytest

from hybrid_vla_ros.route.example_map import intersection_route, write_intersection_map

pytest.importorskip("autoware_planning_msgs.msg", reason="the real Autoware messages (scripts/setup.sh builds them)")

PRESET = "tiny-orion"


@pytest.mark.slow
def test_the_route_s_command_reaches_the_suffix_head_and_picks_its_plan(domain, tmp_path):
    from autoware_planning_msgs.msg import LaneletRoute
    from nav_msgs.msg import Odometry
    from hybrid_vla_ros.engine.stages import reference_forward
    from hybrid_vla_ros.ros.inputs.route_input import LATCHED
    from hybrid_vla_ros.ros.topics import KINEMATIC_TOPIC, REMAPS
    from rclpy.qos import DurabilityPolicy, QoSProfile
    from sensor_msgs.msg import CameraInfo
    from tf2_msgs.msg import TFMessage
    from ros_harness import CAMERAS, Harness, wait_until
    from test_context_graph import rig_messages
    from test_route_graph import odometry, route_msg
    ids = write_intersection_map(tmp_path / "intersection.osm")
    model_params = {"model.preset": PRESET}
    h = Harness({"hybrid_vla_prefix": {**model_params, "map_path": str(tmp_path / "intersection.osm"),
                                       "route_lookahead_m": 10.0, "boundary_transport": "inline"},
                 "hybrid_vla_suffix": model_params, "hybrid_vla_scheduler": model_params})
    try:
        served = h.served_frames()
        # ORION's shape needs its cameras' geometry too: CameraInfo per camera and the latched /tf_static
        infos, tf = rig_messages(h.spec.image_width, h.spec.image_height)
        info_pubs = [h.node.create_publisher(CameraInfo, c.rsplit("/", 1)[0] + "/camera_info", 10) for c in CAMERAS]
        h.node.create_publisher(TFMessage, "/tf_static",
                                QoSProfile(depth=1, durability=DurabilityPolicy.TRANSIENT_LOCAL)).publish(tf)

        def geometry_known():
            for pub, info in zip(info_pubs, infos):
                pub.publish(info)
            return all(c is not None for c in h.prefix.context_input.cameras())
        assert wait_until(geometry_known, h.spin, 20)
        odom = h.node.create_publisher(Odometry, KINEMATIC_TOPIC, 10)
        route_topic = REMAPS["hybrid_vla_prefix"].get("~/input/route", "/hybrid_vla_prefix/input/route")
        routes = h.node.create_publisher(LaneletRoute, route_topic, LATCHED)

        def frame_at(seq, x, y, yaw, wait=True):
            stamp_ns = h.frame(seq).stamp_ns
            odom.publish(odometry(stamp_ns, x, y, yaw))
            assert wait_until(lambda: h.prefix.route.poses.gap_ns(stamp_ns) == 0, h.spin, 10)
            h.send_frame(seq, wait=wait)
            return h.infos[-1] if wait else None

        # No route yet: the model declares it needs navigation, so the frame is refused and counted.
        frame_at(0, -40.0, -1.75, 0.0, wait=False)
        assert wait_until(lambda: h.prefix.context_input.counts["context_missing_navigation"] == 1, h.spin, 10)
        h.settle(0.3)
        assert not h.infos
        for seq, turn in ((1, "left"), (2, "right")):
            routes.publish(route_msg(intersection_route(ids, turn)))   # latched; a new route replaces the old
            assert wait_until(lambda: h.prefix.route.routes_received == seq, h.spin, 10)
            info = frame_at(seq, -40.0, -1.75, 0.0)                    # 40 m before the junction
            assert info["head_mode_command"] == f"turn {turn}", info
            assert served[-1].context.navigation.command == f"turn {turn}"
        # The same frame under the other command: another plan (the head's mode, not the images, differs).
        model, frame = h.prefix.model, served[-1]
        model.reset_memory("test")
        _, right = reference_forward(model, frame)
        frame.context.navigation.command = "turn left"
        model.reset_memory("test")
        _, left = reference_forward(model, frame)
        assert (right.extras["mode_command"], left.extras["mode_command"]) == ("turn right", "turn left")
        assert not np.allclose(left.points, right.points)
    finally:
        h.close()
