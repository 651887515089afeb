"""hybrid_vla_suffix: boundary states in; blocks [p, L) + head on NUMA-pinned CPU cores; trajectory out."""

from __future__ import annotations

import time

from diagnostic_msgs.msg import DiagnosticStatus
from nav_msgs.msg import Odometry
from std_msgs.msg import UInt8MultiArray

from ...engine.pipeline.stamp_order import stamp_order
from ...engine.cpu import bind_memory_to_node, cores_of_numa_node, cpu_backend_report, default_stage_cores
from ...engine.dtype_choice import DtypeChoice, Int8Gate, choose_suffix_dtype
from ...engine.handover.endpoints import HOST_ID, HandoverDecoder, envelope_stamp
from ...engine.actionflow.codec import is_packed_state
from ...engine.placement import CPU, Placement, parse_boundary_dtype, parse_suffix_dtype
from ...engine.pipeline.camera_sync import StampedHistory
from ...engine.stages import SuffixStage
from ...engine.pipeline.worker import StageWorker
from ...errors import ConfigError, HybridVLAError, NonFiniteError, expect, expect_finite
from ...types import Pose2D
from ...model.load import model_id
from .. import convert
from ..candidates import CandidateOutput
from ..present import PresentOutput
from ..turn_signals import TurnSignalOutput
from ..chunk_flow import SuffixChunks, frame_compute_ms
from .diagnostics import DiagnosticsPublisher, cpu_load_check, publish_trajectory_info
from .stage_node import StageNode, graph_scope
from .packed_stage import PackedSuffixSteps
from .standby import SuffixRole
from .time_limits import SuffixTimeLimits, timeline, waits_to_suffix, with_output_wait
from ..params import chosen_cores
from ..topics import STANDBY_NODE

NODE_NAME = "hybrid_vla_suffix"
SUFFIX_QUEUE = 64  # boundary states waiting for the suffix worker (the limit of max_in_flight)
EGO_FRAME = "base_link"


class SuffixNode(StageNode):
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
        self.msg_cls, self.output_kind, reason = convert.resolve_trajectory_type(p["output_type"])
        self.decoder = HandoverDecoder(scope=graph_scope(self), model_id=model_id(self.model))
        self.last_stamp_ns = -1
        self.limits = SuffixTimeLimits(self)   # max_output_age_ms and the pose wait, from measured times
        self.pub = self.configured_publisher(self.msg_cls, "~/output/trajectory", 10)
        self.candidates = CandidateOutput(self, p["generator_name"])  # ~/output/trajectories (ros/candidates.py)
        self.info_pub = self.configured_publisher(DiagnosticStatus, "~/debug/trajectory_info", 10)
        self.packed = PackedSuffixSteps(self) if packed else None  # ActionFlow (ros/nodes/packed_stage.py)
        self.chunk_flow = SuffixChunks(self, packed)   # chunked frames' states (ros/chunk_flow.py)
        # Bounded like the prefix: in one process the prefix's in-flight gate keeps at most max_in_flight here;
        # across processes the ring does (shm). A full mailbox drops and counts, never blocks the executor.
        queue = SUFFIX_QUEUE * self.chunk_flow.count   # chunked: as many frames' chunks (and in the topic's history)
        self.worker = StageWorker("suffix", self._process, policy="lossless", capacity=queue, cores=self.cores,
                                  threads=p["threads"] or None, health=self.health, on_start=self._bind_memory,
                                  on_error=self._on_worker_error, stamp_of=lambda item: envelope_stamp(item[0])).start()
        self.configured_subscription(UInt8MultiArray, "~/input/boundary_state", self._on_boundary, self.chunk_flow.qos())
        self.poses = StampedHistory(between=Pose2D.between) if p["frame_id"] != EGO_FRAME else None
        self.present = PresentOutput(self)   # where and when the output is: matched pose, re-timing (ros/present.py)
        self.signals = TurnSignalOutput(self)   # ~/output/turn_indicators from the route (ros/turn_signals.py)
        if self.poses is not None:  # the map-frame output needs the ego pose of each frame
            self.configured_subscription(Odometry, "~/input/kinematic_state", self._on_odometry, 50)
            # ... and may wait for it (limits.pose_wait_s): on a thread of its own, never the compute thread's
            self.output = StageWorker("output", self._publish_now, policy="lossless", capacity=4 * SUFFIX_QUEUE,
                                      health=self.health, on_error=self._on_worker_error,
                                      stamp_of=lambda item: item[0].stamp_ns).start()
        self.markers = self._marker_publisher()
        self.role = self._standby_role() if p["warm_standby"] else None
        self.diagnostics = DiagnosticsPublisher(self, self.health, self.worker, self._extra_checks)
        self.configured_timer(p["diagnostics_period_s"], self.diagnostics.publish)
        self._log_configuration(reason, placement)

    def _standby_role(self) -> SuffixRole:
        expect(self.packed is None, ConfigError, f"warm_standby: model '{self.model.spec.name}' decodes action "
               f"tokens; the frames in flight live in the active suffix's KV ring, a standby cannot take them over")

        def take_over(buffered) -> None:  # frames newer than the last published, oldest first
            for item in buffered:
                self.worker.submit(item)   # more than the queue takes: dropped, counted (queue_full)
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

    def _log_configuration(self, reason: str, placement) -> None:
        p = self.params
        backend = cpu_backend_report(placement.suffix_dtype)
        self.get_logger().info(
            f"suffix: publishing {self.msg_cls.__module__.split('.')[0]}/{self.msg_cls.__name__} on "
            f"~/output/trajectory ({reason}); {self.candidates.describe()}; {self.present.describe()}; "
            f"{self.signals.describe()}; "
            f"blocks from zone {list(self.zone)}, dtype "
            f"{self.dtype_choice.dtype} ({self.dtype_choice.reason}), "
            f"worker cores {self.cores or 'unpinned'}"
            + (f" (NUMA node {p['numa_node']})" if p["numa_node"] >= 0 and not chosen_cores(p["cores"]) else "")
            + f"; boundary dtype {p['boundary_dtype']}; CPU backend: {backend['backend']}, isa {backend['isa']}, "
              f"bf16 native: {backend['bf16_native']}")

    def release_stage(self) -> None:
        if self.worker is not None:
            self.worker.close()
        if self.output is not None:
            self.output.close(drain=True)
        if self.decoder is not None:
            self.decoder.close()
        self.worker = self.decoder = self.output = None

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

    def _marker_publisher(self):
        try:
            from visualization_msgs.msg import MarkerArray
        except ImportError:
            self.get_logger().info("visualization_msgs not importable: no ~/debug/markers")
            return None
        return self.configured_publisher(MarkerArray, "~/debug/markers", 1)

    def _on_odometry(self, msg) -> None:
        """A pose in another frame than the output's would put the trajectory in the wrong place: refused,
        counted (odometry_frame_mismatch); its frames then go out as pose_missing."""
        frame = msg.header.frame_id.lstrip("/")
        if frame != self.params["frame_id"]:  # an empty frame_id says nothing: refused too
            self.health.reject("odometry_frame_mismatch")
            self.get_logger().warning(f"kinematic state in frame '{frame}', the trajectory's frame_id is "
                                      f"'{self.params['frame_id']}': refused", throttle_duration_sec=1.0)
            return
        self.present.add_odometry(msg)

    def activated(self) -> None:
        if self.expert is not None:   # an Alpamayo release (ros/nodes/alpamayo/)
            return self.expert.activated()
        self.limits.started_ns = time.time_ns()   # states that arrived long before this are replayed history
        self.diagnostics.publish()  # at once: the prefix learns where this receiver is before the first frame

    def _publish_markers(self, points, stamp_ns: int) -> None:
        if self.markers is None:
            return
        from geometry_msgs.msg import Point
        from visualization_msgs.msg import Marker, MarkerArray
        self.markers.publish(convert.trajectory_markers(points, self.params["frame_id"], stamp_ns, MarkerArray,
                                                        Marker, Point))

    def _on_boundary(self, msg: UInt8MultiArray) -> None:
        data = convert.boundary_from_msg(msg)
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
        except HybridVLAError as exc:
            self._reject("invalid_boundary", exc, envelope_stamp(data))
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

    def _older(self, stamp_ns: int, what: str) -> bool:
        """Refused (out_of_order) when not newer than the last one published, unless time went back (a bag
        loop, /clock reset: engine/pipeline/stamp_order.py), which starts the order over."""
        order = stamp_order(self.last_stamp_ns, stamp_ns)
        if order == "jump":
            self.last_stamp_ns = -1
        elif order == "older":
            self._reject("out_of_order", ConfigError(
                f"{what} has stamp {stamp_ns}, not newer than {self.last_stamp_ns}"), stamp_ns)
        return order == "older"

    def publish_trajectory(self, trajectory, arrival_ns: int, values: dict) -> None:
        """A finished frame's trajectory in the output frame, its markers and its info (in the map frame from
        the output thread, which may wait for the frame's pose; in the ego frame at once)."""
        item = (trajectory, arrival_ns, {**values, "done": time.perf_counter()})   # output_wait_ms from it
        if self.output is None:
            self._publish_now(item)
        else:
            self.output.submit(item)

    def _publish_now(self, item) -> None:
        """Not published when older than the last one (out_of_order), without a pose, stale by now, too old
        to re-time or non-finite (each counted)."""
        trajectory, arrival_ns, values = item
        values = with_output_wait(values)
        if self._older(trajectory.stamp_ns, f"trajectory of frame {trajectory.seq}"):
            return
        self.last_stamp_ns = trajectory.stamp_ns
        placed = self.present.locate(trajectory)   # (points in the output frame, the frame's pose) or None
        if placed is None or not self.limits.fresh(
                trajectory.seq, trajectory.stamp_ns, arrival_ns, queue_s=float(values.get("queue_ms", 0)) / 1e3,
                compute_s=frame_compute_ms(values) / 1e3, final=True):
            return
        out = self.present.timed(trajectory, *placed)   # stamped now, from the ego now (output_retime), or as is
        if out is None:   # too old to re-time (or no current pose): counted there; where its time went, logged
            self.get_logger().warning(timeline(trajectory, values), throttle_duration_sec=1.0)
            return
        try:  # the last gate before the car, for every kind of model and output frame
            expect_finite(out.points, "nonfinite_output", f"trajectory of frame {trajectory.seq}")
        except NonFiniteError as exc:
            self._reject(exc.reason, exc, trajectory.stamp_ns)
            return
        frame_id = self.params["frame_id"]
        msg = convert.trajectory_to_msg(trajectory, self.msg_cls, self.output_kind, frame_id, out.points,
                                        stamp_ns=out.stamp_ns, z=out.z)
        turn = self.signals.command(out.stamp_ns, self.present.current_pose(), float(out.points[0, 3]))  # ego now
        self.pub.publish(msg)
        self.candidates.publish(msg, out.points, out.stamp_ns, frame_id, out.z, turn)  # same stamp, frame, points
        self.signals.publish(turn)
        self._publish_markers(out.points, out.stamp_ns)
        publish_trajectory_info(self.info_pub, self.get_name(), trajectory, {**values, **out.info})  # camera stamp

    def _extra_checks(self):
        role = ([self.role.check()] if self.role is not None else []) + (self.packed.checks() if self.packed else [])
        role += [self.limits.check(), self.chunk_flow.check(), *self.signals.checks()]
        dtype = self.dtype_choice
        return role + [cpu_load_check(self.cores),
                ("dtype", 0, dtype.dtype, {"dtype": dtype.dtype, "dtype_reason": dtype.reason}),
                ("handover", 0, f"receives shared memory of domain {HOST_ID:016x}",
                 {"receives_shm_domain": f"{HOST_ID:016x}", "model_id": f"{self.decoder.model_id:016x}"})]

