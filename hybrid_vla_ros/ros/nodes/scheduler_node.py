"""hybrid_vla_scheduler: a lifecycle node that publishes the partition point from per-frame stage times.

configure: read parameters, size the zone from the model, build the policy, create publisher, subscriptions
           and timer.
activate: adopt the partition of a graph that is already running (a restarted scheduler: the stages kept
          their partition while it was away), else publish the initial partition after RESUME_WAIT_S; then
          feed the policy the frames finished since the last tick, each update_period_s: the newest
          MAX_SAMPLES, none older than stale_after_s (frames finished while inactive are never kept).
deactivate: stop publishing (the lifecycle publisher goes inactive; the policy is not run).
cleanup: destroy what configure created.  shutdown: the same, from any state.

Each finished frame becomes one StageSample: the prefix's `~/debug/frame_info` (partition, prefix compute
time) joined by stamp with the suffix's `~/debug/trajectory_info` (partition, suffix compute time); the
suffix backlog comes from /diagnostics. Both policies take `update(sample) -> partition`.
An action-token model (ActionFlow, ros/nodes/serving/tokens.py) is sampled per packed step instead: both stages'
`~/debug/step_info` carry `step` and are joined by it, one sample per step (what sets such a graph's period
is the slower side's step time); its prefix applies a new partition at the next drain of its frames.
"""

from __future__ import annotations

import json
import time
from collections import Counter, OrderedDict, deque
from pathlib import Path

from diagnostic_msgs.msg import DiagnosticArray, DiagnosticStatus
from rclpy.lifecycle import LifecycleState, TransitionCallbackReturn
from std_msgs.msg import Int32

from ...engine.scheduling.costs import CostModel, CostPolicy
from ...engine.scheduling.partition import Zone, prefix_bytes_by_partition
from ...engine.scheduling.policies import SimplePolicy, StageSample
from ...errors import ConfigError, HybridVLAError, expect
from .diagnostics import EndpointWatch
from .lifecycle import ManagedNode
from .model_cache import shared_model
from .parameters import ParameterTable
from ..topics import PARTITION_QOS, STANDBY_NODE

NODE_NAME = "hybrid_vla_scheduler"
PENDING_FRAMES = 64  # prefix infos waiting for their suffix info (bounded: a frame dropped later never joins)
RESUME_WAIT_S = 1.0  # after activation: a running graph reports its partition within this, else start afresh
MAX_SAMPLES = 64     # finished frames kept between two ticks, the newest (a 30 Hz graph's last 2 s)
STALE_TICKS = 4      # a sample older than this many update periods describes a load that may be gone ...
STALE_FLOOR_S = 1.0  # ... but never less than this (the stages' /diagnostics period, where the backlog comes from)
ENDPOINTS_CHECK_S = 1.0  # how often the tick asks the ROS graph whether a peer cannot match (EndpointWatch)


def stale_after_s(update_period_s: float) -> float:
    """Age (since its frame finished) past which a sample never steers the policy."""
    return max(STALE_TICKS * update_period_s, STALE_FLOOR_S)


def info_values(msg: DiagnosticStatus) -> dict:
    return {kv.key: kv.value for kv in msg.values}


def cost_model_from_report(path: str, num_blocks: int) -> CostModel:
    """The cost model's prior from a `hybrid-vla plan --json` report (the planner's prediction) or a
    `hybrid-vla profile --json` one; its blocks must be the model's."""
    try:
        report = json.loads(Path(path).read_text())
        if "cost_model" in report:
            costs = CostModel.from_plan(report)
        else:
            suffix = report["suffix"].get("bf16") or report["suffix"]["fp32"]
            costs = CostModel.from_profiles(report["prefix"], suffix, report["handover"]["shm_ms"]["p50"], 1)
    except (OSError, KeyError, ValueError) as exc:
        raise ConfigError(f"profile_json '{path}': not a usable profile or plan report ({exc})") from exc
    expect(costs.num_blocks == num_blocks, ConfigError,
           f"profile_json has {costs.num_blocks} blocks, the model {num_blocks}")
    return costs


class SchedulerNode(ManagedNode):
    def __init__(self, node_name: str = NODE_NAME, **kwargs):
        self.policy: SimplePolicy | CostPolicy | None = None
        self.publisher = None
        self.subscriptions_: list = []
        self.timer = None
        self.prefix_infos: OrderedDict = OrderedDict()   # stamp_ns or ("step", n) -> (partition, prefix_ms, rows)
        self.samples: deque[StageSample] = deque(maxlen=MAX_SAMPLES)   # finished since the last tick
        self.dropped: Counter = Counter()   # samples never fed: inactive, stale, overflow (MAX_SAMPLES)
        self.fed: list[StageSample] = []                  # the most recent samples given to the policy
        self.suffix_backlog = 0
        self.history: list[tuple[float, int]] = []
        self.resume_until: float | None = None  # while set: listening for a running graph's partition
        self.endpoints, self.endpoints_checked = EndpointWatch(self), 0.0
        super().__init__(node_name, **kwargs)
        self.params = ParameterTable(self, NODE_NAME, on_change=self._on_param)

    # ---- lifecycle -------------------------------------------------------------------------------------
    def on_configure(self, state: LifecycleState) -> TransitionCallbackReturn:
        try:
            self.policy = self._make_policy()
        except HybridVLAError as exc:
            return self.configure_failed(exc)
        p = self.params
        self.endpoints = watch = EndpointWatch(self)   # no default event handlers, matching checked (diagnostics.py)
        self.publisher = watch.publisher(Int32, "~/output/partition_point", PARTITION_QOS,
                                         create=self.create_lifecycle_publisher)
        self.subscriptions_ = [
            watch.subscription(DiagnosticStatus, "~/input/prefix_info", self._on_prefix_info, 50),
            watch.subscription(DiagnosticStatus, "~/input/trajectory_info", self._on_trajectory_info, 50),
            # action-token models: one sample per packed step (ros/nodes/serving/tokens.py)
            watch.subscription(DiagnosticStatus, "~/input/prefix_step_info", self._on_prefix_info, 100),
            watch.subscription(DiagnosticStatus, "~/input/suffix_step_info", self._on_trajectory_info, 100),
            watch.subscription(DiagnosticArray, "/diagnostics", self._on_diagnostics, 10)]
        self.timer = self.create_timer(p["update_period_s"], self._tick)
        self.get_logger().info(f"configured: {p['policy']} policy, zone [{self.policy.zone_min}, "
                               f"{self.policy.zone_max}], initial p={self.policy.partition}")
        return TransitionCallbackReturn.SUCCESS

    def activated(self) -> None:
        self.resume_until = time.monotonic() + RESUME_WAIT_S
        if self.dropped["inactive"]:
            self.get_logger().info(f"{self.dropped['inactive']} frames finished while inactive: not used")

    def _resume(self, running: int | None) -> None:
        """End the listening after activation: adopt `running` (the partition the stages run at) when there
        is one in the zone, without publishing: nothing changes for a graph that kept driving; else publish
        the initial partition."""
        self.resume_until = None
        if running is not None and self.policy.zone_min <= running <= self.policy.zone_max:
            self.policy.partition = running
            self.history.append((time.monotonic(), running))
            self.get_logger().info(f"resumed a running graph at p={running} (its partition is kept)")
            return
        self._publish()

    def _release(self) -> None:
        if self.timer is not None:
            self.destroy_timer(self.timer)
        for sub in self.subscriptions_:
            self.destroy_subscription(sub)
        if self.publisher is not None:
            self.destroy_lifecycle_publisher(self.publisher)
        self.timer, self.subscriptions_, self.publisher, self.policy = None, [], None, None
        self.prefix_infos.clear()
        self.samples.clear()

    # ---- policy ----------------------------------------------------------------------------------------
    def _num_blocks(self) -> int:
        from ...model.presets import ALPAMAYO_PRESETS, get_preset
        p = self.params
        if p["model.checkpoint"] or p["model.preset"] in ALPAMAYO_PRESETS:   # not a VLASpec: the model's own count
            return shared_model(p["model.preset"], p["model.checkpoint"]).num_blocks
        return get_preset(p["model.preset"]).num_blocks

    def _make_policy(self):
        p = self.params
        num_blocks = self._num_blocks()
        zone = Zone.from_parameters(p["dynamic_zone_min"], p["dynamic_zone_max"], p["initial_partition"], num_blocks)
        if p["policy"] == "simple":
            return SimplePolicy(zone.lo, zone.hi, p["initial_partition"], p["hysteresis"], p["cooldown_s"],
                                p["backlog_threshold"])
        return self._cost_policy(num_blocks, zone)

    def _cost_policy(self, num_blocks: int, zone: Zone) -> CostPolicy:
        p = self.params
        costs = self._profile_costs(num_blocks) if p["profile_json"] else \
            CostModel(0.0, [1.0] * num_blocks, [1.0] * num_blocks, 0.0)  # calibrated online
        budget = p["prefix_memory_budget_mb"]
        prefix_bytes = prefix_bytes_by_partition(self._shapes()) if budget > 0 else None
        return CostPolicy(costs, zone.lo, zone.hi, p["initial_partition"], prefix_bytes,
                          int(budget * 2**20) if budget > 0 else None,
                          hysteresis=min(p["hysteresis"], CostPolicy.HYSTERESIS_MAX), cooldown_s=p["cooldown_s"],
                          backlog_threshold=p["backlog_threshold"])

    def _profile_costs(self, num_blocks: int) -> CostModel:
        return cost_model_from_report(self.params["profile_json"], num_blocks)

    def _shapes(self):
        p = self.params
        if p["model.checkpoint"]:
            return shared_model(p["model.preset"], p["model.checkpoint"])
        from ...model.load import load_vla
        return load_vla(preset=p["model.preset"], shapes_only=True)

    def _on_param(self, name: str, value) -> None:
        if self.policy is not None and name in ("hysteresis", "cooldown_s", "backlog_threshold"):
            self.policy.tune(name, value)

    # ---- inputs: one sample per finished frame ---------------------------------------------------------
    @staticmethod
    def _join_key(v: dict):
        """Infos of one frame are joined by its stamp; a packed step's (action-token models) by its step."""
        return ("step", int(v["step"])) if "step" in v else int(v["stamp_ns"])

    def _on_prefix_info(self, msg: DiagnosticStatus) -> None:
        try:
            v = info_values(msg)
            self.prefix_infos[self._join_key(v)] = (int(v["partition"]), float(v["prefix_ms"]), int(v.get("rows", 0)))
        except (KeyError, ValueError):
            return
        if self.resume_until is not None and self.active and self.policy is not None:
            self._resume(int(v["partition"]))
        while len(self.prefix_infos) > PENDING_FRAMES:
            self.prefix_infos.popitem(last=False)

    def _on_trajectory_info(self, msg: DiagnosticStatus) -> None:
        try:
            v = info_values(msg)
            key, partition, suffix_ms = self._join_key(v), int(v["partition"]), float(v["suffix_ms"])
        except (KeyError, ValueError):
            return  # (a packed suffix's per-frame info has no suffix_ms: its step infos carry the times)
        prefix = self.prefix_infos.pop(key, None)
        if prefix is None or prefix[0] != partition:
            return  # the prefix's record was lost, or the state came from elsewhere
        if not self.active:   # configured, not active: nothing to decide, nothing kept for later
            self.dropped["inactive"] += 1
            return
        # A packed suffix holds at most one step per group (each group waits for its tokens): its queue is the
        # alternation working, never a backlog; frames that wait do so at the prefix. So no backlog for steps.
        backlog = 0 if isinstance(key, tuple) else self.suffix_backlog
        self.suffix_backlog = 0  # one /diagnostics report, one sample: the samples of a tick all carried it
        self.dropped["overflow"] += int(len(self.samples) == MAX_SAMPLES)   # the oldest goes
        self.samples.append(StageSample(partition, prefix[1], suffix_ms, backlog, time.monotonic(), rows=prefix[2]))

    def _on_diagnostics(self, msg: DiagnosticArray) -> None:
        for status in msg.status:
            standby = status.name.startswith(STANDBY_NODE)   # idle by design: its backlog says nothing
            if status.name.endswith(": backlog") and "suffix" in status.name and not standby:
                try:
                    self.suffix_backlog = int(info_values(status)["backlog"])
                except (KeyError, ValueError):
                    continue

    def _tick(self) -> None:
        if not self.active or self.policy is None:
            return
        if time.monotonic() >= self.endpoints_checked + ENDPOINTS_CHECK_S:   # logs a peer that cannot match
            self.endpoints.check()
            self.endpoints_checked = time.monotonic()
        if self.resume_until is not None:
            if time.monotonic() < self.resume_until:
                return
            self._resume(None)
        samples = self._fresh_samples()
        before = self.policy.partition
        for sample in samples:
            self.policy.update(sample)
        self.fed = (self.fed + samples)[-PENDING_FRAMES:]
        if self.policy.partition != before:
            last = samples[-1]
            self.get_logger().info(f"partition {before} -> {self.policy.partition} (last frame at p={last.partition}: "
                                   f"prefix {last.prefix_ms:.1f} ms, suffix {last.suffix_ms:.1f} ms, "
                                   f"backlog {last.backlog})")
            self._publish()

    def _fresh_samples(self) -> list[StageSample]:
        """The samples since the last tick, less those older than stale_after_s (counted as stale: a tick held
        up, or samples left from before a deactivation)."""
        oldest = time.monotonic() - stale_after_s(self.params["update_period_s"])
        samples = list(self.samples)
        self.samples.clear()
        fresh = [s for s in samples if s.at_s >= oldest]
        self.dropped["stale"] += len(samples) - len(fresh)
        return fresh

    def _publish(self) -> None:
        if self.publisher is not None and self.policy is not None:
            self.publisher.publish(Int32(data=self.policy.partition))
            self.history.append((time.monotonic(), self.policy.partition))
