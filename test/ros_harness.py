"""Test harness: the real graph (rclpy over loopback DDS) on the tiny model, plus a driver node."""

import time

import numpy as np

from hybrid_vla_ros.model.inputs import synthetic_frame
from hybrid_vla_ros.model.presets import get_preset
from hybrid_vla_ros.ros.nodes.diagnostics import EndpointReports  # noqa: F401 (the tests' import of it)

from domains import domain_id  # noqa: F401 (the tests' import of it)

CAMERAS = ["/test/cam0/image", "/test/cam1/image"]
ZONE = {"model.preset": "tiny", "partition_point": 2, "dynamic_zone_min": 1, "dynamic_zone_max": 3}
TINY_OVERRIDES = {
    "hybrid_vla_prefix": {**ZONE, "camera_topics": CAMERAS, "image_transport": "raw", "input_policy": "lossless",
                          "use_kinematic_state": False,
                          "diagnostics_period_s": 0.2, "max_in_flight": 2},
    # Lossless replays queue frames on purpose (every frame is wanted, however late): no output age limit here;
    # test_ros_graph's stale-output test sets one.
    # nav_msgs/Path whatever is installed: these tests read the poses; the Autoware output (real message
    # packages, test_autoware_msgs.py) and the Path fallback when they are missing have tests of their own.
    # fp32 explicitly: the shipped suffix is dtype auto (bf16 where native), and these tests compare with the
    # unsplit fp32 model to 1e-5; the bf16 tests set dtype themselves.
    # output_retime false: the plan as predicted, at the camera stamp, which these tests compare with the unsplit
    # model (and their synthetic stamps are decades old); test_retime.py tests the re-timed output.
    "hybrid_vla_suffix": {**ZONE, "diagnostics_period_s": 0.2, "frame_id": "base_link", "max_output_age_ms": 0.0,
                          "output_type": "path", "dtype": "fp32", "output_retime": False},
    "hybrid_vla_scheduler": {"model.preset": "tiny", "initial_partition": 2, "dynamic_zone_min": 1,
                             "dynamic_zone_max": 3, "hysteresis": 10.0, "update_period_s": 0.2,
                             "policy": "simple"},
}




def wait_until(predicate, spin, timeout_s=20.0):
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if predicate():
            return True
        spin(0.02)
    return predicate()


class Harness:
    def __init__(self, overrides=None, activate_scheduler=False, cameras=None):
        import rclpy
        from diagnostic_msgs.msg import DiagnosticStatus
        from rclpy.node import Node
        from sensor_msgs.msg import Image
        from std_msgs.msg import UInt8MultiArray
        from hybrid_vla_ros.ros.messages import resolve_trajectory_type
        from hybrid_vla_ros.ros.launch_support.bringup import InProcessGraph, graph_params
        from hybrid_vla_ros.ros.topics import BOUNDARY_QOS, BOUNDARY_TOPIC, TRAJECTORY_TOPIC
        merged = {k: {**v, **(overrides or {}).get(k, {})} for k, v in TINY_OVERRIDES.items()}
        self.context = rclpy.Context()
        rclpy.init(context=self.context)
        self.graph = InProcessGraph(graph_params(overrides=merged), context=self.context,
                                    activate_scheduler=activate_scheduler)
        self.params = merged
        self.spec = get_preset(merged["hybrid_vla_prefix"]["model.preset"])
        self.node = Node("test_driver", context=self.context)
        self.cameras = cameras or CAMERAS   # raw Image topics this driver publishes (a test of compressed topics
                                            # publishes its own; route_harness.py: the model's own camera count)
        self.image_pubs = [self.node.create_publisher(Image, topic, 10) for topic in self.cameras]
        self.boundary_pub = self.node.create_publisher(UInt8MultiArray, BOUNDARY_TOPIC, BOUNDARY_QOS)
        self.infos, self.paths, self.frame_infos = [], [], []
        self.node.create_subscription(DiagnosticStatus, "/hybrid_vla_suffix/debug/trajectory_info",
                                      lambda m: self.infos.append({kv.key: kv.value for kv in m.values}), 50)
        self.node.create_subscription(DiagnosticStatus, "/hybrid_vla_prefix/debug/frame_info",   # the prefix's
                                      lambda m: self.frame_infos.append({kv.key: kv.value for kv in m.values}), 50)
        output, _, _ = resolve_trajectory_type(merged["hybrid_vla_suffix"]["output_type"])  # the suffix's type
        self.node.create_subscription(output, TRAJECTORY_TOPIC, self.paths.append, 50)
        self.graph.executor.add_node(self.node)
        wait_until(lambda: all(p.get_subscription_count() for p in self.image_pubs), self.spin, 10)

    @property
    def prefix(self):
        return self.graph.nodes["hybrid_vla_prefix"]

    @property
    def suffix(self):
        return self.graph.nodes["hybrid_vla_suffix"]

    def spin(self, timeout=0.02):
        self.graph.spin_once(timeout)

    def frame(self, seq):
        return synthetic_frame(self.spec, seq, stamp_ns=(seq + 1) * 100_000_000)

    def publish_images(self, images, stamp_ns, encoding="rgb8"):
        from sensor_msgs.msg import Image
        from hybrid_vla_ros.ros import messages
        for pub, image in zip(self.image_pubs, images):
            msg = messages.array_to_image(np.ascontiguousarray(image), Image())
            msg.encoding = encoding
            messages.ns_to_stamp(stamp_ns, msg.header.stamp)
            pub.publish(msg)

    def send_frame(self, seq, wait=True):
        frame = self.frame(seq)
        before = len(self.infos)
        self.publish_images(frame.images, frame.stamp_ns)
        if wait:
            assert wait_until(lambda: len(self.infos) > before, self.spin), f"no trajectory for frame {seq}"
        return frame

    def served_frames(self) -> list:
        """A list that gets each Frame the prefix serves (waypoint models), as the worker hands it on: its
        ego state, navigation and instruction as the model saw them."""
        served, serve = [], self.prefix.chunk_flow.serve
        self.prefix.chunk_flow.serve = lambda frame, *rest: (served.append(frame), serve(frame, *rest))[1]
        return served

    def settle(self, seconds=0.5):
        end = time.monotonic() + seconds
        while time.monotonic() < end:
            self.spin(0.02)

    def close(self):
        import rclpy
        self.graph.executor.remove_node(self.node)
        self.graph.shutdown()  # shuts the executor down before destroying anything (session.RELEASE_NOTE)
        self.node.destroy_node()
        rclpy.shutdown(context=self.context)


def run_to_end(cmd: list[str], timeout_s: float) -> tuple[int, str]:
    """Run a command in a session of its own until it ends: (exit code, stdout + stderr); a command still running
    after timeout_s is killed with its process group and the test fails with its output's tail."""
    import os
    import subprocess
    import pytest
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, start_new_session=True)
    try:
        out, _ = proc.communicate(timeout=timeout_s)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, 9)
        out, _ = proc.communicate()
        pytest.fail(f"the graph did not end: {out[-3000:]}")
    return proc.returncode, out


def recorded_back_and_demo(summary: dict, stamps: list, bag, config, tmp_path) -> dict:
    """The drive's trajectories recorded back (`hybrid-vla record`'s recorder) and read back, and `hybrid-vla demo
    --config` running the same drive through the graph that file describes. -> demo's summary."""
    import json
    import subprocess
    import sys
    from rclpy.serialization import deserialize_message
    from hybrid_vla_ros.ros.bags.storage import message_class, read_bag
    from hybrid_vla_ros.ros.messages import stamp_to_ns
    from hybrid_vla_ros.ros.topics import TRAJECTORY_TOPIC
    assert summary["recorded"][TRAJECTORY_TOPIC] == len(stamps)
    written = [m for m in read_bag(next((tmp_path / "recorded").parent.glob("recorded*")))[0]
               if m.topic == TRAJECTORY_TOPIC]
    assert sorted(stamp_to_ns(deserialize_message(m.raw, message_class(m.msgtype)).header.stamp)
                  for m in written) == stamps
    out = subprocess.run([sys.executable, "-m", "hybrid_vla_ros.cli", "demo", "--config", str(config), "--bag", str(bag),
                          "--out", str(tmp_path / "demo")], capture_output=True, text=True, timeout=600)
    assert out.returncode == 0, out.stdout + out.stderr
    summary = json.loads((tmp_path / "demo" / "summary.json").read_text())
    assert summary["trajectories"] == len(stamps), out.stdout
    return summary
