"""Issue 25, "defaults that hold at every size": a suffix slower than 2 s per frame (a real-size CPU suffix),
in a process of its own behind the shared-memory ring, under `lossless`, with the shipped time limits
(config/*.param.yaml): every frame is published, nothing is dropped, reclaimed or stale, and no loss is
counted twice (ring_slot_reclaimed at the prefix, invalid_boundary at the suffix).

On the defaults chosen at 0.1 s per frame (max_output_age_ms 500) every frame came out stale_output; with a
ring that took a READY slot back after 1 s, the slot of the frame waiting behind the one computing was
reclaimed (counted at the prefix) and its descriptor refused at the suffix (invalid_boundary)."""

import os
import sys
import time
from pathlib import Path

from ros_harness import CAMERAS, TINY_OVERRIDES, EndpointReports, wait_until

from hybrid_vla_ros.model.inputs import synthetic_frame
from hybrid_vla_ros.model.presets import get_preset

SLOW_S = 2.2     # extra seconds of suffix compute per frame
FRAMES = 5
WINDOW = 4       # frames published and not yet answered: one computing, two READY in the ring (max_in_flight
                 # 2), one at the prefix waiting for a slot (READY for a whole slow frame) ...
AHEAD = 2        # ... and at most this many not yet through the prefix: its lossless mailbox holds max_in_flight
HERE = Path(__file__).resolve().parent


class Observer:
    """The test's node: cameras out; trajectory infos, lost frames and /diagnostics in."""

    def __init__(self, context):
        from diagnostic_msgs.msg import DiagnosticArray, DiagnosticStatus
        from rclpy.node import Node
        from sensor_msgs.msg import Image
        from hybrid_vla_ros.ros.topics import PREFIX_INFO_TOPIC, TRAJECTORY_INFO_TOPIC
        self.node = Node("test_slow_suffix_observer", context=context)
        self.cameras = [self.node.create_publisher(Image, topic, 10) for topic in CAMERAS]
        self.infos, self.lost, self.status, self.heard = [], [], {}, {}
        self.published, self.prefix_done = [], []   # monotonic times: frame published, its state handed over
        self.node.create_subscription(DiagnosticStatus, PREFIX_INFO_TOPIC,
                                      lambda m: self.prefix_done.append(time.monotonic()), 50)
        self.node.create_subscription(DiagnosticStatus, TRAJECTORY_INFO_TOPIC, lambda m: self.infos.append(
            {"received": time.monotonic(), **{kv.key: kv.value for kv in m.values}}), 50)
        for name in ("hybrid_vla_prefix", "hybrid_vla_suffix"):
            self.node.create_subscription(DiagnosticStatus, f"/{name}/debug/dropped_frames",
                                          lambda m: self.lost.append((time.monotonic(), m.name, m.message)), 50)
        self.node.create_subscription(DiagnosticArray, "/diagnostics", self._on_diagnostics, 50)
        self.reports = EndpointReports(self.node)

    def linked(self) -> bool:
        """The nodes' own counts: the prefix's camera readers matched this observer's writers (a best-effort image
        before is lost), the prefix's and suffix's info writers matched this observer's readers."""
        from hybrid_vla_ros.ros.topics import PREFIX_INFO_TOPIC, TRAJECTORY_INFO_TOPIC
        return self.reports.matched("hybrid_vla_prefix", "subscription", *CAMERAS) and \
            self.reports.matched("hybrid_vla_prefix", "publisher", PREFIX_INFO_TOPIC) and \
            self.reports.matched("hybrid_vla_suffix", "publisher", TRAJECTORY_INFO_TOPIC)

    def _on_diagnostics(self, msg) -> None:
        for status in msg.status:
            self.status[status.name] = {kv.key: kv.value for kv in status.values}
            self.heard[status.name.partition(":")[0]] = time.monotonic()

    def publish(self, frame) -> None:
        from sensor_msgs.msg import Image
        from hybrid_vla_ros.ros import messages
        for pub, image in zip(self.cameras, frame.images):
            msg = messages.array_to_image(image, Image())
            messages.ns_to_stamp(frame.stamp_ns, msg.header.stamp)
            pub.publish(msg)
        self.published.append(time.monotonic())


def start_graph(tmp_path):
    """Prefix and slow suffix, each in its own process, on the shipped defaults but for the tiny model."""
    from hybrid_vla_ros.ros.launch_support.bringup import child_commands, graph_params, write_combined_config
    from hybrid_vla_ros.ros.launch_support.supervise import Supervisor
    overrides = {k: dict(v) for k, v in TINY_OVERRIDES.items()}
    del overrides["hybrid_vla_suffix"]["max_output_age_ms"]   # the shipped value, not the harness's "never"
    config = write_combined_config(graph_params(overrides=overrides), tmp_path / "graph.yaml")
    commands = child_commands(str(config), nodes=("hybrid_vla_prefix", "hybrid_vla_suffix"))
    suffix = commands["hybrid_vla_suffix"]
    assert suffix[1:3] == ["-m", "hybrid_vla_ros.ros.launch_support.bringup"]
    commands["hybrid_vla_suffix"] = [sys.executable, str(HERE / "slow_suffix.py"), str(SLOW_S), *suffix[3:]]
    # the helper script's directory comes first on its path: the package under test must come before it
    path = os.pathsep.join(p for p in (str(HERE.parent), os.environ.get("PYTHONPATH")) if p)
    supervisor = Supervisor(commands, {**os.environ, "PYTHONPATH": path}, respawn_delay_s=-1)
    supervisor.start_all()
    return list(supervisor.procs.values())


def drive(observer, spin, frames) -> None:
    """Closed loop: at most WINDOW frames published and not answered, AHEAD not through the prefix."""
    for index, frame in enumerate(frames):
        assert wait_until(lambda: index - len(observer.infos) < WINDOW and index - len(observer.prefix_done) < AHEAD
                          or observer.lost, spin, 4 * SLOW_S + 10), f"frame {index} not taken; lost: {observer.lost}"
        observer.publish(frame)


def timeline(observer, t0) -> list:
    """What happened when (seconds from the first frame): published, through the prefix, answered."""
    return [("published", round(t - t0, 2)) for t in observer.published] + \
        [("prefix done", round(t - t0, 2)) for t in observer.prefix_done] + \
        [("answered", round(i["received"] - t0, 2), i["suffix_ms"], i["queue_ms"]) for i in observer.infos]


def test_a_suffix_slower_than_two_seconds_per_frame_under_lossless_loses_nothing(domain, tmp_path):
    import rclpy
    from rclpy.executors import SingleThreadedExecutor
    from hybrid_vla_ros.ros.launch_support.supervise import stop_processes
    procs = start_graph(tmp_path)
    context = rclpy.Context()
    rclpy.init(context=context)
    executor = SingleThreadedExecutor(context=context)
    observer = Observer(context)
    executor.add_node(observer.node)
    spin = lambda t: executor.spin_once(timeout_sec=t)  # noqa: E731
    try:
        # spinning nodes (diagnostics come from the executor, after configure + activate) with matched cameras
        up = lambda: ({"hybrid_vla_prefix", "hybrid_vla_suffix"} <= set(observer.heard) and  # noqa: E731
                      all(p.get_subscription_count() for p in observer.cameras) and observer.linked())
        assert wait_until(lambda: up() or any(p.poll() is not None for p in procs), spin, 90) and up(), \
            f"graph not up: heard from {sorted(observer.heard)}, exit codes {[p.poll() for p in procs]}"
        spec = get_preset("tiny")
        frames = [synthetic_frame(spec, seq, stamp_ns=(seq + 1) * 100_000_000) for seq in range(FRAMES)]
        t0 = time.monotonic()
        drive(observer, spin, frames)
        assert wait_until(lambda: len(observer.infos) >= FRAMES or observer.lost, spin, WINDOW * SLOW_S + 20)
        done = time.monotonic()
        assert wait_until(lambda: min(observer.heard.values()) > done + 0.1, spin, 5)  # counters after the end
        wait_until(lambda: False, spin, 0.5)   # anything late (a loss reported after the last frame)
    finally:
        executor.remove_node(observer.node)
        executor.shutdown()
        observer.node.destroy_node()
        rclpy.shutdown(context=context)
        stop_processes(procs)
    status = observer.status
    assert observer.lost == [], (observer.lost, timeline(observer, t0))
    assert [int(i["stamp_ns"]) for i in observer.infos] == [f.stamp_ns for f in frames]   # all, in order
    assert {i["transport"] for i in observer.infos} == {"shm"}
    assert min(float(i["suffix_ms"]) for i in observer.infos) > 2000   # slower than 2 s per frame, each
    assert time.monotonic() - t0 > FRAMES * SLOW_S
    # the prefix waited on a READY ring slot for most of a slow frame (a ring that took READY slots back after
    # 1 s, whatever its reader did, lost that frame)
    assert max(done - sent for sent, done in zip(observer.published, observer.prefix_done)) > 1.5
    assert status["hybrid_vla_prefix: handover"]["ring_slots_reclaimed"] == "0"
    assert status["hybrid_vla_suffix: rejected_inputs"]["rejected"] == "0", status["hybrid_vla_suffix: rejected_inputs"]
    for node in ("hybrid_vla_prefix", "hybrid_vla_suffix"):
        assert status[f"{node}: drops"]["dropped"] == "0", status[f"{node}: drops"]
        assert status[f"{node}: rejected_inputs"]["rejected"] == "0", status[f"{node}: rejected_inputs"]
    limits = status["hybrid_vla_suffix: time_limits"]
    assert limits["max_output_age_source"].startswith("auto") and float(limits["max_output_age_ms"]) > 5 * 2000
