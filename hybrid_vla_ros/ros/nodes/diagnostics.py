"""/diagnostics and the processing-time topic of a stage node (Autoware's conventions)."""

from __future__ import annotations

from diagnostic_msgs.msg import DiagnosticArray, DiagnosticStatus, KeyValue
from std_msgs.msg import Float64

from ...engine.pipeline.worker import StageHealth

PROCESSING_TIME_TOPIC = "~/debug/processing_time_ms"            # Autoware's Float64Stamped
PROCESSING_TIME_FALLBACK = "~/debug/processing_time_ms_float64"  # std_msgs/Float64 where that type is missing


class DiagnosticsPublisher:
    """/diagnostics (status names "<node>: <check>") and the processing time: Autoware's Float64Stamped on
    ~/debug/processing_time_ms when autoware_internal_debug_msgs is importable; otherwise std_msgs/Float64
    under another name (a different type under Autoware's name would clash in Autoware's tools)."""

    LEVELS = {0: DiagnosticStatus.OK, 1: DiagnosticStatus.WARN, 2: DiagnosticStatus.ERROR}

    def __init__(self, node, health: StageHealth, worker, extra=None):
        self.node, self.health, self.worker, self.extra = node, health, worker, extra
        make = getattr(node, "configured_publisher", node.create_publisher)  # a stage node's: freed at cleanup
        self.pub = make(DiagnosticArray, "/diagnostics", 10)
        try:
            from autoware_internal_debug_msgs.msg import Float64Stamped
            self.time_cls, topic = Float64Stamped, PROCESSING_TIME_TOPIC
        except ImportError:
            self.time_cls, topic = Float64, PROCESSING_TIME_FALLBACK
        self.time_pub = make(self.time_cls, topic, 1)

    def publish_time(self, ms: float) -> None:
        msg = self.time_cls(data=float(ms))
        if hasattr(msg, "stamp"):
            msg.stamp = self.node.get_clock().now().to_msg()
        self.time_pub.publish(msg)

    def publish(self) -> None:
        msg = DiagnosticArray()
        msg.header.stamp = self.node.get_clock().now().to_msg()
        checks = self.health.checks(self.worker.backlog()) + [self.health.failure_check(), self.worker.liveness_check()]
        if self.extra:
            checks += self.extra()
        for check, level, message, values in checks:
            msg.status.append(DiagnosticStatus(
                level=self.LEVELS[level], name=f"{self.node.get_name()}: {check}", message=message,
                hardware_id=self.node.get_name(), values=[KeyValue(key=k, value=str(v)) for k, v in values.items()]))
        self.pub.publish(msg)


def publish_frame_info(pub, node_name: str, state) -> None:
    """The prefix's per-frame info (~/debug/frame_info): stamp, seq, the cut and the prefix time of a state."""
    from diagnostic_msgs.msg import DiagnosticStatus, KeyValue
    pub.publish(DiagnosticStatus(name=f"{node_name}: frame", values=[
        KeyValue(key=k, value=str(v)) for k, v in {
            "stamp_ns": state.stamp_ns, "seq": state.seq, "partition": state.partition,
            "prefix_ms": f"{state.timings['prefix_ms']:.3f}"}.items()]))


def publish_trajectory_info(pub, node_name: str, trajectory, values: dict) -> None:
    """The suffix's per-trajectory info (~/debug/trajectory_info): stamp, seq, the cut and the stage's timings."""
    from diagnostic_msgs.msg import DiagnosticStatus, KeyValue
    pub.publish(DiagnosticStatus(name=f"{node_name}: trajectory", values=[
        KeyValue(key=k, value=str(v)) for k, v in {
            "stamp_ns": trajectory.stamp_ns, "seq": trajectory.seq, "partition": trajectory.partition,
            **{f"head_{k}": v for k, v in getattr(trajectory, "extras", {}).items()}, **values}.items()]))


def reported_shm_domains(msg: DiagnosticArray) -> dict[str, int]:
    """The suffix nodes' handover reports in a /diagnostics message ("<node>: handover", receives_shm_domain,
    suffix_node.py): node name -> the shared-memory domain it can reach (a value no hex number: left out)."""
    reported = {}
    for status in msg.status:
        values = {kv.key: kv.value for kv in status.values}
        if status.name.endswith(": handover") and "receives_shm_domain" in values:
            try:
                reported[status.name.rsplit(": ", 1)[0]] = int(values["receives_shm_domain"], 16)
            except ValueError:
                continue
    return reported
