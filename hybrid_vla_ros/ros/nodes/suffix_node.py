"""hybrid_vla_suffix: boundary states in; blocks [p, L) + head on NUMA-pinned CPU cores; trajectory out. The model's
kind serves it (ros/nodes/serving); this node keeps its cores, precision, worker and output path."""

from __future__ import annotations

import time

from std_msgs.msg import UInt8MultiArray

from ...engine.cpu import bind_memory_to_node, cores_of_numa_node, cpu_backend_report, default_stage_cores
from ...engine.dtype_choice import DtypeChoice, Int8Gate, choose_suffix_dtype
from ...engine.handover.endpoints import envelope_stamp
from ...engine.placement import CPU, Placement, parse_boundary_dtype, parse_suffix_dtype
from ...engine.pipeline.worker import StageWorker
from .. import messages
from .diagnostics import DiagnosticsPublisher, cpu_load_check
from .serving import side_class
from .serving.output import SuffixOutput
from .stage_node import StageNode
from ..params import chosen_cores

NODE_NAME = "hybrid_vla_suffix"


class SuffixNode(SuffixOutput, StageNode):
    def __init__(self, node_name: str = NODE_NAME, **kwargs):
        self.worker = self.output = self.cores = None
        self.memory_binding = "not requested (numa_node = -1)"
        super().__init__(node_name, NODE_NAME, **kwargs)

    def configure_stage(self) -> None:
        p = self.params
        side = side_class(self.model, "suffix")
        # cores [-1]: the NUMA node's cores when numa_node is set, else the suffix's share of a default split
        self.cores = chosen_cores(p["cores"]) or (cores_of_numa_node(p["numa_node"]) if p["numa_node"] >= 0
                                                  and side.node_inputs else default_stage_cores(1))
        if side.node_inputs:
            self._choose_precision()
        self.serving = side(self)
        self.stage = self.serving.stage
        if side.node_inputs:
            self.worker = StageWorker("suffix", self.serving.handle, policy="lossless", capacity=self.serving.queue,
                                      cores=self.cores, threads=p["threads"] or None, health=self.health,
                                      on_start=self._bind_memory, on_error=self._on_worker_error,
                                      stamp_of=lambda item: envelope_stamp(item[0])).start()
            self.configured_subscription(UInt8MultiArray, "~/input/boundary_state", self._on_boundary,
                                         self.serving.qos)
            self._log_configuration()
        else:
            self.worker = self.serving.worker
        self.diagnostics = DiagnosticsPublisher(self, self.health, self.worker, self._extra_checks)
        self.configured_timer(p["diagnostics_period_s"], self.diagnostics.publish)

    def _choose_precision(self) -> None:
        """The dtype the suffix runs in and the boundary dtype it takes (a kind whose states the node receives)."""
        p = self.params
        self.dtype_choice = self._choose_dtype()
        # boundary_dtype auto (None): whatever float dtype the prefix sends; either way converted to the suffix's
        self.boundary_dtype = parse_boundary_dtype(p["boundary_dtype"])
        self.suffix_dtype, self.suffix_int8 = parse_suffix_dtype(self.dtype_choice.dtype)
        self.placement = Placement(prefix_device=CPU, prefix_dtype=self.boundary_dtype or self.suffix_dtype,
                                   suffix_dtype=self.suffix_dtype, suffix_int8=self.suffix_int8)

    def _choose_dtype(self) -> DtypeChoice:
        """dtype: auto -> measured on this CPU and the worker's cores (engine/dtype_choice.py); else the parameter. The
        same for both heads: a waypoint model's SuffixStage, an action-token model's packed suffix."""
        if self.params["dtype"] != "auto":
            return DtypeChoice(self.params["dtype"], "set by the dtype parameter")
        spec = self.model.spec
        return choose_suffix_dtype(spec.hidden_size, spec.intermediate_size, self.cores,
                                   int8=Int8Gate.of(self.model, self.params["int8_max_deviation_m"]))

    def _log_configuration(self) -> None:
        p = self.params
        backend = cpu_backend_report(self.placement.suffix_dtype)
        self.get_logger().info(
            f"suffix: {self.describe_output()}; blocks from zone {list(self.zone)}, dtype "
            f"{self.dtype_choice.dtype} ({self.dtype_choice.reason}), "
            f"worker cores {self.cores or 'unpinned'}"
            + (f" (NUMA node {p['numa_node']})" if p["numa_node"] >= 0 and not chosen_cores(p["cores"]) else "")
            + f"; boundary dtype {p['boundary_dtype']}; CPU backend: {backend['backend']}, isa {backend['isa']}, "
              f"bf16 native: {backend['bf16_native']}")

    def release_stage(self) -> None:
        if self.worker is not None and self.worker is not getattr(self.serving, "worker", None):   # the node's own
            self.worker.close()
        self.close_output()
        self.worker = None

    def _bind_memory(self) -> None:
        """Runs on the pinned worker thread: bind its allocations to the NUMA node, then re-copy the suffix's
        own weights so they live there."""
        node = self.params["numa_node"]
        if node < 0:
            return
        self.memory_binding = bind_memory_to_node(node)
        if self.memory_binding == "bound" and self.stage is not None:
            self.stage.rematerialise()
        self.get_logger().info(f"suffix memory on NUMA node {node}: {self.memory_binding}")

    def activated(self) -> None:
        self.limits.started_ns = time.time_ns()   # states that arrived long before this are replayed history
        super().activated()

    def _on_boundary(self, msg: UInt8MultiArray) -> None:
        self.serving.on_message(messages.boundary_from_msg(msg), time.perf_counter())

    def _extra_checks(self):
        dtype = self.dtype_choice
        return [*self.serving.checks(), *self.output_checks(), cpu_load_check(self.cores),
                ("dtype", 0, dtype.dtype, {"dtype": dtype.dtype, "dtype_reason": dtype.reason})]
