"""Shared by the three nodes: typed parameter declaration from the table, run-time validation,
/diagnostics publishing, and one model per process (prefix and suffix in one process share weights)."""

from __future__ import annotations

import threading

from diagnostic_msgs.msg import DiagnosticArray, DiagnosticStatus, KeyValue
from rcl_interfaces.msg import FloatingPointRange, IntegerRange, ParameterDescriptor, SetParametersResult
from rclpy.lifecycle import LifecycleNode, LifecycleState, TransitionCallbackReturn
from rclpy.parameter import Parameter
from std_msgs.msg import Float64

from ..engine.partition import Zone
from ..engine.worker import StageHealth
from ..errors import ConfigError, HybridVLAError, expect
from ..model.load import load_vla
from .params import NODE_PARAMS, rclpy_own

PARAM_TYPES = {"int": Parameter.Type.INTEGER, "double": Parameter.Type.DOUBLE, "bool": Parameter.Type.BOOL,
               "string": Parameter.Type.STRING, "int_array": Parameter.Type.INTEGER_ARRAY,
               "string_array": Parameter.Type.STRING_ARRAY}

_MODELS: dict = {}
_MODELS_LOCK = threading.Lock()


def shared_model(preset: str, checkpoint: str):
    """One VLAModel per (preset, checkpoint) per process: nodes in one process share its weights. A
    checkpoint's model starts with no weights read (meta): each stage reads its own side (ensure_loaded)."""
    key = (preset, checkpoint)
    with _MODELS_LOCK:
        if key not in _MODELS:
            _MODELS[key] = load_vla(preset=None if checkpoint else preset, checkpoint=checkpoint or None,
                                    shapes_only=bool(checkpoint))
        return _MODELS[key]


def descriptor(spec) -> ParameterDescriptor:
    d = ParameterDescriptor(type=PARAM_TYPES[spec.type].value, description=spec.description,  # Enum on jazzy
                            read_only=not spec.dynamic)
    if spec.choices:
        d.additional_constraints = f"one of {list(spec.choices)}"
    if spec.minimum is not None and spec.maximum is not None:
        if spec.type.startswith("int"):
            d.integer_range = [IntegerRange(from_value=int(spec.minimum), to_value=int(spec.maximum), step=0)]
        elif spec.type == "double":
            d.floating_point_range = [FloatingPointRange(from_value=float(spec.minimum),
                                                         to_value=float(spec.maximum), step=0.0)]
    return d


class ParameterTable:
    """Declares a node's parameters (typed, no defaults in code) and validates run-time changes."""

    def __init__(self, node, node_name: str, extra_check=None, on_change=None, health: StageHealth | None = None):
        self.node, self.specs = node, {p.name: p for p in NODE_PARAMS[node_name]}
        self.extra_check, self.on_change, self.health = extra_check, on_change, health
        for spec in self.specs.values():
            node.declare_parameter(spec.name, PARAM_TYPES[spec.type], descriptor(spec))
        missing = [n for n in self.specs if node.get_parameter(n).type_ == Parameter.Type.NOT_SET]
        expect(not missing, ConfigError,
               f"{node_name}: parameters {missing} have no value; pass the node's param file (no hidden defaults)")
        self.values = {}
        for name, spec in self.specs.items():
            value = node.get_parameter(name).value
            self.values[name] = spec.check(list(value) if spec.type.endswith("array") else value,
                                           f"{node_name} parameter")
        node.add_on_set_parameters_callback(self._validate)
        post_set = getattr(node, "add_post_set_parameters_callback", None)
        # Iron and newer apply after the change is accepted; Humble has no post-set callback, so there the
        # values are applied from the validating callback once every parameter of the change is valid.
        self._apply_in_validate = not callable(post_set)
        if not self._apply_in_validate:
            post_set(self._apply)

    def __getitem__(self, name: str):
        return self.values[name]

    def _validate(self, params) -> SetParametersResult:
        try:
            for param in params:
                if rclpy_own(param.name):
                    continue  # rclpy's own (use_sim_time, qos_overrides.*): rclpy validates and applies them
                spec = self.specs.get(param.name)
                expect(spec is not None, ConfigError, f"unknown parameter '{param.name}'")
                value = list(param.value) if spec.type.endswith("array") else param.value
                spec.check(value, "parameter")
                if self.extra_check:
                    self.extra_check(param.name, value)
        except HybridVLAError as exc:
            if self.health:
                self.health.reject("parameter")
            self.node.get_logger().warning(f"parameter change refused: {exc}")
            return SetParametersResult(successful=False, reason=str(exc))
        if self._apply_in_validate:
            self._apply(params)
        return SetParametersResult(successful=True)

    def _apply(self, params) -> None:
        for param in params:
            if rclpy_own(param.name):
                continue
            self.values[param.name] = param.value
            if self.on_change:
                self.on_change(param.name, param.value)


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
                hardware_id="hybrid_vla_ros", values=[KeyValue(key=k, value=str(v)) for k, v in values.items()]))
        self.pub.publish(msg)


class ManagedNode(LifecycleNode):
    """The transitions the three nodes share: `active` follows activate/deactivate (then `activated()`),
    cleanup and shutdown call `_release()`, which frees what on_configure made; so does destroy_node."""

    active = False

    def on_activate(self, state: LifecycleState) -> TransitionCallbackReturn:
        result = super().on_activate(state)  # activates lifecycle publishers
        self.active = True
        self.activated()
        return result

    def on_deactivate(self, state: LifecycleState) -> TransitionCallbackReturn:
        self.active = False
        return super().on_deactivate(state)

    def on_cleanup(self, state: LifecycleState) -> TransitionCallbackReturn:
        self.active = False
        self._release()
        return TransitionCallbackReturn.SUCCESS

    def on_shutdown(self, state: LifecycleState) -> TransitionCallbackReturn:
        self.active = False
        self._release()
        return TransitionCallbackReturn.SUCCESS

    def destroy_node(self):
        self._release()
        return super().destroy_node()

    def activated(self) -> None:
        """Called once active (the scheduler publishes its partition here)."""

    def _release(self) -> None:
        raise NotImplementedError


class StageNode(ManagedNode):
    """What the prefix and suffix nodes share: typed parameters, health counters, the process-wide model, the
    dynamic zone, partition_point validation, rejections that are logged and counted, and the lifecycle
    (ros2/demos lifecycle_py): __init__ declares parameters only; on_configure loads the model and builds the
    stage, handover, worker, publishers, subscriptions and timers (`configure_stage`); on_activate starts
    taking inputs; on_deactivate stops taking them (frames in flight finish); on_cleanup / on_shutdown free
    everything (`release_stage`)."""

    def __init__(self, node_name: str, table: str, **kwargs):
        self.health = StageHealth()
        self.model = self.zone = self.stage = self.lost_pub = None
        self.active = False
        self._entities: list = []  # publishers, subscriptions, timers made by on_configure
        super().__init__(node_name, **kwargs)
        self.params = p = ParameterTable(self, table, self._check_param, self._on_param, self.health)
        self.health.warn_ms, self.health.error_after = p["processing_time_warn_ms"], p["error_after_frames"]

    # ---- lifecycle -------------------------------------------------------------------------------------
    def on_configure(self, state: LifecycleState) -> TransitionCallbackReturn:
        p = self.params
        try:
            self.lost_pub = self.configured_publisher(DiagnosticStatus, "~/debug/dropped_frames", 50)
            self.health.listener = self._report_lost
            self.model = shared_model(p["model.preset"], p["model.checkpoint"])
            self.zone = Zone.from_parameters(p["dynamic_zone_min"], p["dynamic_zone_max"], p["partition_point"],
                                             self.model.num_blocks)
            self.configure_stage()
        except HybridVLAError as exc:
            self.get_logger().error(f"configure failed: {exc}")
            self._release()
            return TransitionCallbackReturn.FAILURE
        return TransitionCallbackReturn.SUCCESS

    def configure_stage(self) -> None:
        raise NotImplementedError

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
        for entity in self._entities:
            {"publisher": self.destroy_publisher, "subscription": self.destroy_subscription,
             "timer": self.destroy_timer}[entity[0]](entity[1])
        self._entities.clear()
        self.stage = self.lost_pub = None

    # ---- ROS entities that live from configure to cleanup ---------------------------------------------
    def configured_publisher(self, *args):
        pub = self.create_publisher(*args)
        self._entities.append(("publisher", pub))
        return pub

    def configured_subscription(self, *args):
        self._entities.append(("subscription", self.create_subscription(*args)))

    def configured_timer(self, *args):
        self._entities.append(("timer", self.create_timer(*args)))

    def accepting(self, reason: str = "inactive") -> bool:
        """Inputs are taken only while active; one arriving otherwise is counted as a drop."""
        if not self.active:
            self.health.drop(reason)
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


def graph_scope(node) -> str:
    """The scope of a graph's shared-memory rings: its ROS domain and namespace (`d0`, `d3_car1`). Prefix and
    suffix of one graph agree on it; rings of another graph (or user: segment names carry the uid) are never
    opened."""
    import os
    domain = "".join(ch for ch in os.environ.get("ROS_DOMAIN_ID", "0") if ch.isdigit()) or "0"
    namespace = "".join(ch if ch.isalnum() else "_" for ch in node.get_namespace().strip("/"))
    return f"d{domain}" + (f"_{namespace}" if namespace else "")


def bring_up(node) -> bool:
    """unconfigured -> inactive -> active when the node's `autostart` parameter says so. -> active?"""
    if not node.params["autostart"]:
        return False
    node.trigger_configure()
    node.trigger_activate()
    return True
