"""The graph's publishers and subscriptions carry no rclpy default event handlers (each a waitable the
SingleThreadedExecutor re-adds, in Python, at every wake-up: issue 40), and what those handlers reported is
still reported: a peer whose type differs or whose QoS cannot match is named, with the reason, in the stage's
/diagnostics ("<node>: endpoints", WARN) and the log; a compatible peer is not. Each endpoint's matched peers
are in the values (`<kind>:<topic>`). Real nodes over DDS."""

import pytest
from rclpy.qos import QoSProfile

from ros_harness import Harness, wait_until

pytestmark = pytest.mark.usefixtures("domain")


@pytest.fixture
def harness():
    h = Harness()
    try:
        yield h
    finally:
        h.close()


def test_the_graphs_nodes_have_no_event_handler_waitables(harness):
    graph = harness.graph.nodes
    assert {"hybrid_vla_prefix", "hybrid_vla_suffix"} <= set(graph)
    for name, node in graph.items():   # left: the two of rclpy's own /parameter_events publisher
        assert len(list(node.waitables)) <= 2, (name, list(node.waitables))
    assert len(harness.prefix.endpoints.endpoints) >= 4 and len(harness.suffix.endpoints.endpoints) >= 4


def endpoint_status(harness, node: str):
    check, level, message, values = harness.graph.nodes[node].endpoints.check()
    assert check == "endpoints"
    return level, message, values


def test_an_incompatible_peer_is_named_with_its_reason_and_a_compatible_one_is_not(harness):
    from sensor_msgs.msg import Image
    from std_msgs.msg import Int32
    import rclpy
    from rclpy.node import Node
    camera = "/test/cam0/image"
    level, _, values = endpoint_status(harness, "hybrid_vla_prefix")
    assert level == 0 and values[f"subscription:{camera}"] == 1   # the harness's own publisher matches
    also_right = harness.node.create_publisher(Image, camera, QoSProfile(depth=5))   # compatible: not named
    other = rclpy.Context()   # another participant: DDS refuses a second type for a topic within one
    rclpy.init(context=other)
    stranger = Node("stranger", context=other)
    wrong_type = stranger.create_publisher(Int32, camera, 10)
    try:
        assert wait_until(lambda: harness.node.count_publishers(camera) >= 3, harness.spin, 10)
        assert wait_until(lambda: "/stranger" in endpoint_status(harness, "hybrid_vla_prefix")[1], harness.spin, 10)
        level, message, values = endpoint_status(harness, "hybrid_vla_prefix")
        assert f"topic '{camera}': publisher of /stranger has type std_msgs/msg/Int32" in message, message
        assert "sensor_msgs/msg/Image: no messages pass" in message
        assert values["incompatible_peers"] == 1 and also_right.get_subscription_count() == 1
        assert values[f"subscription:{camera}"] == 2   # the harness's camera and also_right: matched; not the stranger
        stranger.destroy_publisher(wrong_type)
        assert wait_until(lambda: endpoint_status(harness, "hybrid_vla_prefix")[0] == 0, harness.spin, 10)
    finally:
        stranger.destroy_node()
        rclpy.shutdown(context=other)


def test_a_subscription_requesting_more_than_offered_is_reported_by_the_publisher(harness):
    from diagnostic_msgs.msg import DiagnosticArray, DiagnosticStatus
    from rclpy.qos import DurabilityPolicy
    topic = "/hybrid_vla_suffix/debug/trajectory_info"   # offered volatile: a transient-local reader cannot match
    seen = {}
    harness.node.create_subscription(DiagnosticArray, "/diagnostics",
                                     lambda m: seen.update({s.name: s for s in m.status}), 20)
    harness.node.create_subscription(DiagnosticStatus, topic, lambda m: None,
                                     QoSProfile(depth=1, durability=DurabilityPolicy.TRANSIENT_LOCAL))
    assert wait_until(lambda: "hybrid_vla_suffix: endpoints" in seen and
                      "/test_driver" in seen["hybrid_vla_suffix: endpoints"].message, harness.spin, 10)
    assert seen["hybrid_vla_suffix: endpoints"].level == DiagnosticStatus.WARN
    message = seen["hybrid_vla_suffix: endpoints"].message
    assert f"topic '{topic}': subscription of /test_driver has incompatible QoS (Volatile publisher and " \
        "transient local subscription): no messages pass" in message, message
    harness.send_frame(0)   # and the graph serves on
    assert seen["hybrid_vla_prefix: endpoints"].level == DiagnosticStatus.OK


def test_a_replay_waits_for_the_graphs_own_report_that_its_readers_matched(harness, tmp_path):
    """The replayer's writers count the prefix's readers first; it waits for the prefix's `endpoints` report (its
    readers count the replayer's writers), and for REPORT_WAIT_S for a listed reader that reports nothing."""
    import time
    from rclpy.node import Node
    from rclpy.qos import qos_profile_sensor_data
    from sensor_msgs.msg import Image
    from ros_harness import CAMERAS
    from hybrid_vla_ros.ros.bags.replay import REPORT_WAIT_S, Replayer
    from hybrid_vla_ros.ros.demo import write_sample_drive
    bag = write_sample_drive(tmp_path / "drive", harness.spec, CAMERAS, frames=2, compressed=False)
    player = Node("player", context=harness.context)
    harness.graph.executor.add_node(player)
    harness.node.create_subscription(Image, CAMERAS[0], lambda m: None, qos_profile_sensor_data)   # another's
    try:
        replayer = Replayer(player, bag)
        start = time.monotonic()
        assert replayer.wait_for_subscribers(20.0, harness.spin)
        assert time.monotonic() - start >= REPORT_WAIT_S                 # the silent reader given its time
        assert replayer.reports.matched("hybrid_vla_prefix", "subscription", *CAMERAS), replayer.reports.values
        assert not replayer.reports.matched("hybrid_vla_prefix", "subscription", "/not/read")
    finally:
        harness.graph.executor.remove_node(player)
        player.destroy_node()


def test_a_replay_waits_until_the_recorders_reader_matched_its_writer(context, tmp_path):
    """`hybrid-vla record` reports its readers' matched writers as the graph's nodes do, so a replay recorded back
    waits for it rather than REPORT_WAIT_S (a best-effort image sent to a reader listed but not yet matched is
    lost to the bag: a recording one camera message short, issue 50)."""
    import time
    from rclpy.executors import SingleThreadedExecutor
    from rclpy.node import Node
    from ros_harness import CAMERAS
    from hybrid_vla_ros.model.presets import get_preset
    from hybrid_vla_ros.ros.bags.record import Recorder
    from hybrid_vla_ros.ros.bags.replay import REPORT_WAIT_S, Replayer
    from hybrid_vla_ros.ros.demo import write_sample_drive
    bag = write_sample_drive(tmp_path / "drive", get_preset("tiny"), CAMERAS, frames=2, compressed=False)
    player, recording = Node("player", context=context), Node("hybrid_vla_record", context=context)
    executor = SingleThreadedExecutor(context=context)
    for node in (player, recording):
        executor.add_node(node)
    recorder = Recorder(recording, tmp_path / "rec", {t: None for t in CAMERAS})
    try:
        replayer = Replayer(player, bag)
        start = time.monotonic()
        assert replayer.wait_for_subscribers(20.0, lambda t: executor.spin_once(timeout_sec=t))
        assert time.monotonic() - start < REPORT_WAIT_S, "waited for a report that never came"
        assert replayer.reports.matched("hybrid_vla_record", "subscription", *CAMERAS), replayer.reports.values
    finally:
        recorder.close()
        executor.shutdown()
        player.destroy_node()
        recording.destroy_node()
