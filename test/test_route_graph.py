"""The route into the real prefix node over DDS: a real autoware_planning_msgs/LaneletRoute (transient local) and
odometry poses along our intersection map (hybrid_vla_ros/route/example_map.py) -> each frame's navigation and
instruction, and the prefix's `navigation` diagnostic."""

import math

import pytest

from hybrid_vla_ros.route.example_map import intersection_route, write_intersection_map

pytest.importorskip("autoware_planning_msgs.msg", reason="the real Autoware messages (scripts/setup.sh builds them)")


def route_msg(route):
    """Route (plain data) -> a real LaneletRoute, as Autoware's mission planner fills it."""
    from hybrid_vla_ros.ros.inputs.route_input import route_to_msg
    return route_to_msg(route)


def test_a_lanelet_route_message_becomes_the_route_s_plain_data(tmp_path):
    from hybrid_vla_ros.ros.inputs.route_input import route_from_msg
    ids = write_intersection_map(tmp_path / "m.osm")
    route = intersection_route(ids, "left")
    back = route_from_msg(route_msg(route))
    assert back.segments == route.segments and back.preferred[2] == ids["TL"]
    assert (back.goal.x, back.goal.y, back.goal.yaw) == pytest.approx((route.goal.x, route.goal.y, route.goal.yaw))


def odometry(stamp_ns, x, y, yaw):
    from nav_msgs.msg import Odometry
    from hybrid_vla_ros.ros import messages
    msg = Odometry()
    msg.header.frame_id = "map"
    messages.ns_to_stamp(stamp_ns, msg.header.stamp)
    msg.pose.pose.position.x, msg.pose.pose.position.y = float(x), float(y)
    msg.pose.pose.orientation.z, msg.pose.pose.orientation.w = math.sin(yaw / 2), math.cos(yaw / 2)
    return msg


def navigation_diagnostic(h, statuses):
    for status in reversed(statuses):
        if status.name == "hybrid_vla_prefix: navigation":
            return ord(status.level), {kv.key: kv.value for kv in status.values}   # level: one byte
    return None


@pytest.mark.slow
def test_the_prefix_s_frames_follow_the_route_it_hears(domain, tmp_path):
    from autoware_planning_msgs.msg import LaneletRoute
    from diagnostic_msgs.msg import DiagnosticArray
    from nav_msgs.msg import Odometry
    from hybrid_vla_ros.ros.inputs.route_input import LATCHED
    from hybrid_vla_ros.ros.topics import KINEMATIC_TOPIC, REMAPS
    from ros_harness import Harness, wait_until
    ids = write_intersection_map(tmp_path / "intersection.osm")
    h = Harness({"hybrid_vla_prefix": {"map_path": str(tmp_path / "intersection.osm"), "route_lookahead_m": 10.0}})
    try:
        served, statuses = h.served_frames(), []
        h.node.create_subscription(DiagnosticArray, "/diagnostics", lambda m: statuses.extend(m.status), 50)
        odom = h.node.create_publisher(Odometry, KINEMATIC_TOPIC, 10)
        route_topic = REMAPS["hybrid_vla_prefix"].get("~/input/route", "/hybrid_vla_prefix/input/route")
        routes = h.node.create_publisher(LaneletRoute, route_topic, LATCHED)
        assert wait_until(lambda: (navigation_diagnostic(h, statuses) or (0, {}))[0] == 1, h.spin, 10), \
            "a map without a route: the navigation diagnostic WARNs"
        assert h.prefix.route.no_route == 0
        routes.publish(route_msg(intersection_route(ids, "left")))  # once, latched
        assert wait_until(lambda: h.prefix.route.routes_received == 1, h.spin, 10)

        def frame_at(seq, x, y, yaw):
            stamp_ns = h.frame(seq).stamp_ns
            odom.publish(odometry(stamp_ns, x, y, yaw))
            assert wait_until(lambda: h.prefix.route.poses.gap_ns(stamp_ns) == 0, h.spin, 10)
            h.send_frame(seq)
            return served[-1]

        approach = frame_at(0, -40.0, -1.75, 0.0)
        assert approach.instruction == "turn left in 40 m" and approach.navigation.command == "turn left"
        assert approach.navigation.distance_m == pytest.approx(40.0, abs=0.01)
        assert approach.navigation.target_ego == pytest.approx((10.0, 0.0), abs=1e-6)
        beyond = frame_at(1, 11.75, 30.0, math.pi / 2)               # past the junction, 60 m from the goal
        assert beyond.instruction == "follow lane in 60 m" and beyond.navigation.goal_ego == pytest.approx((60.0, 0.0))
        routes.publish(route_msg(intersection_route(ids, "right")))   # a new route replaces it
        assert wait_until(lambda: h.prefix.route.routes_received == 2, h.spin, 10)
        assert frame_at(2, -40.0, -1.75, 0.0).instruction == "turn right in 40 m"
        off = frame_at(3, -40.0, 40.0, 0.0)                           # 40 m beside the road: the parameter's
        assert off.navigation.source == "default" and off.instruction == h.prefix.params["instruction"]
        assert h.prefix.route.off_route == 1 and h.prefix.route.counts["route"] == 3
        statuses.clear()
        assert wait_until(lambda: navigation_diagnostic(h, statuses) is not None, h.spin, 5)
        level, values = navigation_diagnostic(h, statuses)
        assert (level, values["off_route"], values["route"], values["routes_received"]) == (1, "1", "3", "2")
    finally:
        h.close()


@pytest.mark.slow
def test_without_a_map_frames_keep_the_instruction_parameter_and_are_counted(domain):
    from ros_harness import Harness
    h = Harness()
    try:
        served = h.served_frames()
        h.send_frame(0)
        assert served[-1].instruction == h.prefix.params["instruction"] and served[-1].navigation.source == "default"
        assert h.prefix.route.counts["no_map"] == 1 and h.prefix.route.check()[1] == 0   # OK: navigation not asked
    finally:
        h.close()


def test_without_the_autoware_messages_there_is_no_route_input_and_the_log_says_so_once(monkeypatch):
    import sys
    from types import SimpleNamespace
    from hybrid_vla_ros.ros.inputs.route_input import RouteInput
    monkeypatch.setitem(sys.modules, "autoware_planning_msgs.msg", None)   # import fails as where it is absent
    subscribed, said = [], []
    node = SimpleNamespace(configured_subscription=lambda *args: subscribed.append(args[1]),
                           get_logger=lambda: SimpleNamespace(info=said.append))
    params = {"map_path": "", "map_origin_lat_deg": 0.0, "map_origin_lon_deg": 0.0, "route_lookahead_m": 10.0,
              "sync_skew_ms": 20.0, "instruction": "drive"}
    route = RouteInput(node, params)
    assert subscribed == [] and len(said) == 1 and "autoware_planning_msgs" in said[0]
    assert route.navigation(None).source == "default" and route.counts["no_map"] == 1
    assert route.check()[1] == 0
