"""The driver of a bag-driven graph run (demo, bench, closed loop): a node that replays a bag into the graph,
records the outputs and collects what the summary needs (ros/demo.py drive_graph)."""

from __future__ import annotations

import time
from pathlib import Path

import numpy as np

from .. import messages
from ..nodes.diagnostics import quiet_events
from ..topics import CANDIDATES_TOPIC, LOST_QOS, TRAJECTORY_INFO_TOPIC as INFO_TOPIC, TRAJECTORY_TOPIC
from .record import Recorder
from .replay import Replayer


class Driver:
    """A node that replays a bag into the graph, records the outputs and collects what the summary needs."""

    def __init__(self, context, bag: str | Path, record_to: str | Path | None, storage: str = "mcap",
                 skew_ms: float = 20.0, output_type: str = "auto"):
        from diagnostic_msgs.msg import DiagnosticArray, DiagnosticStatus
        self.output_type = output_type  # the suffix's: which trajectory type to subscribe and record
        from rclpy.node import Node
        self.node = Node("hybrid_vla_demo_driver", context=context,   # a tool in the graph's executor:
                         start_parameter_services=False)   # no 6 services for it to re-add at each wake-up
        self.replayer = Replayer(self.node, bag, skew_ms=skew_ms, quiet=True)
        self.infos: list[dict] = []
        self.first_stamp, self.answered = None, 0   # answers to the bag's frames (stamped from first_stamp on)
        self.trajectories: dict[int, np.ndarray] = {}
        self.rejections: dict[str, dict] = {}
        self.graph_drops: dict[str, int] = {}
        self.sync_discarded = 0
        self.record_to, self.storage, self.recorder = record_to, storage, None
        subscribe = lambda *args: self.node.create_subscription(*args, **quiet_events("subscription"))  # noqa: E731
        subscribe(DiagnosticStatus, INFO_TOPIC, self._on_info, 50)
        subscribe(message_class_of(self._trajectory_type()), TRAJECTORY_TOPIC, self._on_trajectory, 50)
        subscribe(DiagnosticArray, "/diagnostics", self._on_diagnostics, 50)
        self.lost: list[dict] = []  # every frame a node reports lost (~/debug/dropped_frames), with the reason
        for node in ("hybrid_vla_prefix", "hybrid_vla_suffix"):
            subscribe(DiagnosticStatus, f"/{node}/debug/dropped_frames", self._on_lost, LOST_QOS)

    def count_answers_from(self, first_stamp: int):
        """From here on count the answers to the bag's frames (stamped from first_stamp on) -> their count, a
        callable (called at every spin: a count, not a scan)."""
        self.first_stamp = first_stamp
        self.answered = sum(int(i["stamp_ns"]) >= first_stamp for i in self.infos)
        return lambda: self.answered

    def keep_from(self, first_stamp: int) -> None:
        """Forget the readiness probe's answers (stamped before the bag)."""
        self.infos = [i for i in self.infos if int(i["stamp_ns"]) >= first_stamp]
        self.trajectories = {s: xy for s, xy in self.trajectories.items() if s >= first_stamp}
        self.lost = [lost for lost in self.lost if lost["stamp_ns"] >= first_stamp]

    def start_recording(self) -> None:
        if self.record_to:
            self.recorder = Recorder(self.node, self.record_to, {
                TRAJECTORY_TOPIC: self._trajectory_type(), INFO_TOPIC: "diagnostic_msgs/msg/DiagnosticStatus",
                CANDIDATES_TOPIC: None},  # recorded once published (where Autoware's messages are importable)
                self.storage)

    def _trajectory_type(self) -> str:
        _, kind, _ = messages.resolve_trajectory_type(self.output_type)
        return {"autoware": "autoware_planning_msgs/msg/Trajectory",
                "autoware_auto": "autoware_auto_planning_msgs/msg/Trajectory", "path": "nav_msgs/msg/Path"}[kind]

    def _on_info(self, msg) -> None:
        values = {kv.key: kv.value for kv in msg.values}
        values["received"] = time.perf_counter()
        self.infos.append(values)
        if self.first_stamp is not None and int(values["stamp_ns"]) >= self.first_stamp:
            self.answered += 1

    def _on_trajectory(self, msg) -> None:
        poses = getattr(msg, "poses", None) or getattr(msg, "points", [])
        xy = np.array([[p.pose.position.x, p.pose.position.y] for p in poses])
        self.trajectories[messages.stamp_to_ns(msg.header.stamp)] = xy

    def _on_lost(self, msg) -> None:
        values = {kv.key: kv.value for kv in msg.values}
        self.lost.append({"node": msg.name.partition(":")[0], "kind": values.get("kind"),
                          "reason": values.get("reason"), "stamp_ns": int(values.get("stamp_ns") or 0)})

    def _on_diagnostics(self, msg) -> None:
        for status in msg.status:
            node, _, check = status.name.partition(": ")
            values = {kv.key: kv.value for kv in status.values}
            if check == "rejected_inputs":
                self.rejections[node] = values
            elif check == "drops":
                self.graph_drops[node] = int(values.get("dropped", 0))
            elif check == "partition" and "camera_sync_discarded" in values:
                self.sync_discarded = int(values["camera_sync_discarded"])

    def close(self) -> dict:
        counts = self.recorder.close() if self.recorder else {}
        self.node.destroy_node()
        return counts


def message_class_of(msgtype: str):
    from .storage import message_class
    return message_class(msgtype)
