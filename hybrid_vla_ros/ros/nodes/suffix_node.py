"""hybrid_vla_suffix: boundary states in; blocks [p, L) + head on NUMA-pinned CPU cores; trajectory out."""

from __future__ import annotations

import time

from std_msgs.msg import UInt8MultiArray

from ...engine.cpu import bind_memory_to_node, cores_of_numa_node, cpu_backend_report, default_stage_cores
from ...engine.dtype_choice import DtypeChoice, Int8Gate, choose_suffix_dtype
from ...engine.handover.endpoints import HOST_ID, HandoverDecoder, envelope_stamp
from ...engine.actionflow.codec import is_packed_state
from ...engine.placement import CPU, Placement, parse_boundary_dtype, parse_suffix_dtype
from ...engine.stages import SuffixStage
from ...engine.pipeline.worker import StageWorker
from ...errors import ConfigError, HybridVLAError, expect
from ...model.load import model_id
from .. import messages
from ..chunk_flow import SuffixChunks
from .diagnostics import DiagnosticsPublisher, cpu_load_check
from .serving.output import SuffixOutput
from .stage_node import StageNode, graph_scope
from .packed_stage import PackedSuffixSteps
from .standby import SuffixRole
from ...engine.pipeline.standby_buffer import hand_to_worker
from .time_limits import waits_to_suffix
from ..params import chosen_cores
from ..topics import STANDBY_NODE

NODE_NAME = "hybrid_vla_suffix"
SUFFIX_QUEUE = 64  # boundary states waiting for the suffix worker (the limit of max_in_flight)


class SuffixNode(SuffixOutput, StageNode):
    def __init__(self, node_name: str = NODE_NAME, **kwargs):
        self.worker = self.decoder = self.packed = self.output = self.role = self.cores = None
        self.memory_binding = "not requested (numa_node = -1)"
        super().__init__(node_name, NODE_NAME, **kwargs)

    def configure_stage(self) -> None:
        p = self.params
        # cores [-1]: the NUMA node's cores when numa_node is set, else the suffix's share of a default split
        self.cores = chosen_cores(p["cores"]) or (cores_of_numa_node(p["numa_node"]) if p["numa_node"] >= 0
                                                  else default_stage_cores(1))
        self.dtype_choice = self._choose_dtype()
        # boundary_dtype auto (None): whatever float dtype the prefix sends; either way converted to the suffix's
        self.boundary_dtype = parse_boundary_dtype(p["boundary_dtype"])
        self.suffix_dtype, self.suffix_int8 = parse_suffix_dtype(self.dtype_choice.dtype)
        placement = Placement(prefix_device=CPU, prefix_dtype=self.boundary_dtype or self.suffix_dtype,
                              suffix_dtype=self.suffix_dtype, suffix_int8=self.suffix_int8)
        packed = self.model.spec.action_head == "tokens"
        self.stage = None if packed else SuffixStage(self.model, p["partition_point"], placement, self.zone,
                                                     any_boundary_dtype=self.boundary_dtype is None)
        self.decoder = HandoverDecoder(scope=graph_scope(self), model_id=model_id(self.model))
        self.packed = PackedSuffixSteps(self) if packed else None  # ActionFlow (ros/nodes/packed_stage.py)
        self.chunk_flow = SuffixChunks(self, packed)   # chunked frames' states (ros/chunk_flow.py)
        # Bounded like the prefix: in one process the prefix's in-flight gate keeps at most max_in_flight here;
        # across processes the ring does (shm). A full mailbox drops and counts, never blocks the executor.
        queue = SUFFIX_QUEUE * self.chunk_flow.count   # chunked: as many frames' chunks (and in the topic's history)
        self.worker = StageWorker("suffix", self._process, policy="lossless", capacity=queue, cores=self.cores,
                                  threads=p["threads"] or None, health=self.health, on_start=self._bind_memory,
                                  on_error=self._on_worker_error, stamp_of=lambda item: envelope_stamp(item[0])).start()
        self.configured_subscription(UInt8MultiArray, "~/input/boundary_state", self._on_boundary, self.chunk_flow.qos())
        self.role = self._standby_role() if p["warm_standby"] else None
        self.diagnostics = DiagnosticsPublisher(self, self.health, self.worker, self._extra_checks)
        self.configured_timer(p["diagnostics_period_s"], self.diagnostics.publish)
        self._log_configuration(placement)

    def _standby_role(self) -> SuffixRole:
        expect(self.packed is None, ConfigError, f"warm_standby: model '{self.model.spec.name}' decodes action "
               f"tokens; the frames in flight live in the active suffix's KV ring, a standby cannot take them over")

        def take_over(buffered) -> None:  # frames newer than the last published: the newest the queue takes run
            hand_to_worker(buffered, self.worker, lambda item: envelope_stamp(item[0]))
        # the standby keeps what the active one's queue may hold (frames x chunks), plus the takeover window
        return SuffixRole(self, self.get_name() == STANDBY_NODE, take_over, SUFFIX_QUEUE, self.chunk_flow.count)

    def _choose_dtype(self) -> DtypeChoice:
        """dtype: auto -> measured on this CPU and the worker's cores (engine/dtype_choice.py); else the parameter. The
        same for both heads: a waypoint model's SuffixStage, an action-token model's packed suffix."""
        if self.params["dtype"] != "auto":
            return DtypeChoice(self.params["dtype"], "set by the dtype parameter")
        spec = self.model.spec
        return choose_suffix_dtype(spec.hidden_size, spec.intermediate_size, self.cores,
                                   int8=Int8Gate.of(self.model, self.params["int8_max_deviation_m"]))

    def _log_configuration(self, placement) -> None:
        p = self.params
        backend = cpu_backend_report(placement.suffix_dtype)
        self.get_logger().info(
            f"suffix: {self.describe_output()}; blocks from zone {list(self.zone)}, dtype "
            f"{self.dtype_choice.dtype} ({self.dtype_choice.reason}), "
            f"worker cores {self.cores or 'unpinned'}"
            + (f" (NUMA node {p['numa_node']})" if p["numa_node"] >= 0 and not chosen_cores(p["cores"]) else "")
            + f"; boundary dtype {p['boundary_dtype']}; CPU backend: {backend['backend']}, isa {backend['isa']}, "
              f"bf16 native: {backend['bf16_native']}")

    def release_stage(self) -> None:
        if self.worker is not None:
            self.worker.close()
        self.close_output()
        if self.decoder is not None:
            self.decoder.close()
        self.worker = self.decoder = None

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
        if self.expert is not None:   # an Alpamayo release (ros/nodes/alpamayo/)
            return self.expert.activated()
        self.diagnostics.publish()  # at once: the prefix learns where this receiver is before the first frame

    def _on_boundary(self, msg: UInt8MultiArray) -> None:
        data = messages.boundary_from_msg(msg)
        if self.role is not None and not self.role.active:
            self.role.keep((data, time.perf_counter()), envelope_stamp(data))   # unread: a shm slot is the active's
        elif self.chunk_flow.accepting(envelope_stamp(data)):   # a frame's chunks count one drop when inactive
            self.decoder.watch(data)   # a new shm ring is beaten from now on, not once the worker gets to it
            self.worker.submit((data, time.perf_counter()))
        elif not is_packed_state(data):
            self._let_go(data)

    def _let_go(self, data: bytes) -> None:
        """A state that arrived while inactive is not run (the drop is counted), but its in-process flight slot
        and its shared-memory ring slot are given back: the prefix would otherwise wait ~10 s per slot."""
        try:
            state, _ = self.decoder.decode(data)
        except HybridVLAError:
            return
        if state.flight is not None:
            state.flight.suffix_dropped()

    def _process(self, item) -> None:
        data, received = item
        t0 = time.perf_counter()
        if self.packed is not None and is_packed_state(data):  # an action-token model's packed step
            self.packed.serve(data, t0, received)
            return
        try:
            state, transport = self.decoder.decode(data)
        except HybridVLAError as exc:   # a format this release replaced keeps its own reason (old_message)
            self._reject(getattr(exc, "reason", "invalid_boundary"), exc, envelope_stamp(data))
            return
        if state.flight is not None:  # handed over in this process: report to the prefix's in-flight gate
            state.flight.suffix_started()
        try:
            self._serve(state, transport, t0, received)
        finally:
            if state.flight is not None:   # chunked: the last chunk's state, with the frame's suffix time
                state.flight.suffix_finished(state.timings.get("frame_suffix_s", time.perf_counter() - t0))

    def _serve(self, state, transport: str, t0: float, received: float) -> None:
        if state.chunk_count != 1:   # a chunk of a chunked frame: run now, published on the frame's last chunk
            return self.chunk_flow.serve(state, transport, t0, received)
        if not self.limits.fresh(state.seq, state.stamp_ns, state.arrival_ns, queue_s=t0 - received):
            return  # already too old: not worth the compute
        if self._older(state.stamp_ns, f"boundary state of frame {state.seq}"):
            return
        try:
            trajectory = self.stage.run(state)
        except HybridVLAError as exc:  # NaN/Inf in the state or the output: nonfinite_boundary/_output
            self._reject(getattr(exc, "reason", "invalid_boundary"), exc, state.stamp_ns)
            return
        finally:
            self.chunk_flow.report_abandoned()   # a chunked frame left unfinished by this whole one
        ms = (time.perf_counter() - t0) * 1e3
        self.publish_trajectory(trajectory, state.arrival_ns, {
            "suffix_ms": f"{ms:.3f}", "queue_ms": f"{(t0 - received) * 1e3:.3f}", "transport": transport,
            **waits_to_suffix(state.arrival_ns, received)})
        self.health.record(ms)
        self.diagnostics.publish_time(ms)

    def _extra_checks(self):
        role = ([self.role.check()] if self.role is not None else []) + (self.packed.checks() if self.packed else [])
        role += [self.limits.check(), self.chunk_flow.check(), *self.signals.checks()]
        dtype = self.dtype_choice
        return role + [cpu_load_check(self.cores),
                ("dtype", 0, dtype.dtype, {"dtype": dtype.dtype, "dtype_reason": dtype.reason}),
                ("handover", 0, f"receives shared memory of domain {HOST_ID:016x}",
                 {"receives_shm_domain": f"{HOST_ID:016x}", "model_id": f"{self.decoder.model_id:016x}"})]

