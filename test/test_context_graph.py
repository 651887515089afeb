"""The frame context in the real graph (rclpy over loopback DDS): CameraInfo and /tf_static published, a model
needing camera geometry refused until they arrive, then served; the context reaching the suffix equal (in
process and through the codec); a bag carrying them, recorded (the latched /tf_static too) and replayed."""

import dataclasses
import time

import numpy as np
import pytest

from ros_harness import CAMERAS, TINY_OVERRIDES, Harness, wait_until

pytest.importorskip("tf2_msgs.msg", reason="tf2_msgs (every ROS install has it) is not importable here")

PRESET = "tiny-context"
NEEDS = ["cameras"]


@pytest.fixture
def context_model(monkeypatch):
    """The tiny model, declaring that it needs the cameras' geometry (spec.context)."""
    from hybrid_vla_ros.model import presets
    monkeypatch.setitem(presets.PRESETS, PRESET, dataclasses.replace(presets.PRESETS["tiny"], name=PRESET, context=NEEDS))
    return {"hybrid_vla_prefix": {"model.preset": PRESET}, "hybrid_vla_suffix": {"model.preset": PRESET},
            "hybrid_vla_scheduler": {"model.preset": PRESET}}


def rig_messages(width: int, height: int):
    """The sample rig (context.py) as CameraInfo per camera and one /tf_static TFMessage."""
    from geometry_msgs.msg import TransformStamped
    from sensor_msgs.msg import CameraInfo
    from tf2_msgs.msg import TFMessage
    from hybrid_vla_ros.context import quaternion_of, sample_rig
    rig, infos, tf = sample_rig(len(CAMERAS), width, height), [], TFMessage()
    for frame_id, k, chain in rig:
        info = CameraInfo(width=width, height=height, k=k.ravel().tolist())
        info.header.frame_id = frame_id
        infos.append(info)
        for parent, child, t in chain:
            edge = TransformStamped(child_frame_id=child)
            edge.header.frame_id = parent
            edge.transform.translation.x, edge.transform.translation.y, edge.transform.translation.z = t[:3, 3]
            q = edge.transform.rotation
            q.x, q.y, q.z, q.w = quaternion_of(t[:3, :3])
            tf.transforms.append(edge)
    return infos, tf


@pytest.mark.parametrize("transport", ["inproc", "inline"])
def test_a_model_needing_cameras_is_refused_until_their_geometry_comes_then_its_context_reaches_the_suffix(
        domain, context_model, transport):
    from rclpy.qos import DurabilityPolicy, QoSProfile
    from sensor_msgs.msg import CameraInfo
    from tf2_msgs.msg import TFMessage
    overrides = {k: dict(v) for k, v in context_model.items()}
    overrides["hybrid_vla_prefix"]["boundary_transport"] = transport
    h = Harness(overrides)
    try:
        for seq in (0, 1):   # the first frame waits for the geometry's first arrival (once), the next does not
            h.send_frame(seq, wait=False)
            assert wait_until(lambda: h.prefix.context_input.counts["context_missing_cameras"] > seq, h.spin, 20)
        h.settle(0.3)
        assert not h.infos   # refused, counted; the node keeps serving
        assert h.prefix.context_input.counts["first_arrival_waits"] == 1
        infos, tf = rig_messages(h.spec.image_width, h.spec.image_height)
        info_pubs = [h.node.create_publisher(CameraInfo, c.rsplit("/", 1)[0] + "/camera_info", 10) for c in CAMERAS]
        latched = h.node.create_publisher(TFMessage, "/tf_static",
                                          QoSProfile(depth=1, durability=DurabilityPolicy.TRANSIENT_LOCAL))
        latched.publish(tf)   # once: the prefix gets it latched

        def geometry_known():
            for pub, info in zip(info_pubs, infos):
                pub.publish(info)
            return all(c is not None for c in h.prefix.context_input.cameras())
        assert wait_until(geometry_known, h.spin, 20)
        built, seen = [], []
        build, run = h.prefix.context_input.build, h.suffix.stage.run
        h.prefix.context_input.build = lambda frame: built.append(build(frame)) or built[-1]
        h.suffix.stage.run = lambda state: (seen.append(state.context), run(state))[1]
        h.send_frame(2)
        assert len(built) == len(seen) == 1 and seen[0] == built[0]
        assert (seen[0] is built[0]) == (transport == "inproc")   # in process: the object; inline: the codec's copy
        cam = seen[0].cameras[0]
        # camera 0 of the sample rig looks ahead: a point 20 m ahead at its height is in the image's centre
        uv, _ = cam.project(np.array([[20.0, 0.0, 1.5]]))
        assert np.allclose(uv, [[h.spec.image_width / 2, h.spec.image_height / 2]])
        assert h.prefix.context_input.check()[1] == 0
    finally:
        h.close()


def test_a_frame_whose_geometry_arrives_just_after_its_images_is_served(domain, context_model, monkeypatch):
    """At start-up (another process, an executor taking callbacks in arrival order) a frame's camera_info can come
    just after its images: the frame waits for that first arrival (FIRST_ARRIVAL_WAIT_S) instead of being refused."""
    from rclpy.qos import DurabilityPolicy, QoSProfile
    from sensor_msgs.msg import CameraInfo
    from tf2_msgs.msg import TFMessage
    from hybrid_vla_ros.ros.inputs import context_input
    monkeypatch.setattr(context_input, "FIRST_ARRIVAL_WAIT_S", 20.0)   # the mechanism, not the shipped 0.5 s
    h = Harness({k: dict(v) for k, v in context_model.items()})
    try:
        infos, tf = rig_messages(h.spec.image_width, h.spec.image_height)
        info_pubs = [h.node.create_publisher(CameraInfo, c.rsplit("/", 1)[0] + "/camera_info", 10) for c in CAMERAS]
        latched = h.node.create_publisher(TFMessage, "/tf_static",
                                          QoSProfile(depth=1, durability=DurabilityPolicy.TRANSIENT_LOCAL))
        assert wait_until(lambda: all(p.get_subscription_count() for p in info_pubs + [latched]), h.spin, 10)
        h.send_frame(0, wait=False)
        assert wait_until(lambda: h.prefix.context_input.counts["first_arrival_waits"] == 1, h.spin, 10)
        latched.publish(tf)
        for pub, info in zip(info_pubs, infos):
            pub.publish(info)
        assert wait_until(lambda: len(h.infos) == 1, h.spin, 20), dict(h.prefix.context_input.counts)
        assert not h.prefix.health.rejected and h.prefix.context_input.counts["context_missing_cameras"] == 0
    finally:
        h.close()


def test_a_bag_records_and_replays_camera_info_and_the_latched_tf_static(domain, context_model, tmp_path):
    import rclpy
    from rclpy.executors import SingleThreadedExecutor
    from rclpy.node import Node
    from hybrid_vla_ros.ros.bags.record import Recorder, with_context
    from hybrid_vla_ros.ros.bags.replay import Replayer
    from hybrid_vla_ros.ros.bags.storage import bag_info, read_bag
    from hybrid_vla_ros.ros.demo import drive_graph, write_sample_drive
    from hybrid_vla_ros.ros.launch_support.bringup import graph_params
    from hybrid_vla_ros.model.presets import get_preset
    topics = [f"{c}/compressed" for c in CAMERAS]
    bag = write_sample_drive(tmp_path / "drive", get_preset(PRESET), topics, frames=5)
    info = bag_info(bag)
    assert info.types["/tf_static"] == "tf2_msgs/msg/TFMessage"
    assert info.types["/test/cam0/camera_info"] == "sensor_msgs/msg/CameraInfo"

    # replayed into the graph: a model that needs the geometry serves every frame
    params = {k: {**dict(v), **context_model[k]} for k, v in TINY_OVERRIDES.items()}
    params["hybrid_vla_prefix"].update(image_transport="compressed", camera_topics=topics)
    summary, _ = drive_graph(bag, graph_params(overrides=params), settle_s=20)
    assert summary["frames_published"] == summary["trajectories"] == 5, summary

    # recorded while replayed: /tf_static was sent before the recorder subscribed, and is recorded all the same
    context = rclpy.Context()
    rclpy.init(context=context)
    try:
        player, listener = Node("player", context=context), Node("recorder", context=context)
        executor = SingleThreadedExecutor(context=context)
        for node in (player, listener):
            executor.add_node(node)
        spin = lambda t: executor.spin_once(timeout_sec=t)  # noqa: E731
        replayer = Replayer(player, bag)
        frames = list(replayer.frames())
        replayer.publish_frame(frames[0])   # the latched /tf_static goes out with the first frame
        recorder = Recorder(listener, tmp_path / "rec", with_context({}, topics))
        assert wait_until(lambda: len(recorder.subscriptions) == len(recorder.wanted), spin, 20), recorder.subscriptions
        end = time.monotonic() + 0.5
        while time.monotonic() < end:
            spin(0.02)
        for frame in frames[1:]:
            replayer.publish_frame(frame)
            spin(0.05)
        end = time.monotonic() + 0.5
        while time.monotonic() < end:
            spin(0.02)
        counts = recorder.close()
        executor.shutdown()
    finally:
        rclpy.shutdown(context=context)
    assert counts["/tf_static"] == 1 and all(counts.get(f"/test/cam{i}/camera_info", 0) >= 1 for i in range(2)), counts
    recorded = {m.topic: m.raw for m in read_bag(tmp_path / "rec")[0]}
    original = {m.topic: m.raw for m in read_bag(bag)[0]}
    from rclpy.serialization import deserialize_message
    from tf2_msgs.msg import TFMessage
    assert deserialize_message(recorded["/tf_static"], TFMessage) == deserialize_message(original["/tf_static"],
                                                                                           TFMessage)
    assert bag_info(tmp_path / "rec").offered["/tf_static"][0].durability.name == "TRANSIENT_LOCAL"
