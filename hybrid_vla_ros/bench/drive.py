"""A live drive for the reliability benchmarks: the graph in its own process tree (`hybrid-vla graph`, one
process or supervised processes), a camera that publishes synthetic frames at a fixed rate with the current
time as stamp, and an observer of everything each frame can become: a trajectory, a frame handed over by
the prefix, or a loss reported by a node (~/debug/dropped_frames). Also samples the tree's RSS and open
file descriptors."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from ..model.inputs import synthetic_camera_frame
from ..model.presets import get_preset

CAMERA_TOPICS = ("/faults/camera0/image_raw", "/faults/camera1/image_raw", "/faults/camera2/image_raw")
NODE_NAMES = ("hybrid_vla_prefix", "hybrid_vla_suffix", "hybrid_vla_scheduler")


def graph_config(preset: str, directory: Path, standby: bool = False) -> Path:
    """The shipped defaults with the camera topics of this drive, the `latest` input policy of a live car
    and the small model; standby: the suffix with its warm standby (and the inline handover both can read)."""
    from ..ros.launch_support.bringup import graph_params, write_combined_config
    spec = get_preset(preset)
    zone = {"model.preset": preset, "partition_point": 2, "dynamic_zone_min": 1, "dynamic_zone_max": 3,
            "diagnostics_period_s": 0.5}
    overrides = {
        "hybrid_vla_prefix": {**zone, "camera_topics": list(CAMERA_TOPICS[:spec.num_cameras]), "image_transport": "raw",
                              "input_policy": "latest", "use_kinematic_state": False},
        "hybrid_vla_suffix": {**zone, "frame_id": "base_link", "output_type": "path", "warm_standby": standby},
        "hybrid_vla_scheduler": {"model.preset": preset, "initial_partition": 2, "dynamic_zone_min": 1,
                                 "dynamic_zone_max": 3, "policy": "simple", "hysteresis": 10.0,
                                 "backlog_threshold": 1000}}  # the partition stays put: a move is not a fault
    if standby:
        overrides["hybrid_vla_prefix"]["boundary_transport"] = "inline"
    return write_combined_config(graph_params(overrides=overrides), directory / "graph.param.yaml")


class GraphProcess:
    """`hybrid-vla graph [--processes]` in a session of its own; stopped with SIGINT like a terminal would."""

    def __init__(self, config: Path, processes: bool, env: dict):
        cmd = [sys.executable, "-m", "hybrid_vla_ros.cli", "graph", "--config", str(config)]
        self.proc = subprocess.Popen(cmd + (["--processes"] if processes else []), env=env, start_new_session=True)

    def node_pid(self, node: str) -> int | None:
        """The pid of the child running `node` (--processes; the standby suffix by its own name), or None."""
        import psutil
        from ..ros.topics import STANDBY_NODE
        for child in psutil.Process(self.proc.pid).children(recursive=True):
            try:
                cmdline = child.cmdline()
                if node in cmdline and (node == STANDBY_NODE or STANDBY_NODE not in cmdline):
                    return child.pid
            except psutil.Error:
                continue
        return None

    def tree_usage(self) -> tuple[int, int]:
        """(RSS bytes, open file descriptors) summed over the graph's process tree."""
        import psutil
        rss = fds = 0
        root = psutil.Process(self.proc.pid)
        for proc in [root] + root.children(recursive=True):
            try:
                rss += proc.memory_info().rss
                fds += proc.num_fds()
            except psutil.Error:
                continue
        return rss, fds

    def stop(self, timeout_s: float = 30.0) -> int:
        if self.proc.poll() is None:
            os.killpg(self.proc.pid, signal.SIGINT)
        try:
            return self.proc.wait(timeout_s)
        except subprocess.TimeoutExpired:
            os.killpg(self.proc.pid, signal.SIGKILL)
            return self.proc.wait(10)


@dataclass
class Ledger:
    """What became of every frame, by stamp, with the observer's receive times (monotonic s)."""
    published: dict = field(default_factory=dict)   # stamp -> publish time
    delivered: dict = field(default_factory=dict)   # stamp -> trajectory receive time
    handed: dict = field(default_factory=dict)      # stamp -> prefix frame_info receive time
    lost: dict = field(default_factory=dict)        # stamp -> "node: kind reason" (first report)
    published_twice: int = 0                        # trajectories of a stamp already delivered
    partitions: list = field(default_factory=list)  # (time, partition) from the prefix's frame infos
    # the prefix's diagnostics, in arrival order: (pid, ((images its callback took, stamp of the last), ...) per
    # camera); what DDS shed before the prefix saw it (bench/faults/accounting.py shed_by_dds)
    prefix_cameras: list = field(default_factory=list)


class Camera:
    """The bench process's rclpy side: cameras out, trajectories, frame infos and loss reports in."""

    def __init__(self, preset: str):
        import rclpy
        from diagnostic_msgs.msg import DiagnosticStatus
        from nav_msgs.msg import Path as PathMsg
        from rclpy.executors import SingleThreadedExecutor
        from rclpy.node import Node
        from rclpy.qos import qos_profile_sensor_data
        from sensor_msgs.msg import Image
        from ..ros.topics import LOST_QOS, PREFIX_INFO_TOPIC, TRAJECTORY_TOPIC
        self.spec = get_preset(preset)
        self.context = rclpy.Context()
        rclpy.init(context=self.context)
        self.node = Node("hybrid_vla_faults_bench", context=self.context)
        self.executor = SingleThreadedExecutor(context=self.context)
        self.executor.add_node(self.node)
        self.pubs = [self.node.create_publisher(Image, t, qos_profile_sensor_data)
                     for t in CAMERA_TOPICS[:self.spec.num_cameras]]
        self.ledger = Ledger()
        sub = self.node.create_subscription
        sub(PathMsg, TRAJECTORY_TOPIC, self._on_trajectory, 100)
        sub(DiagnosticStatus, PREFIX_INFO_TOPIC, self._on_frame_info, 100)
        for node in ("hybrid_vla_prefix", "hybrid_vla_suffix"):
            sub(DiagnosticStatus, f"/{node}/debug/dropped_frames", self._on_lost, LOST_QOS)
        from diagnostic_msgs.msg import DiagnosticArray
        sub(DiagnosticArray, "/diagnostics", self._on_diagnostics, 10)
        self.prefix_images = 0  # camera images the prefix's callbacks got (its diagnostics; one incarnation)
        frame = synthetic_camera_frame(self.spec, 0)
        from ..ros import messages
        self.messages = [messages.array_to_image(np.ascontiguousarray(img), Image()) for img in frame.images]

    def _on_trajectory(self, msg) -> None:
        from ..ros.messages import stamp_to_ns
        stamp = stamp_to_ns(msg.header.stamp)
        self.ledger.published_twice += stamp in self.ledger.delivered
        self.ledger.delivered.setdefault(stamp, time.monotonic())

    def _on_frame_info(self, msg) -> None:
        values = {kv.key: kv.value for kv in msg.values}
        self.ledger.handed.setdefault(int(values["stamp_ns"]), time.monotonic())
        self.ledger.partitions.append((time.monotonic(), int(values["partition"])))

    def _on_lost(self, msg) -> None:
        values = {kv.key: kv.value for kv in msg.values}
        self.ledger.lost.setdefault(int(values["stamp_ns"]), f"{msg.name} {values.get('reason', '')}")

    def _on_diagnostics(self, msg) -> None:
        for status in msg.status:
            values = {kv.key: kv.value for kv in status.values}
            if status.name.startswith("hybrid_vla_prefix") and "images_received" in values:
                self.prefix_images = int(values["images_received"])
                if "pid" in values and "images_taken.0" in values:
                    self.ledger.prefix_cameras.append((int(values["pid"]), tuple(
                        (int(values[f"images_taken.{c}"]), int(values[f"last_image_stamp_ns.{c}"]))
                        for c in range(self.spec.num_cameras))))

    def spin(self, seconds: float) -> None:
        from ..ros.launch_support.session import spin_ready
        end = time.monotonic() + seconds
        while time.monotonic() < end:
            spin_ready(self.executor, max(0.0, min(0.01, end - time.monotonic())))

    def publish(self) -> int:
        """One frame: every camera with the same stamp (now, wall clock). -> the stamp."""
        from ..ros.messages import ns_to_stamp
        stamp = time.time_ns()
        for pub, msg in zip(self.pubs, self.messages):
            ns_to_stamp(stamp, msg.header.stamp)
            pub.publish(msg)
        self.ledger.published[stamp] = time.monotonic()
        return stamp

    def drive(self, seconds: float, rate_hz: float, until=None) -> None:
        """Publish at rate_hz for `seconds` (or until until() is true), serving callbacks in between."""
        end, period = time.monotonic() + seconds, 1.0 / rate_hz
        while time.monotonic() < end and not (until and until()):
            next_at = time.monotonic() + period
            self.publish()
            self.spin(max(0.0, next_at - time.monotonic()))

    def close(self) -> None:
        import rclpy
        self.executor.shutdown()
        self.node.destroy_node()
        rclpy.shutdown(context=self.context)
