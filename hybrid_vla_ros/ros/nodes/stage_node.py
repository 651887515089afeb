"""What the prefix and suffix nodes share (`StageNode`): parameters, health counters, the process-wide model,
the dynamic zone, rejections counted and reported, configure/cleanup of the stage's ROS entities, and the model
kind's side that serves it (`serving`: ros/nodes/serving)."""

from __future__ import annotations

from diagnostic_msgs.msg import DiagnosticStatus, KeyValue
from rclpy.lifecycle import LifecycleState, TransitionCallbackReturn

from ...engine.cpu import check_allowed
from ...engine.pipeline.worker import StageHealth
from ...engine.scheduling.partition import Zone
from ...errors import HybridVLAError
from .diagnostics import EndpointWatch
from .lifecycle import ManagedNode
from .model_cache import shared_model
from .parameters import ParameterTable
from ..params import chosen_cores
from ..topics import LOST_QOS


class StageNode(ManagedNode):
    """What the prefix and suffix nodes share: typed parameters, health counters, the process-wide model, the
    dynamic zone, partition_point validation, rejections that are logged and counted, and the lifecycle
    (ros2/demos lifecycle_py): __init__ declares parameters only; on_configure loads the model and builds the
    stage, handover, worker, publishers, subscriptions and timers (`configure_stage`); on_activate starts
    taking inputs; on_deactivate stops taking them (frames in flight finish); on_cleanup / on_shutdown free
    everything (`release_stage`)."""

    def __init__(self, node_name: str, table: str, **kwargs):
        self.health = StageHealth()
        self.model = self.zone = self.stage = self.lost_pub = self.serving = self.diagnostics = None
        self.active, self.table = False, table
        self._entities: list = []  # publishers, subscriptions, timers made by on_configure
        self.endpoints = EndpointWatch(self)  # their matching, checked with the diagnostics
        super().__init__(node_name, **kwargs)
        self.params = p = ParameterTable(self, table, self._check_param, self._on_param, self.health)
        self.health.warn_ms, self.health.error_after = p["processing_time_warn_ms"], p["error_after_frames"]

    # ---- lifecycle -------------------------------------------------------------------------------------
    def on_configure(self, state: LifecycleState) -> TransitionCallbackReturn:
        p = self.params
        try:   # cores first: refused before the model loads, with the cores asked and those allowed
            check_allowed(chosen_cores(p["cores"]))
            self.lost_pub = self.configured_publisher(DiagnosticStatus, "~/debug/dropped_frames", LOST_QOS)
            self.health.listener = self._report_lost
            self.model = shared_model(p["model.preset"], p["model.checkpoint"])
            self.zone = Zone.from_parameters(p["dynamic_zone_min"], p["dynamic_zone_max"], p["partition_point"],
                                             self.model.num_blocks)
            self.configure_output()   # the suffix's output path, the same for every model (serving/output.py)
            self.configure_stage()    # the model kind's side (serving/), and what the node builds around it
        except HybridVLAError as exc:   # a worker that could not start (WorkerStartError) too
            self._release()
            return self.configure_failed(exc)
        return TransitionCallbackReturn.SUCCESS

    def configure_stage(self) -> None:
        raise NotImplementedError

    def activated(self) -> None:
        """Once active: the diagnostics at once (the prefix learns where a suffix is before the first frame), and
        whatever the kind's side does then."""
        if self.diagnostics is not None:
            self.diagnostics.publish()
        if self.serving is not None:
            self.serving.activated()

    def configure_output(self) -> None:
        """What the node builds for every model before its stage (the suffix: its output path)."""

    def _report_lost(self, kind: str, reason: str, stamp_ns: int) -> None:
        """One frame lost in this node (dropped, rejected or failed), on ~/debug/dropped_frames: with the
        trajectories and frame infos, every camera frame can be accounted for (bench --scenario faults)."""
        pub = self.lost_pub
        if pub is None:
            return
        pub.publish(DiagnosticStatus(name=f"{self.get_name()}: {kind}", message=reason, values=[
            KeyValue(key="stamp_ns", value=str(stamp_ns)), KeyValue(key="kind", value=kind),
            KeyValue(key="reason", value=reason)]))

    def release_stage(self) -> None:
        """Stop the worker and free what configure_stage made besides the tracked ROS entities."""

    def _release(self) -> None:
        self.active = False
        self.release_stage()
        if self.serving is not None:
            self.serving.close()
            self.serving = None
        for entity in self._entities:
            {"publisher": self.destroy_publisher, "subscription": self.destroy_subscription,
             "timer": self.destroy_timer, "service": self.destroy_service}[entity[0]](entity[1])
        self._entities.clear()
        self.endpoints = EndpointWatch(self)
        self.stage = self.lost_pub = self.diagnostics = None

    # ---- ROS entities that live from configure to cleanup ---------------------------------------------
    def configured_publisher(self, msg_type, topic: str, qos):
        pub = self.endpoints.publisher(msg_type, topic, qos)   # no default event handlers: diagnostics.EndpointWatch
        self._entities.append(("publisher", pub))
        return pub

    def configured_subscription(self, msg_type, topic: str, callback, qos):
        sub = self.endpoints.subscription(msg_type, topic, callback, qos)
        self._entities.append(("subscription", sub))
        return sub

    def configured_timer(self, *args):
        self._entities.append(("timer", self.create_timer(*args)))

    def configured_service(self, *args):
        self._entities.append(("service", self.create_service(*args)))

    def accepting(self, reason: str = "inactive", stamp_ns: int | None = None) -> bool:
        """Inputs are taken only while active; one arriving otherwise is counted as a drop (with its stamp when
        known, so it is accounted for on ~/debug/dropped_frames)."""
        if not self.active:
            self.health.drop(reason, stamp_ns)
        return self.active

    # ---- parameters ------------------------------------------------------------------------------------
    def _check_param(self, name: str, value) -> None:
        if name == "partition_point" and self.zone is not None:
            self.zone.check(value, self.model.num_blocks, "partition_point")

    def _on_param(self, name: str, value) -> None:
        if name == "partition_point" and self.stage is not None:
            self.stage.set_partition(value)  # read once per frame by the stage: applies at a frame boundary

    def _on_worker_error(self, exc: Exception) -> None:
        """A frame's unexpected failure (the worker goes on; counted in the 'failures' diagnostic)."""
        self.get_logger().error(f"frame failed ({type(exc).__name__}): {exc}", throttle_duration_sec=1.0)

    def _reject(self, reason: str, exc: Exception, stamp_ns: int | None = None) -> None:
        self.health.reject(reason, stamp_ns)
        self.get_logger().warning(f"rejected ({reason}): {exc}", throttle_duration_sec=1.0)

