"""hybrid_vla_scheduler: a lifecycle node that publishes the partition point from the stages' diagnostics.

configure: read parameters, size the zone from the model, create the publisher, subscription and timer.
activate: publish the initial partition, then run the policy every update_period_s.
deactivate: stop publishing (the lifecycle publisher goes inactive; the policy is not run).
cleanup: destroy what configure created.  shutdown: the same, from any state.
"""

from __future__ import annotations

import json
import time
from pathlib import Path

from diagnostic_msgs.msg import DiagnosticArray
from rclpy.lifecycle import LifecycleNode, LifecycleState, TransitionCallbackReturn
from std_msgs.msg import Int32

from ..engine.costs import CostModel, CostPolicy
from ..engine.scheduler import SimplePolicy, StageLoad
from ..errors import ConfigError, HybridVLAError, expect
from .common import ParameterTable, resolve_zone, shared_model
from .topics import PARTITION_QOS

NODE_NAME = "hybrid_vla_scheduler"


class SchedulerNode(LifecycleNode):
    def __init__(self, node_name: str = NODE_NAME, **kwargs):
        self.policy: SimplePolicy | CostPolicy | None = None
        self.publisher = None
        self.subscription = None
        self.timer = None
        self.load = StageLoad(0.0, 0.0, 0)
        self.prefix_processed = 0
        self.seen_processed = 0
        self.ticks = 0
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
                                       p["backlog_threshold"]) if p["policy"] == "simple" else \
                self._cost_policy(num_blocks, lo, hi)
        except HybridVLAError as exc:
            self.get_logger().error(f"configure failed: {exc}")
            return TransitionCallbackReturn.FAILURE
        self.publisher = self.create_lifecycle_publisher(Int32, "~/output/partition_point", PARTITION_QOS)
        self.subscription = self.create_subscription(DiagnosticArray, "/diagnostics", self._on_diagnostics, 10)
        self.timer = self.create_timer(p["update_period_s"], self._tick)
        self.get_logger().info(f"configured: zone [{lo}, {hi}] of {num_blocks} blocks, initial p={self.policy.partition}")
        return TransitionCallbackReturn.SUCCESS

    def _cost_policy(self, num_blocks: int, lo: int, hi: int) -> CostPolicy:
        p = self.params
        if p["profile_json"]:
            try:
                report = json.loads(Path(p["profile_json"]).read_text())
                suffix = report["suffix"].get("bf16") or report["suffix"]["fp32"]
                costs = CostModel.from_profiles(report["prefix"], suffix, report["handover"]["shm_ms"]["p50"], 1)
            except (OSError, KeyError, ValueError) as exc:
                raise ConfigError(f"profile_json '{p['profile_json']}': not a usable profile report ({exc})") from exc
            expect(costs.num_blocks == num_blocks, ConfigError,
                   f"profile_json has {costs.num_blocks} blocks, the model {num_blocks}")
        else:
            costs = CostModel(0.0, [1.0] * num_blocks, [1.0] * num_blocks, 0.0)  # calibrated online
        budget = p["prefix_memory_budget_mb"]
        prefix_bytes = None
        if budget > 0:
            from ..engine.stages import partition_report
            from ..model.load import load_vla
            shapes = load_vla(preset=p["model.preset"], shapes_only=True) if not p["model.checkpoint"] else \
                shared_model(p["model.preset"], p["model.checkpoint"])
            prefix_bytes = [partition_report(shapes, q)["prefix_bytes"] for q in range(num_blocks + 1)]
        return CostPolicy(costs, lo, hi, p["initial_partition"], prefix_bytes,
                          int(budget * 2**20) if budget > 0 else None, hysteresis=min(p["hysteresis"], 0.9),
                          backlog_threshold=p["backlog_threshold"])

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
        if self.policy is None or not hasattr(self.policy, name):
            return
        if name == "hysteresis" and isinstance(self.policy, CostPolicy):
            value = min(value, 0.9)  # the cost policy's hysteresis is a fraction of the predicted period
        if name in ("hysteresis", "cooldown_s", "backlog_threshold"):
            setattr(self.policy, name, value)

    def _on_diagnostics(self, msg: DiagnosticArray) -> None:
        for status in msg.status:
            values = {kv.key: kv.value for kv in status.values}
            try:
                if status.name.endswith(": processing_time") and "prefix" in status.name:
                    self.load.prefix_ms = float(values["stage_time_ms"])
                    self.prefix_processed = int(values.get("processed", 0))
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
        if isinstance(self.policy, CostPolicy):
            if self.prefix_processed == self.seen_processed or not (self.load.prefix_ms and self.load.suffix_ms):
                return  # no new frames since the last decision
            self.seen_processed = self.prefix_processed
            self.ticks += 1
            after = self.policy.update(self.ticks, self.load.prefix_ms, self.load.suffix_ms, self.load.suffix_backlog)
        else:
            after = self.policy.update(self.load, time.monotonic())
        if after != before:
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
