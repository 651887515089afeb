"""Issue 51, item 3: Alpamayo 1.5's route as its authors' code gives it, from the live LaneletRoute. The route text
has the format of the authors' navigation samples (NVlabs/alpamayo1.5 @ f42e594 notebooks/nav_demo_samples.json:
"Turn left in 11m" for 11.2 m, "Turn left in 4m" for 3.8 m); it goes into the prompt whenever a turn is ahead (their
helper.create_message adds the route span whenever nav_text is given), and guidance runs only for a frame that has
a route span. Over DDS: a real autoware_planning_msgs/LaneletRoute and odometry along our intersection map into the
prefix of a tiny 1.5 release with a tokenizer; the trajectories equal run_reference on the prompt with that text."""

import math

import numpy as np
import pytest

from hybrid_vla_ros.engine.expert_serve.release_prompt import ReleasePrompt
from hybrid_vla_ros.model.plugins.alpamayo import tiny
from hybrid_vla_ros.route import release_route_text


@pytest.mark.parametrize("command, distance_m, text", [
    ("turn left", 11.2, "Turn left in 11m"), ("turn left", 3.8, "Turn left in 4m"),
    ("turn right", 29.8, "Turn right in 30m"), ("turn left", 594.0, "Turn left in 594m"),
    ("turn right", 14.5, "Turn right in 15m"),                              # half up
    ("change lane left", 20.0, None), ("go straight", 60.0, None), ("turn left", float("nan"), None),
    ("turn left", -1.0, None),
])
def test_the_route_text_has_the_format_of_the_authors_navigation_samples(command, distance_m, text):
    assert release_route_text(command, distance_m) == text


def test_the_route_text_names_the_next_turn_at_any_distance_past_straight_intersections(tmp_path):
    from hybrid_vla_ros.route import load_map, next_turn
    from hybrid_vla_ros.route.example_map import ORIGIN, intersection_route, write_intersection_map
    from hybrid_vla_ros.types import Pose2D
    ids = write_intersection_map(tmp_path / "m.osm")
    lane_map = load_map(str(tmp_path / "m.osm"), ORIGIN)
    left = intersection_route(ids, "left")
    command, distance = next_turn(lane_map, left, Pose2D(-90.0, -1.75, 0.0))      # beyond route/navigate's horizon
    assert command == "turn left" and distance == pytest.approx(90.0, abs=0.01)
    assert release_route_text(command, distance) == "Turn left in 90m"
    assert next_turn(lane_map, intersection_route(ids, "straight"), Pose2D(-40.0, -1.75, 0.0)) is None
    assert next_turn(lane_map, left, Pose2D(11.75, 30.0, math.pi / 2)) is None     # past the turn
    assert next_turn(lane_map, left, Pose2D(-40.0, 40.0, 0.0)) is None              # off the route
    assert next_turn(None, left, Pose2D(-40.0, -1.75, 0.0)) is None                 # no map


def test_a_frame_without_a_route_span_runs_unguided_and_one_with_it_guided():
    from hybrid_vla_ros.engine.expert_serve.prefix_server import AlpamayoPrefixServer
    model = tiny.build_preset("tiny-alpamayo-1.5")
    config = model.config
    prompt = ReleasePrompt(tokenizer=None)
    assert prompt.route_for(config, "Turn left in 11m", True) == "Turn left in 11m"
    assert prompt.route_for(config, "Turn left in 11m", False) == "Turn left in 11m"   # the route, unguided
    assert prompt.route_for(config, None, True) is False
    server = AlpamayoPrefixServer(model, 2, tiny_sampling(), tiny_flow(2.0), guidance=True)
    assert server.settings_for(5, routed=True).guidance and not server.settings_for(5, routed=False).guidance
    from hybrid_vla_ros.engine.expert_serve.frame_inputs import PromptText, frame_inputs, still_history
    images = [np.zeros((32, 32, 3), np.uint8)] * 16
    text = PromptText(route=(40, 41, 42))
    assert server.routed(frame_inputs(model, images, still_history(), text, route=True))      # the span is in it
    assert not server.routed(frame_inputs(model, images, still_history(), text, route=False))
    r1 = tiny.build_preset("tiny-alpamayo-r1")
    assert ReleasePrompt(tokenizer=None).route_for(r1.config, "Turn left in 11m", False) is False   # no route tokens


def tiny_sampling():
    from hybrid_vla_ros.model.plugins.alpamayo import Sampling
    return Sampling(0.6, 0.98, 4)


def tiny_flow(weight):
    from hybrid_vla_ros.model.plugins.alpamayo import FlowSettings
    return FlowSettings(2, weight)


APPROACH_X0, SPEED = -60.2, 5.0     # along the approach lane R (y = -1.75, heading east) towards the junction at x = 0


def approach_odometry(stamp_ns, origin_ns=0):
    """The car on the intersection map's approach (route/example_map.py), 5 m/s east."""
    from nav_msgs.msg import Odometry
    from hybrid_vla_ros.ros import messages
    msg = Odometry()
    msg.header.frame_id = "map"
    messages.ns_to_stamp(stamp_ns, msg.header.stamp)
    msg.pose.pose.position.x = APPROACH_X0 + SPEED * (stamp_ns - origin_ns) / 1e9
    msg.pose.pose.position.y, msg.pose.pose.orientation.w = -1.75, 1.0
    msg.twist.twist.linear.x = SPEED
    return msg


def release_with_tokenizer(folder):
    from test_alpamayo_tokenizer import preset_release_with_tokenizer
    return preset_release_with_tokenizer(folder, "tiny-alpamayo-1.5", "alpamayo1_5")[0]


@pytest.mark.slow
def test_1_5_gets_the_live_routes_text_in_its_prompt_and_is_guided_by_it(tmp_path, domain):
    pytest.importorskip("autoware_planning_msgs.msg", reason="the real Autoware messages (scripts/setup.sh builds them)")
    import rclpy
    from autoware_planning_msgs.msg import LaneletRoute
    from diagnostic_msgs.msg import DiagnosticStatus
    from test_alpamayo_graph import BASE_NS, GUIDANCE, Driver, camera_sets, check, expected, graph_params
    from test_route_graph import route_msg
    from hybrid_vla_ros.ros.inputs.route_input import LATCHED
    from hybrid_vla_ros.ros.launch_support.bringup import InProcessGraph
    from hybrid_vla_ros.ros.topics import PREFIX_INFO_TOPIC, REMAPS
    from hybrid_vla_ros.route.example_map import intersection_route, write_intersection_map
    from ros_harness import wait_until
    ids = write_intersection_map(tmp_path / "intersection.osm")
    params = graph_params(release_with_tokenizer(tmp_path / "r15"), True)
    params["hybrid_vla_prefix"]["map_path"] = str(tmp_path / "intersection.osm")
    context = rclpy.Context()
    rclpy.init(context=context)
    graph = InProcessGraph(params, context=context, nodes=("hybrid_vla_prefix", "hybrid_vla_suffix"))
    driver = Driver(context, graph.executor, graph.spin_once)
    driver.odometry = approach_odometry
    frame_infos = []
    driver.node.create_subscription(DiagnosticStatus, PREFIX_INFO_TOPIC,
                                    lambda m: frame_infos.append({kv.key: kv.value for kv in m.values}), 50)
    topic = REMAPS["hybrid_vla_prefix"].get("~/input/route", "/hybrid_vla_prefix/input/route")
    routes = driver.node.create_publisher(LaneletRoute, topic, LATCHED)
    try:
        assert not graph.failed, graph.failed
        prefix = graph.nodes["hybrid_vla_prefix"].serving
        routes.publish(route_msg(intersection_route(ids, "left")))   # once, latched
        assert wait_until(lambda: prefix.route.routes_received == 1, driver.spin, 10)
        sets = camera_sets(3)
        # frames at 3.0, 3.1, 3.2 s: x = -45.2, -44.7, -44.2, the left turn's lanelet starts at x = 0
        texts = ["Turn left in 45m", "Turn left in 45m", "Turn left in 44m"]
        paths, infos = driver.drive(sets, timeout_s=60)
        model = graph.nodes["hybrid_vla_suffix"].serving.model
        check(paths, infos, expected(model, sets, True, routes=texts, odometry_at=approach_odometry))
        assert wait_until(lambda: len(frame_infos) >= 3, driver.spin, 10)
        assert [(i["route"], i["guided"]) for i in frame_infos] == [(t, "true") for t in texts]
        assert GUIDANCE != 1.0 and math.isclose(float(infos[0]["guidance_weight"]), GUIDANCE)
        # without the route span the same frames give other plans: the text reached the model
        unrouted = expected(model, sets, True, routes=[False] * 3, odometry_at=approach_odometry)
        assert not np.array_equal(unrouted[0].xyz[:, :2].double().numpy(), np.array(
            [[p.pose.position.x, p.pose.position.y] for p in paths[0].poses]))
    finally:
        driver.close()
        graph.shutdown()
        rclpy.shutdown(context=context)
