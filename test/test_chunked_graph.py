"""Chunked prefill across the cut in the graph (issue 29): the real prefix and suffix nodes over loopback DDS
on the tiny preset, with `chunks` 4 and "camera". Every frame sent gives exactly one trajectory, equal to the
unsplit model's; the prefix publishes each chunk and one frame info per frame; a lost, out-of-order or foreign
chunk is refused with its reason, its frame counted once, and the next frame is served.

Transports: the in-process handle carries the chunk fields on the state object; shared memory and inline
bytes in the codec's version 3 header and the envelope's (engine/handover/codec.py, endpoints.py)."""

import numpy as np
import pytest

from hybrid_vla_ros.engine.handover.endpoints import HandoverEncoder
from hybrid_vla_ros.engine.stages import reference_forward
from hybrid_vla_ros.model.inputs import synthetic_frame
from hybrid_vla_ros.model.load import load_vla
from hybrid_vla_ros.types import EgoState

from ros_harness import Harness, wait_until

pytestmark = pytest.mark.slow
TOLERANCE_M = 1e-4     # the bound on a chunked trajectory against the unchunked one
FRAMES = 4


def reference_points(seq):
    model = load_vla(preset="tiny")
    frame = synthetic_frame(model.spec, seq, stamp_ns=(seq + 1) * 100_000_000)
    frame.ego = EgoState()
    return reference_forward(model, frame)[1].points


def path_xy(path):
    return np.array([[p.pose.position.x, p.pose.position.y] for p in path.poses])


class Watch:
    """The test node's ears on /diagnostics, the prefix's frame infos and both nodes' lost frames."""

    def __init__(self, harness):
        from diagnostic_msgs.msg import DiagnosticArray, DiagnosticStatus
        from hybrid_vla_ros.ros.topics import PREFIX_INFO_TOPIC
        self.status, self.prefix_infos, self.lost = {}, [], []
        node = harness.node
        node.create_subscription(DiagnosticArray, "/diagnostics", lambda m: self.status.update(
            {s.name: {kv.key: kv.value for kv in s.values} for s in m.status}), 20)
        node.create_subscription(DiagnosticStatus, PREFIX_INFO_TOPIC, self.prefix_infos.append, 50)
        for name in ("hybrid_vla_prefix", "hybrid_vla_suffix"):
            node.create_subscription(DiagnosticStatus, f"/{name}/debug/dropped_frames", lambda m: self.lost.append(
                (m.name, {kv.key: kv.value for kv in m.values})), 50)

    def chunks(self, node):
        return self.status.get(f"{node}: chunks", {})


def chunked_harness(chunks, transport="inproc"):
    return Harness({"hybrid_vla_prefix": {"chunks": chunks, "boundary_transport": transport},
                    "hybrid_vla_suffix": {"chunks": chunks}})


@pytest.mark.parametrize("chunks,transport", [
    (4, "inproc"), ("camera", "inproc"),
    (4, "shm"), ("camera", "inline")])
def test_every_chunked_frame_gives_one_trajectory_equal_to_the_unchunked_model(domain, chunks, transport):
    harness = chunked_harness(chunks, transport)
    try:
        watch = Watch(harness)
        count = 4 if chunks == 4 else harness.spec.num_cameras
        assert harness.prefix.chunk_flow.count == harness.suffix.serving.chunks.count == count
        for seq in range(FRAMES):
            harness.send_frame(seq)
        assert wait_until(lambda: len(harness.paths) == FRAMES, harness.spin)
        harness.settle(0.3)
        assert [int(i["seq"]) for i in harness.infos] == list(range(FRAMES))   # one trajectory per frame
        assert {i["transport"] for i in harness.infos} == {transport}
        assert {i["chunks"] for i in harness.infos} == {str(count)}
        for info in harness.infos:   # the frame's times: first chunk received to trajectory
            assert float(info["frame_ms"]) >= float(info["queue_ms"]) and float(info["suffix_ms"]) > 0
        for seq, path in enumerate(harness.paths):
            assert np.abs(path_xy(path) - reference_points(seq)[:, :2]).max() <= TOLERANCE_M, seq
        assert len(watch.prefix_infos) == FRAMES                                  # one frame info per frame
        assert not harness.suffix.health.rejected and not harness.suffix.health.dropped
        assert not harness.prefix.health.rejected and not watch.lost
        assert wait_until(lambda: watch.chunks("hybrid_vla_suffix").get("chunked_frames_served") == str(FRAMES),
                          harness.spin, 5)
        suffix, prefix = watch.chunks("hybrid_vla_suffix"), watch.chunks("hybrid_vla_prefix")
        assert suffix["chunk_states"] == str(FRAMES * count) and suffix["chunks_refused"] == "0", suffix
        assert suffix["chunked_frames_lost"] == "0" and suffix["chunks_per_frame"] == str(count), suffix
        assert prefix["chunk_states_sent"] == str(FRAMES * count) and prefix["frames_cut_short"] == "0", prefix
        assert wait_until(lambda: harness.prefix.serving.flight.in_flight <= 1, harness.spin, 2)   # slots came back
        assert harness.prefix.serving.flight.reclaimed == 0
    finally:
        harness.close()


def test_unchunked_graph_is_unchanged_by_the_parameter(domain):
    """chunks 1: one whole state per frame, no chunk fields in the info, the trajectory bit-exact as before."""
    harness = chunked_harness(1)
    try:
        for seq in range(2):
            harness.send_frame(seq)
        assert wait_until(lambda: len(harness.paths) == 2, harness.spin)
        assert "chunks" not in harness.infos[0] and harness.suffix.serving.chunks.states == 0
        np.testing.assert_allclose(path_xy(harness.paths[1]), reference_points(1)[:, :2], atol=1e-5)
    finally:
        harness.close()


def chunk_states(harness, seq):
    frame = harness.frame(seq)
    frame.ego = EgoState()
    return list(harness.prefix.stage.run_chunks(frame, harness.prefix.chunk_flow.chunks))


def test_lost_out_of_order_and_foreign_chunks_are_refused_each_frame_counted_once(domain):
    from std_msgs.msg import UInt8MultiArray
    harness = chunked_harness(4)
    try:
        watch = Watch(harness)
        harness.send_frame(0)
        encoder = HandoverEncoder("inproc", 1, "test", model_id=harness.prefix.serving.handover.model_id)

        def publish(state):
            harness.boundary_pub.publish(UInt8MultiArray(data=encoder.encode(state)))
            harness.settle(0.1)

        one, two, three = (chunk_states(harness, seq) for seq in (1, 2, 3))
        for index in (0, 1, 3):           # frame 1: chunk 2 lost, chunk 3 comes out of order
            publish(one[index])
        publish(two[2])                   # frame 2: a foreign chunk (its first never came)
        for index in (0, 1):              # frame 3: its last chunks lost, then the next frame begins
            publish(three[index])
        harness.send_frame(4)             # served (the prefix numbers it 1: the second frame it serves)
        assert wait_until(lambda: len(harness.paths) == 2, harness.spin)
        assert [int(i["stamp_ns"]) for i in harness.infos] == [100_000_000, 500_000_000]
        assert np.abs(path_xy(harness.paths[1]) - reference_points(4)[:, :2]).max() <= TOLERANCE_M

        health = harness.suffix.health
        assert dict(health.rejected) == {"chunk_out_of_order": 2}, dict(health.rejected)   # frames 1 and 2
        assert dict(health.drop_reasons) == {"chunk_lost": 1}, dict(health.drop_reasons)    # frame 3
        assert wait_until(lambda: len(watch.lost) == 3, harness.spin, 5)
        harness.settle(0.3)
        stamps = sorted(int(values["stamp_ns"]) for _, values in watch.lost)
        assert stamps == [200_000_000, 300_000_000, 400_000_000], watch.lost   # each lost frame once
        assert wait_until(lambda: watch.chunks("hybrid_vla_suffix").get("chunked_frames_lost") == "3",
                          harness.spin, 5)
        suffix = watch.chunks("hybrid_vla_suffix")
        assert suffix["chunks_refused.chunk_out_of_order"] == "2" and suffix["chunks_refused"] == "2", suffix
        assert suffix["chunked_frames_served"] == "2", suffix
        harness.send_frame(5)             # and on it goes
        assert [int(i["seq"]) for i in harness.infos] == [0, 1, 2]
    finally:
        harness.close()


def test_a_prefix_failure_part_way_through_a_frame_drops_it_whole_once(domain):
    """The prefix fails after two of a frame's chunks went out: the frame is counted once at the prefix
    (invalid_input), its flight slot comes back, the suffix drops the half frame (chunk_lost) when the next
    frame begins, and the next frame is served."""
    from hybrid_vla_ros.errors import InputError
    harness = chunked_harness(4)
    try:
        harness.send_frame(0)
        stage, real = harness.prefix.stage, harness.prefix.stage.run_chunks

        def failing(frame, chunks):
            for state in real(frame, chunks):
                if state.chunk_index == 2:
                    raise InputError("injected prefix fault at chunk 2")
                yield state
        stage.run_chunks = failing
        harness.send_frame(1, wait=False)
        assert wait_until(lambda: harness.prefix.health.rejected["invalid_input"] == 1, harness.spin, 10)
        stage.run_chunks = real
        harness.send_frame(2)
        assert [int(i["stamp_ns"]) for i in harness.infos] == [100_000_000, 300_000_000]
        assert dict(harness.prefix.health.rejected) == {"invalid_input": 1}
        assert harness.prefix.chunk_flow.cut_short == 1
        assert dict(harness.suffix.health.drop_reasons) == {"chunk_lost": 1} and not harness.suffix.health.rejected
        assert wait_until(lambda: harness.prefix.serving.flight.in_flight <= 1, harness.spin, 2)
        assert harness.prefix.serving.flight.reclaimed == 0
    finally:
        harness.close()


def test_a_chunks_value_the_node_cannot_take_is_refused_with_the_reason(domain, capfd):
    """By the parameter check (anything but 1..64 or camera), and at configure: more chunks than the tiny
    prompt's 42 tokens allow."""
    import rclpy
    from lifecycle_msgs.msg import State
    from rclpy.lifecycle import TransitionCallbackReturn
    from hybrid_vla_ros.errors import ConfigError
    from hybrid_vla_ros.ros.chunk_flow import chunks_per_frame
    from hybrid_vla_ros.ros.launch_support.bringup import graph_params, make_node
    from hybrid_vla_ros.ros.params import NODE_PARAMS
    from ros_harness import TINY_OVERRIDES
    spec = {p.name: p for p in NODE_PARAMS["hybrid_vla_prefix"]}["chunks"]
    for bad in (0, 65, "two", True, 2.5, -1):
        with pytest.raises(ConfigError, match="'chunks'"):
            spec.check(bad)
    assert spec.check("camera") == "camera" and spec.check(8) == 8 and spec.check("8") == "8"
    with pytest.raises(ConfigError, match="at most 42 chunks"):
        chunks_per_frame(load_vla(preset="tiny"), 43)
    context = rclpy.Context()
    rclpy.init(context=context)
    try:
        for chunks, in_flight, reason in ((43, 1, "at most 42 chunks"),):
            params = graph_params(overrides=TINY_OVERRIDES)["hybrid_vla_prefix"]
            params.update(autostart=False, chunks=chunks, max_in_flight=in_flight)
            node = make_node("hybrid_vla_prefix", params, context)
            try:
                assert node.on_configure(State()) == TransitionCallbackReturn.FAILURE and node.stage is None
            finally:
                node.destroy_node()
            assert reason in capfd.readouterr().err   # the node's log: configure failed, and why
    finally:
        rclpy.shutdown(context=context)


def test_the_graph_bench_mode_runs_chunked(domain):
    """bench/graph.py's run_graph_mode with prefix_extra {"chunks": k} (what bench --modes graph passes)."""
    from hybrid_vla_ros.bench.graph import run_graph_mode
    from hybrid_vla_ros.engine.cpu import default_stage_cores
    from hybrid_vla_ros.engine.placement import Placement
    model = load_vla(preset="tiny")
    result = run_graph_mode(model, Placement(), 2, 4, default_stage_cores(0), default_stage_cores(1), 2,
                            processes=False, prefix_extra={"chunks": 4})   # the suffix gets the same
    assert result["completed"] == 4 and not result["dropped"] and result["chunks"] == 4, result
