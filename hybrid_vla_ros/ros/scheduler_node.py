"""hybrid_vla_scheduler: a lifecycle node that publishes the partition point from the stages' diagnostics.

configure: read parameters, size the zone from the model, create the publisher, subscription and timer.
activate: publish the initial partition, then run the policy every update_period_s.
deactivate: stop publishing (the lifecycle publisher goes inactive; the policy is not run).
cleanup: destroy what configure created.  shutdown: the same, from any state.
"""

from __future__ import annotations

import time

from diagnostic_msgs.msg import DiagnosticArray
from rclpy.lifecycle import LifecycleNode, LifecycleState, TransitionCallbackReturn
from rclpy.qos import DurabilityPolicy, QoSProfile
from std_msgs.msg import Int32

from ..engine.scheduler import SimplePolicy, StageLoad
from ..errors import HybridVLAError
from .common import ParameterTable, shared_model
from .prefix_node import resolve_zone

NODE_NAME = "hybrid_vla_scheduler"
PARTITION_QOS = QoSProfile(depth=1, durability=DurabilityPolicy.TRANSIENT_LOCAL)  # late joiners get the current p


class SchedulerNode(LifecycleNode):
    def __init__(self, node_name: str = NODE_NAME, **kwargs):
        self.policy: SimplePolicy | None = None
        self.publisher = None
        self.subscription = None
        self.timer = None
        self.load = StageLoad(0.0, 0.0, 0)
        self.history: list[tuple[float, int]] = []
        self.active = False
        super().__init__(node_name, **kwargs)
        self.params = ParameterTable(self, NODE_NAME, on_change=self._on_param)

    def on_configure(self, state: LifecycleState) -> TransitionCallbackReturn:
        p = self.params
        try:
            model = shared_model(p["model.preset"], p["model.checkpoint"]) if p["model.checkpoint"] else None
            num_blocks = model.num_blocks if model else _preset_blocks(p["model.preset"])
            lo = 0 if p["dynamic_zone_min"] < 0 else p["dynamic_zone_min"]
            hi = num_blocks if p["dynamic_zone_max"] < 0 else p["dynamic_zone_max"]
            resolve_zone(lo, hi, p["initial_partition"], num_blocks)
            self.policy = SimplePolicy(lo, hi, p["initial_partition"], p["hysteresis"], p["cooldown_s"],
                                       p["backlog_threshold"])
        except HybridVLAError as exc:
            self.get_logger().error(f"configure failed: {exc}")
            return TransitionCallbackReturn.FAILURE
        self.publisher = self.create_lifecycle_publisher(Int32, "~/output/partition_point", PARTITION_QOS)
        self.subscription = self.create_subscription(DiagnosticArray, "/diagnostics", self._on_diagnostics, 10)
        self.timer = self.create_timer(p["update_period_s"], self._tick)
        self.get_logger().info(f"configured: zone [{lo}, {hi}] of {num_blocks} blocks, initial p={self.policy.partition}")
        return TransitionCallbackReturn.SUCCESS

    def on_activate(self, state: LifecycleState) -> TransitionCallbackReturn:
        result = super().on_activate(state)  # activates the lifecycle publisher
        self.active = True
        self._publish()
        return result

    def on_deactivate(self, state: LifecycleState) -> TransitionCallbackReturn:
        self.active = False
        return super().on_deactivate(state)

    def on_cleanup(self, state: LifecycleState) -> TransitionCallbackReturn:
        self._release()
        return TransitionCallbackReturn.SUCCESS

    def on_shutdown(self, state: LifecycleState) -> TransitionCallbackReturn:
        self.active = False
        self._release()
        return TransitionCallbackReturn.SUCCESS

    def _release(self) -> None:
        if self.timer is not None:
            self.destroy_timer(self.timer)
        if self.subscription is not None:
            self.destroy_subscription(self.subscription)
        if self.publisher is not None:
            self.destroy_lifecycle_publisher(self.publisher)
        self.timer = self.subscription = self.publisher = self.policy = None

    def _on_param(self, name: str, value) -> None:
        if self.policy is not None and name in ("hysteresis", "cooldown_s", "backlog_threshold"):
            setattr(self.policy, name, value)

    def _on_diagnostics(self, msg: DiagnosticArray) -> None:
        for status in msg.status:
            values = {kv.key: kv.value for kv in status.values}
            try:
                if status.name.endswith(": processing_time") and "prefix" in status.name:
                    self.load.prefix_ms = float(values["stage_time_ms"])
                elif status.name.endswith(": processing_time") and "suffix" in status.name:
                    self.load.suffix_ms = float(values["stage_time_ms"])
                elif status.name.endswith(": backlog") and "suffix" in status.name:
                    self.load.suffix_backlog = int(values["backlog"])
            except (KeyError, ValueError):
                continue

    def _tick(self) -> None:
        if not self.active or self.policy is None:
            return
        before = self.policy.partition
        if self.policy.update(self.load, time.monotonic()) != before:
            self.get_logger().info(f"partition {before} -> {self.policy.partition} (prefix {self.load.prefix_ms:.1f} ms, "
                                   f"suffix {self.load.suffix_ms:.1f} ms, backlog {self.load.suffix_backlog})")
            self._publish()

    def _publish(self) -> None:
        if self.publisher is not None and self.policy is not None:
            self.publisher.publish(Int32(data=self.policy.partition))
            self.history.append((time.monotonic(), self.policy.partition))


def _preset_blocks(preset: str) -> int:
    from ..model.spec import get_preset
    return get_preset(preset).num_blocks
