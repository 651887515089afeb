"""Recording topics into a rosbag2 folder the way `ros2 bag record` does: each topic is subscribed once a
publisher of it is seen, with a QoS that matches every publisher (best effort when any of them is: camera
drivers publish best effort, and a reliable subscription would get nothing), the offered QoS is stored in
the bag, and each message is stamped with its receive time on the recorder's clock. Where every publisher offers
transient local (/tf_static), so does the subscription: latched samples sent before recording are recorded.

The recorder reports its subscriptions' matched writers on /diagnostics as the package's nodes do ("<node>:
endpoints", `subscription:<topic>`; ros/nodes/diagnostics.py), so that a replayer in the same graph waits until
the recorder's reader has matched its writer: a best-effort message sent before would be lost to the bag (seen:
a recording one camera message short when the recorder's reader was listed but not yet matched)."""

from __future__ import annotations

from pathlib import Path

from diagnostic_msgs.msg import DiagnosticArray, DiagnosticStatus, KeyValue
from rclpy.qos import ReliabilityPolicy

from ...context import camera_info_topic
from ..nodes.diagnostics import matched_peers, quiet_events
from .storage import BagWriter, message_class, qos_from_bag, qos_to_bag

REPORT_PERIOD_S = 0.25   # the endpoints report's period (a replayer waits for it: ros/bags/replay.py)
CONTEXT_TYPES = {"camera_info": "sensor_msgs/msg/CameraInfo", "/tf_static": "tf2_msgs/msg/TFMessage"}


def with_context(topics: dict[str, str | None], camera_topics: list[str]) -> dict[str, str | None]:
    """`topics` plus what a frame's context is made of (ros/inputs/context_input.py): each camera's CameraInfo (its
    image_transport sibling, `<ns>/camera_info`) and /tf_static."""
    extra = {camera_info_topic(t): CONTEXT_TYPES["camera_info"] for t in camera_topics}
    return {**topics, **extra, "/tf_static": CONTEXT_TYPES["/tf_static"]}


class Recorder:
    """topics: name -> message type, or None to take the type its publishers advertise. discover() (run by
    a timer every `discover_period_s`) subscribes what newly has publishers; a topic whose publishers change
    to best effort is subscribed again, best effort."""

    def __init__(self, node, path: str | Path, topics: dict[str, str | None], storage: str = "mcap",
                 depth: int = 100, discover_period_s: float = 0.1):
        self.node, self.depth = node, depth
        self.writer = BagWriter(path, storage)
        self.wanted = dict(topics)
        self.closed = False
        self.subscriptions: dict[str, tuple[object, bool]] = {}  # topic -> (subscription, reliable)
        self.timer = node.create_timer(discover_period_s, self.discover)
        self.reports = node.create_publisher(DiagnosticArray, "/diagnostics", 10, **quiet_events("publisher"))
        self.report_timer = node.create_timer(REPORT_PERIOD_S, self.report)
        self.discover()

    def report(self) -> None:
        """Each subscription's matched writers, as the package's nodes report theirs (EndpointReports reads it)."""
        values = [KeyValue(key=f"subscription:{topic}", value=str(matched_peers(self.node, sub)))
                  for topic, (sub, _) in self.subscriptions.items()]
        status = DiagnosticStatus(name=f"{self.node.get_name()}: endpoints", message="recorder",
                                  hardware_id=self.node.get_name(), values=values)
        msg = DiagnosticArray(status=[status])
        msg.header.stamp = self.node.get_clock().now().to_msg()
        self.reports.publish(msg)

    def _publishers(self, topic: str):
        return self.node.get_publishers_info_by_topic(topic)

    def discover(self) -> None:
        for topic, msgtype in self.wanted.items():
            infos = self._publishers(topic)
            if not infos:
                continue
            offered = [qos_to_bag(i.qos_profile) for i in infos]
            qos = qos_from_bag(offered, self.depth)
            reliable = qos.reliability == ReliabilityPolicy.RELIABLE
            current = self.subscriptions.get(topic)
            if current is not None and (current[1] == reliable or not current[1]):
                continue  # already matching every publisher
            msgtype = msgtype or infos[0].topic_type
            if current is not None:
                self.node.destroy_subscription(current[0])
            self.writer.declare(topic, offered)
            subscription = self.node.create_subscription(
                message_class(msgtype), topic,
                lambda raw, t=topic, m=msgtype: self.closed or
                self.writer.write(t, m, self.node.get_clock().now().nanoseconds, raw),
                qos, raw=True, **quiet_events("subscription"))   # the offered QoS: compatible by construction
            self.subscriptions[topic] = (subscription, reliable)

    def messages(self) -> int:
        """Messages written so far, every topic."""
        return sum(self.writer.count.values())

    def close(self) -> dict[str, int]:
        """Stop writing and finish the bag. The subscriptions go with the node (destroying them here could wait
        forever on an executor's suspended wait: session.RELEASE_NOTE); nothing is written after this."""
        self.timer.cancel()
        self.report_timer.cancel()
        self.closed = True
        self.writer.close()
        return dict(self.writer.count)
