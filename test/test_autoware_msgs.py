"""The suffix's Autoware output with the real message packages (built from ../shared/autoware_msgs by
scripts/setup.sh): autoware_planning_msgs/Trajectory and autoware_internal_planning_msgs/CandidateTrajectories
received over DDS by a subscriber in another process, a bag of them recorded and replayed through the real
types; and the nav_msgs/Path fallback of a machine without Autoware (the real node, with the packages
failing to import), which runs everywhere."""

import importlib.util
import json
import os
import signal
import subprocess
import sys
import time
import uuid
from pathlib import Path

import numpy as np
import pytest

from ros_harness import CAMERAS, TINY_OVERRIDES, Harness, wait_until

pytestmark = pytest.mark.slow
HERE = Path(__file__).resolve().parent
SHARED = [HERE.parents[1] / "shared" / "autoware_msgs", Path("/work/shared/autoware_msgs")]
PACKAGES = ("autoware_planning_msgs", "autoware_internal_planning_msgs")
TRAJECTORY, CANDIDATES = "/planning/hybrid_vla/trajectory", "/planning/hybrid_vla/candidate_trajectories"


def need_real_messages() -> None:
    """Skip, saying why, where the packages are not importable; in CI with ../shared present they must be."""
    missing = [p for p in PACKAGES if importlib.util.find_spec(p) is None]
    if not missing:
        return
    shared = next((s for s in SHARED if (s / "build_msgs.sh").is_file()), None)
    if shared is None:
        pytest.skip(f"{missing} not importable and no ../shared/autoware_msgs here to build them from")
    why = f"{missing} not importable: build them with {shared}/build_msgs.sh kilted|jazzy VENV (scripts/setup.sh does)"
    if os.environ.get("CI"):
        pytest.fail(why + "; CI's set-up should have")
    pytest.skip(why)


def expected_id(name: str) -> str:
    from hybrid_vla_ros.ros.outputs.candidates import GENERATOR_NAMESPACE
    return uuid.uuid5(GENERATOR_NAMESPACE, name).hex


def reference_points(seq: int) -> np.ndarray:
    from hybrid_vla_ros.engine.stages import reference_forward
    from hybrid_vla_ros.model.inputs import synthetic_frame
    from hybrid_vla_ros.model.load import load_vla
    from hybrid_vla_ros.types import EgoState
    model = load_vla(preset="tiny")
    frame = synthetic_frame(model.spec, seq, stamp_ns=(seq + 1) * 100_000_000)
    frame.ego = EgoState()
    return reference_forward(model, frame)[1].points


def autoware_harness(**suffix) -> Harness:
    return Harness({"hybrid_vla_suffix": {"output_type": "auto", **suffix}})


def matched(h: Harness, trajectory: int, candidates: int, timeout_s: float = 30.0) -> None:
    """The outputs have these many readers (this process's and the other process's)."""
    wanted = ((h.suffix.pub, trajectory), (h.suffix.candidates.pub, candidates))
    assert wait_until(lambda: all(p.get_subscription_count() >= n for p, n in wanted), h.spin, timeout_s), \
        [p.get_subscription_count() for p, _ in wanted]
    h.settle(0.5)  # the other side's readers learn of our writers a little later (asymmetric matching)


def listen(count: int, timeout_s: float = 60.0) -> subprocess.Popen:
    proc = subprocess.Popen([sys.executable, str(HERE / "autoware_listener.py"), TRAJECTORY, CANDIDATES, str(count),
                             str(timeout_s)], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    assert proc.stdout.readline().strip() == "ready", proc.stderr.read()
    return proc


def test_real_trajectory_and_candidates_reach_another_process(domain):
    need_real_messages()
    h = autoware_harness()
    listener = None
    try:
        published = dict(h.node.get_publisher_names_and_types_by_node("hybrid_vla_suffix", "/"))
        assert published[TRAJECTORY] == ["autoware_planning_msgs/msg/Trajectory"], published
        assert published[CANDIDATES] == ["autoware_internal_planning_msgs/msg/CandidateTrajectories"], published
        listener = listen(3)
        matched(h, 2, 1)  # the harness reads the trajectory too
        for seq in range(3):
            h.send_frame(seq)
        out, err = listener.communicate(timeout=90)
    finally:
        if listener is not None and listener.poll() is None:
            listener.kill()
        h.close()
    assert listener.returncode == 0, err[-3000:]
    lines = [json.loads(line) for line in out.splitlines()]
    trajectories = {t["stamp_ns"]: t for t in lines if t["kind"] == "trajectory"}
    candidates = [c for c in lines if c["kind"] == "candidates"]
    assert sorted(trajectories) == [(s + 1) * 100_000_000 for s in range(3)]
    assert {t["type"] for t in trajectories.values()} == {"autoware_planning_msgs.msg._trajectory.Trajectory"}
    assert {c["type"] for c in candidates} == \
        {"autoware_internal_planning_msgs.msg._candidate_trajectories.CandidateTrajectories"}
    for seq, stamp in enumerate(sorted(trajectories)):
        points = np.array(trajectories[stamp]["points"])
        np.testing.assert_allclose(points[:, :2], reference_points(seq)[:, :2], atol=1e-5)
        speeds, times = points[:, 4], points[:, 6] * 1e-9
        forward = np.diff(speeds) / np.diff(times)  # acceleration from the speed profile, the last kept
        np.testing.assert_allclose(points[:, 5], np.append(forward, forward[-1]), rtol=1e-4, atol=1e-5)
    assert len(candidates) == 3
    for message in candidates:
        (candidate,), (info,) = message["candidates"], message["generators"]  # one per frame, one generator
        trajectory = trajectories[candidate["stamp_ns"]]  # same stamp ...
        assert candidate["frame_id"] == trajectory["frame_id"] == "base_link"  # ... and frame
        assert candidate["points"] == trajectory["points"]
        assert candidate["generator_id"] == info["generator_id"] == expected_id("hybrid_vla")
        assert info["name"] == "hybrid_vla"


def test_generator_id_is_the_same_after_a_restart_and_follows_generator_name(domain):
    need_real_messages()
    from autoware_internal_planning_msgs.msg import CandidateTrajectories
    from hybrid_vla_ros.errors import ConfigError
    from hybrid_vla_ros.ros.outputs.candidates import generator_uuid
    ids = []
    for name in ("hybrid_vla", "hybrid_vla", "vla_night_model"):  # a restart, then another generator
        h = autoware_harness(generator_name=name)
        try:
            got = []
            h.node.create_subscription(CandidateTrajectories, CANDIDATES, got.append, 10)
            matched(h, 1, 1)
            h.send_frame(0)
            assert wait_until(lambda: got, h.spin, 10)
            ids.append((bytes(got[0].generator_info[0].generator_id.uuid).hex(), got[0].generator_info[0].generator_name.data))
        finally:
            h.close()
    assert ids[0] == ids[1] == (expected_id("hybrid_vla"), "hybrid_vla")
    assert ids[2] == (expected_id("vla_night_model"), "vla_night_model") and ids[2][0] != ids[0][0]
    other = subprocess.run([sys.executable, "-c", "from hybrid_vla_ros.ros.outputs.candidates import generator_uuid; "
                            "print(generator_uuid('hybrid_vla').hex)"], capture_output=True, text=True, timeout=60)
    assert other.stdout.strip() == ids[0][0], other.stderr  # another interpreter (hash seed) derives the same id
    with pytest.raises(ConfigError, match="generator_name='  ': must not be empty"):
        generator_uuid("  ")


def test_a_bag_of_the_real_types_is_recorded_and_replays_through_them(domain, tmp_path):
    need_real_messages()
    from autoware_internal_planning_msgs.msg import CandidateTrajectories
    from autoware_planning_msgs.msg import Trajectory
    from hybrid_vla_ros.ros.bags.storage import bag_info, read_bag, typestore_with
    cli = [sys.executable, "-m", "hybrid_vla_ros.cli"]
    h = autoware_harness()
    live, recorder = [], None
    try:
        h.node.create_subscription(CandidateTrajectories, CANDIDATES, live.append, 10)
        recorder = subprocess.Popen(cli + ["record", "--out", str(tmp_path / "aw"), "--duration", "60", "--topics",
                                           TRAJECTORY, CANDIDATES], stdout=subprocess.PIPE, text=True)
        matched(h, 2, 2)
        for seq in range(3):
            h.send_frame(seq)
        assert wait_until(lambda: len(live) == 3 and len(h.paths) == 3, h.spin, 10)
        h.settle(0.5)
    finally:
        if recorder is not None:
            recorder.send_signal(signal.SIGINT)
            recorder.communicate(timeout=60)
        h.close()
    assert recorder.returncode == 0
    info = bag_info(tmp_path / "aw")
    assert info.types == {TRAJECTORY: "autoware_planning_msgs/msg/Trajectory",
                          CANDIDATES: "autoware_internal_planning_msgs/msg/CandidateTrajectories"}
    messages, _ = read_bag(tmp_path / "aw")
    store = typestore_with(info.types.values())  # the definitions the build installed (share/<package>/msg)
    decoded = [store.deserialize_cdr(m.raw, m.msgtype) for m in messages if m.topic == CANDIDATES]
    assert [d.generator_info[0].generator_name.data for d in decoded] == ["hybrid_vla"] * 3
    assert [len(d.candidate_trajectories[0].points) for d in decoded] == [8] * 3
    replayed = replay(cli, tmp_path / "aw", Trajectory, CandidateTrajectories)
    assert [str(m) for m in replayed[TRAJECTORY]] == [str(m) for m in h.paths]   # field by field, as published
    assert [str(m) for m in replayed[CANDIDATES]] == [str(m) for m in live]


def replay(cli, bag, trajectory_cls, candidates_cls) -> dict:
    """`hybrid-vla replay` in another process; this one subscribes with the real classes."""
    import rclpy
    from rclpy.executors import SingleThreadedExecutor
    context = rclpy.Context()
    rclpy.init(context=context)
    got = {TRAJECTORY: [], CANDIDATES: []}
    try:
        node = rclpy.create_node("replay_listener", context=context)
        node.create_subscription(trajectory_cls, TRAJECTORY, got[TRAJECTORY].append, 50)
        node.create_subscription(candidates_cls, CANDIDATES, got[CANDIDATES].append, 50)
        executor = SingleThreadedExecutor(context=context)
        executor.add_node(node)
        player = subprocess.Popen(cli + ["replay", str(bag), "--rate", "1", "--wait-s", "60"], stdout=subprocess.PIPE,
                                  stderr=subprocess.PIPE, text=True)
        spin = lambda t: executor.spin_once(timeout_sec=t)  # noqa: E731
        wait_until(lambda: player.poll() is not None and all(len(v) == 3 for v in got.values()), spin, 90)
        out, err = player.communicate(timeout=30)
        assert player.returncode == 0 and '"skipped": {}' in out, err[-3000:]
        # the replayer went only once this reader had acknowledged every message (its last frame was lost at exit)
        assert '"unacknowledged": []' in out, out
        executor.shutdown()
        node.destroy_node()
    finally:
        rclpy.shutdown(context=context)
    return got


def test_without_autoware_the_suffix_falls_back_to_path_and_publishes_no_candidates(domain, tmp_path):
    """The real graph in another process, where the Autoware packages fail to import (hidden when built
    here): nav_msgs/Path on the trajectory topic, no ~/output/trajectories, and the log says why."""
    from nav_msgs.msg import Path as PathMsg
    from hybrid_vla_ros.ros.launch_support.bringup import graph_params, write_combined_config
    overrides = {k: dict(v) for k, v in TINY_OVERRIDES.items()}
    overrides["hybrid_vla_suffix"]["output_type"] = "auto"
    config = write_combined_config(graph_params(overrides=overrides), tmp_path / "graph.yaml")
    proc = subprocess.Popen([sys.executable, str(HERE / "without_autoware.py"), "-m", "hybrid_vla_ros.cli", "graph",
                             "--config", str(config)], stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    probe = Probe(PathMsg)
    try:
        assert wait_until(lambda: TRAJECTORY in probe.published(), probe.spin, 90), probe.published()
        assert probe.published()[TRAJECTORY] == ["nav_msgs/msg/Path"]
        assert CANDIDATES not in probe.published()
        for seq in range(30):  # until the camera readers have matched this process's writers
            probe.send_frame(seq)
            if wait_until(lambda: probe.received, probe.spin, 2.0):
                break
        assert probe.received, "no nav_msgs/Path from the fallback suffix"
        assert len(probe.received[0].poses) == 8 and probe.received[0].header.frame_id == "base_link"
    finally:
        probe.close()
        proc.send_signal(signal.SIGINT)
        out, _ = proc.communicate(timeout=60)
    assert proc.returncode == 0, out[-3000:]
    assert "nav_msgs/Path on ~/output/trajectory" in out and "autoware_planning_msgs not importable" in out, out[-3000:]
    assert "autoware_internal_planning_msgs not importable: no ~/output/trajectories" in out, out[-3000:]
    assert "autoware_vehicle_msgs not importable: no ~/output/turn_indicators" in out, out[-3000:]


class Probe:
    """This process's side of the fallback test: camera frames in, nav_msgs/Path out."""

    def __init__(self, path_cls):
        import rclpy
        from rclpy.executors import SingleThreadedExecutor
        from sensor_msgs.msg import Image
        self.context = rclpy.Context()
        rclpy.init(context=self.context)
        self.node = rclpy.create_node("fallback_probe", context=self.context)
        self.executor = SingleThreadedExecutor(context=self.context)
        self.executor.add_node(self.node)
        self.received = []
        self.node.create_subscription(path_cls, TRAJECTORY, self.received.append, 10)
        self.images = [self.node.create_publisher(Image, topic, 10) for topic in CAMERAS]

    def spin(self, timeout_s=0.05):
        self.executor.spin_once(timeout_sec=timeout_s)

    def published(self) -> dict:
        from rclpy.node import NodeNameNonExistentError
        try:
            return dict(self.node.get_publisher_names_and_types_by_node("hybrid_vla_suffix", "/"))
        except NodeNameNonExistentError:
            return {}

    def send_frame(self, seq):
        from sensor_msgs.msg import Image
        from hybrid_vla_ros.model.inputs import synthetic_frame
        from hybrid_vla_ros.model.presets import get_preset
        from hybrid_vla_ros.ros import messages
        frame = synthetic_frame(get_preset("tiny"), seq, stamp_ns=time.time_ns())
        for pub, image in zip(self.images, frame.images):
            msg = messages.array_to_image(np.ascontiguousarray(image), Image())
            messages.ns_to_stamp(frame.stamp_ns, msg.header.stamp)
            pub.publish(msg)

    def close(self):
        import rclpy
        self.executor.remove_node(self.node)
        self.executor.shutdown()
        self.node.destroy_node()
        rclpy.shutdown(context=self.context)
