"""/diagnostics and the processing-time topic of a stage node (Autoware's conventions), and the matching of
its publishers and subscriptions (below: `EndpointWatch`)."""

from __future__ import annotations

import copy
from typing import NamedTuple

from diagnostic_msgs.msg import DiagnosticArray, DiagnosticStatus, KeyValue
from rclpy.qos import QoSCompatibility, QoSProfile, qos_check_compatible
from std_msgs.msg import Float64

try:
    from rclpy.duration import Infinite as INFINITE
except ImportError:   # Humble: the value rmw reports as infinite
    from rclpy.duration import Duration
    INFINITE = Duration(seconds=2**31 - 1, nanoseconds=999_999_999)
try:
    from rclpy.event_handler import PublisherEventCallbacks, SubscriptionEventCallbacks
except ImportError:   # Humble
    from rclpy.qos_event import PublisherEventCallbacks, SubscriptionEventCallbacks

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
        checks.append(self.node.endpoints.check())   # the stage node's publishers and subscriptions (below)
        for check, level, message, values in checks:
            msg.status.append(DiagnosticStatus(
                level=self.LEVELS[level], name=f"{self.node.get_name()}: {check}", message=message,
                hardware_id=self.node.get_name(), values=[KeyValue(key=k, value=str(v)) for k, v in values.items()]))
        self.pub.publish(msg)


def cpu_load_check(cores: list[int] | None) -> tuple:
    """The `cpu_load` check: the mean load of `cores` (all where None) since the last call (psutil)."""
    import psutil
    loads = psutil.cpu_percent(percpu=True)
    cores = cores or list(range(len(loads)))
    load = sum(loads[c] for c in cores if c < len(loads)) / max(1, len(cores))
    return ("cpu_load", 0, f"{load:.0f}% on cores {cores}", {"cpu_load_percent": f"{load:.1f}"})


def publish_frame_info(pub, node_name: str, state, waits: dict | None = None) -> None:
    """The prefix's per-frame info (~/debug/frame_info): stamp, seq, the cut and the prefix time of a state, and
    what the frame waited before the prefix took it (waits: to_prefix_ms from its arrival, of which slot_wait_ms
    for an in-flight slot and just_in_time_ms for the suffix to free up)."""
    from diagnostic_msgs.msg import DiagnosticStatus, KeyValue
    pub.publish(DiagnosticStatus(name=f"{node_name}: frame", values=[
        KeyValue(key=k, value=str(v)) for k, v in {
            "stamp_ns": state.stamp_ns, "seq": state.seq, "partition": state.partition,
            "prefix_ms": f"{state.timings['prefix_ms']:.3f}", **(waits or {})}.items()]))


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


# ---- publishers and subscriptions: matching watched without rclpy's default event handlers ---------------
# A node's publishers and subscriptions without rclpy's default QoS event handlers, their matching watched
# from a timer the node already has.
#
# rclpy gives every publisher and subscription two event handlers by default (incompatible QoS, incompatible
# type) whose only job is a warning. Each is a waitable that rclpy's SingleThreadedExecutor re-adds to its wait
# set, in Python, at every wake-up: 68 of them in the one-process graph, about half of its main thread's CPU
# per frame (docs/BENCHMARKS.md, issue 40). The package's nodes create their endpoints without them
# (`quiet_events`) and keep the warning by asking the ROS graph instead (`EndpointWatch.check`, from the
# diagnostics timer): an endpoint that matched fewer peers than the graph lists on its topic is explained by
# the listed peer whose type differs or whose QoS is incompatible, logged once and reported as a WARN status.
# A peer listed but not yet matched for no such reason (discovery still settling) is not reported.


def quiet_events(kind: str) -> dict:
    """create_publisher / create_subscription keyword arguments: no default event handlers."""
    cls = PublisherEventCallbacks if kind == "publisher" else SubscriptionEventCallbacks
    return {"event_callbacks": cls(use_default_callbacks=False)}


class Endpoint(NamedTuple):
    kind: str        # "publisher" or "subscription"
    entity: object
    type_name: str   # pkg/msg/Name
    qos: QoSProfile


def type_name(msg_type) -> str:
    return f"{msg_type.__module__.split('.')[0]}/msg/{msg_type.__name__}"


def as_profile(qos) -> QoSProfile:
    """The QoS as the ROS graph reports an endpoint's (get_*_info_by_topic): a duration left unset (0) is
    Infinite there, and compared as 0 it would read as a deadline the peer lacks."""
    profile = copy.copy(qos) if isinstance(qos, QoSProfile) else QoSProfile(depth=int(qos))
    for name in ("deadline", "lifespan", "liveliness_lease_duration"):
        if getattr(profile, name).nanoseconds == 0:
            setattr(profile, name, INFINITE)
    return profile


def matched_peers(node, entity) -> int:
    """How many peers a publisher (subscriptions) or subscription (publishers) has matched; for a subscription on an
    rclpy without the matched count (Humble), the publishers the ROS graph lists on its topic."""
    if hasattr(entity, "get_subscription_count"):
        return entity.get_subscription_count()
    count = getattr(entity, "get_publisher_count", None)
    return count() if count is not None else node.count_publishers(entity.topic_name)


class EndpointWatch:
    """A node's publishers and subscriptions made through it; `check()` -> a diagnostics check (name, level, message,
    values) naming each peer that cannot match and why; a new one is logged once."""

    def __init__(self, node):
        self.node, self.endpoints, self.reported = node, [], set()

    def publisher(self, msg_type, topic: str, qos, create=None):
        """A publisher without default event handlers, watched. create: the node's create_publisher unless
        given (a lifecycle node's create_lifecycle_publisher)."""
        pub = (create or self.node.create_publisher)(msg_type, topic, qos, **quiet_events("publisher"))
        self.endpoints.append(Endpoint("publisher", pub, type_name(msg_type), as_profile(qos)))
        return pub

    def subscription(self, msg_type, topic: str, callback, qos):
        """A subscription without default event handlers, watched."""
        sub = self.node.create_subscription(msg_type, topic, callback, qos, **quiet_events("subscription"))
        self.endpoints.append(Endpoint("subscription", sub, type_name(msg_type), as_profile(qos)))
        return sub

    def check(self) -> tuple[str, int, str, dict]:
        """Values: incompatible_peers, and per endpoint `<kind>:<topic>` the peers it matched (0: nothing can pass
        yet; a publisher's count is its readers as it knows them, the one that tells whether a message gets out)."""
        problems, values = [], {}
        for endpoint in self.endpoints:
            matched, found = self._problems(endpoint)
            problems += found
            values[f"{endpoint.kind}:{endpoint.entity.topic_name}"] = matched
        for problem in problems:
            if problem not in self.reported:
                self.node.get_logger().warning(problem)
        self.reported = set(problems)   # a peer that went away and comes back is logged again
        message = "; ".join(problems) if problems else f"{len(self.endpoints)} publishers and subscriptions"
        return "endpoints", int(bool(problems)), message, {"incompatible_peers": len(problems), **values}

    def _problems(self, endpoint: Endpoint) -> tuple[int, list[str]]:
        """-> (peers matched, problems). Cheap when all is well: two counts; the endpoint infos (with QoS) only
        when a peer is unmatched."""
        node, topic = self.node, endpoint.entity.topic_name
        matched = matched_peers(node, endpoint.entity)
        if endpoint.kind == "publisher":
            listed, infos = node.count_subscribers, node.get_subscriptions_info_by_topic
        else:
            listed, infos = node.count_publishers, node.get_publishers_info_by_topic
        exact = endpoint.kind == "publisher" or hasattr(endpoint.entity, "get_publisher_count")   # Humble: not
        if not exact or matched >= listed(topic):   # a subscription's (its count is then the graph's)
            return matched, []
        return matched, [reason for peer in infos(topic) if (reason := self._mismatch(endpoint, peer))]

    def _mismatch(self, endpoint: Endpoint, peer) -> str | None:
        peer_name = f"{peer.node_namespace.rstrip('/')}/{peer.node_name}" if "UNKNOWN" not in peer.node_name \
            else "a node not yet named (discovery)"
        peer_kind = "subscription" if endpoint.kind == "publisher" else "publisher"
        where = f"topic '{endpoint.entity.topic_name}': {peer_kind} of {peer_name}"
        if peer.topic_type != endpoint.type_name:
            return f"{where} has type {peer.topic_type}, this {endpoint.kind} {endpoint.type_name}: no messages pass"
        offered, requested = (endpoint.qos, peer.qos_profile) if endpoint.kind == "publisher" else \
            (peer.qos_profile, endpoint.qos)
        compatibility, reason = qos_check_compatible(offered, requested)
        if compatibility == QoSCompatibility.ERROR:
            return f"{where} has incompatible QoS ({reason.replace('ERROR: ', '').strip('; ')}): no messages pass"
        return None


class EndpointReports:
    """The reading side of EndpointWatch: the `<kind>:<topic>` counts the package's nodes report ("<node>: endpoints"
    on /diagnostics). A peer's writer counting a node's reader does not mean that reader has matched the writer
    (DDS matches each side separately; a best-effort message sent before is lost); the node's own count, once it
    covers every peer the ROS graph lists (this caller's included), does. Counts are not per peer: a peer whose QoS
    cannot match keeps it short (EndpointWatch names it). On Humble a subscription reports the graph's count."""

    def __init__(self, node):
        self.node, self.values = node, {}   # node name -> its latest endpoints values
        self.sub = node.create_subscription(DiagnosticArray, "/diagnostics", self._on_diagnostics, 50,
                                            **quiet_events("subscription"))

    def _on_diagnostics(self, msg) -> None:
        for status in msg.status:
            if status.name.endswith(": endpoints"):
                self.values[status.name.partition(":")[0]] = {kv.key: kv.value for kv in status.values}

    def matched(self, node: str, kind: str, *topics: str) -> bool:
        """Each topic's `kind` ("publisher" / "subscription") endpoint of `node` reports as many matched peers as
        the ROS graph lists on it (its publishers for a subscription, its subscriptions for a publisher), and one
        at least."""
        values = self.values.get(node, {})
        listed = self.node.count_publishers if kind == "subscription" else self.node.count_subscribers
        return all(int(values.get(f"{kind}:{topic}", 0)) >= max(1, listed(topic)) for topic in topics)

    def close(self) -> None:
        """The /diagnostics subscription gone (a waitable less in the executor); the values kept."""
        if self.sub is not None:
            self.node.destroy_subscription(self.sub)
            self.sub = None
