"""A waypoint-head model in the graph (model.kind "waypoints"): one boundary state per frame (chunked: several,
ros/chunk_flow.py) from the prefix's PrefixStage through the handover (shared memory, in process or inline:
engine/handover) to the suffix's SuffixStage, whose trajectory goes out by the node's output path.

prefix: frames the node prepared (cameras, kinematic state, route, context) pass the in-flight gate (max_in_flight:
a slot per frame, freed by the suffix when it shares the process, else once the state left) to the worker, which
runs blocks [0, p) and hands the state over. Suffix nodes report the shared-memory domain they reach on
/diagnostics; with boundary_transport auto a receiver elsewhere makes the handover inline.
suffix: each state is run through blocks [p, L) and the head on the node's worker; a warm standby keeps the active
suffix's states unread and takes over when it goes (ros/nodes/standby.py).
"""

from __future__ import annotations

import os
import time
from collections import OrderedDict

from diagnostic_msgs.msg import DiagnosticArray

from ....engine.handover.endpoints import HOST_ID, HandoverDecoder, HandoverEncoder, envelope_stamp
from ....engine.pipeline.flight import FlightControl
from ....engine.pipeline.standby_buffer import hand_to_worker
from ....engine.pipeline.worker import StageWorker
from ....engine.stages import PrefixStage, SuffixStage
from ....errors import ConfigError, HybridVLAError, expect
from ....model.load import model_id
from ...chunk_flow import SuffixChunks
from ...topics import STANDBY_NODE
from ..diagnostics import reported_shm_domains
from ..standby import SuffixRole
from ..time_limits import waits_to_suffix
from .side import SUFFIX_QUEUE, Side

SENT_STAMPS_KEPT = 256   # seq -> stamp of frames handed over (to name those lost in the ring)


def graph_scope(node) -> str:
    """The scope of a graph's shared-memory rings: its ROS domain and namespace (`d0`, `d3_car1`). Prefix and
    suffix of one graph agree on it; rings of another graph (or user: segment names carry the uid) are never
    opened."""
    domain = "".join(ch for ch in os.environ.get("ROS_DOMAIN_ID", "0") if ch.isdigit()) or "0"
    namespace = "".join(ch if ch.isalnum() else "_" for ch in node.get_namespace().strip("/"))
    return f"d{domain}" + (f"_{namespace}" if namespace else "")


class Prefix(Side):
    """The prefix's stage, in-flight gate, handover and worker; `submit(frame)` takes a prepared frame."""

    def __init__(self, node):
        p = node.params
        self.node = node
        expect(not p["kv_stream"] or node.chunk_flow.count == 1, ConfigError,
               f"kv_stream with chunks={p['chunks']!r}: chunked prefill and streaming KV are one or the other")
        self.stage = PrefixStage(node.model, p["partition_point"], node.placement, node.zone,
                                 kv_stream=p["kv_stream"], kv_refresh_windows=p["kv_refresh_windows"])
        # max_in_flight: frames taken and not finished by the suffix (in-process suffix: it frees the slot;
        # otherwise the slot is freed once the state left this process, and the ring bounds what waits).
        # Chunked: a slot per frame, freed with its last chunk; the ring holds max_in_flight x chunks states.
        self.flight = FlightControl(p["max_in_flight"], just_in_time=True, slot_timeout_s="auto")
        self.handover = HandoverEncoder(p["boundary_transport"], ring_slots=node.chunk_flow.slots,
                                        ring_name=node.get_name(), flight=self.flight, scope=graph_scope(node),
                                        model_id=model_id(node.model))
        self.receiver_domains: dict[str, int] = {}  # suffix node name -> the shm domain it reported
        self.sent_stamps: OrderedDict = OrderedDict()  # seq -> stamp of the last frames handed over
        try:   # refused (/dev/shm too small, a worker that cannot start): nothing left mapped
            node.chunk_flow.check_ring_room(self.handover)
            self.worker = StageWorker("prefix", self._process, policy=p["input_policy"], capacity=p["max_in_flight"],
                                      cores=node.cores, threads=p["threads"] or None, health=node.health,
                                      on_error=node._on_worker_error, admit=self.flight.admit,
                                      on_admitted_stop=self.flight.release, stamp_of=lambda f: f.stamp_ns).start()
        except BaseException:
            self.handover.close()
            raise
        self.submit = self.worker.submit
        node.configured_subscription(DiagnosticArray, "/diagnostics", self._on_diagnostics, 10)

    def describe(self) -> str:
        return f"boundary transport {self.node.params['boundary_transport']}"

    def _on_diagnostics(self, msg: DiagnosticArray) -> None:
        """Suffix nodes report the shared-memory domain they can reach ("<node>: handover", receives_shm_domain):
        with boundary_transport auto, a receiver on another host or /dev/shm makes the handover inline. The
        graph is asked who reads the boundary topic only until a receiver is known, and when a report changes."""
        reported = reported_shm_domains(msg)
        if not reported or (reported.items() <= self.receiver_domains.items() and self.handover.receivers is not None):
            return
        self.receiver_domains.update(reported)
        topic = getattr(self.node.pub, "topic_name", None)
        readers = {i.node_name for i in self.node.get_subscriptions_info_by_topic(topic)} if topic else None
        known = {d for n, d in self.receiver_domains.items() if readers is None or n in readers}
        self.handover.receivers = known or None  # None: none reported yet (same host assumed)

    def _process(self, frame) -> None:
        """The worker's handler, run after the flight gate admitted the frame: the slot is freed here unless
        the state went to an in-process suffix (which frees it when done)."""
        handed_in_process = False
        try:
            handed_in_process = self._serve(frame)
        finally:
            if not handed_in_process:
                self.flight.release()

    def _serve(self, frame) -> bool:
        """-> True when the state was handed to a suffix in this process."""
        node, t0 = self.node, time.perf_counter()
        gate_s, jit_s = self.flight.last_waits_s   # this worker's own admit, just before it took the frame
        waits = {"to_prefix_ms": f"{(time.time_ns() - frame.arrival_ns) / 1e6:.1f}" if frame.arrival_ns else "",
                 "slot_wait_ms": f"{gate_s * 1e3:.1f}", "just_in_time_ms": f"{jit_s * 1e3:.1f}"}
        if not (node._admissible(frame) and node._inputs(frame)):
            return False
        return node.chunk_flow.serve(frame, t0, waits)   # run, hand over and publish, chunk by chunk (chunks 1: one)

    def report_reclaimed(self, state) -> None:
        """Frames whose ring slots the writer took back (their reader died before reading them): lost."""
        self.sent_stamps[state.seq] = state.stamp_ns
        while len(self.sent_stamps) > SENT_STAMPS_KEPT:
            self.sent_stamps.popitem(last=False)
        for seq in self.handover.take_reclaimed():
            self.node.health.drop("ring_slot_reclaimed", self.sent_stamps.get(seq))

    def time_limits(self) -> tuple[dict, list]:
        flight = self.flight
        return {"flight_slot_timeout_ms": flight.slot_timeout(), "flight_slots_reclaimed": flight.reclaimed}, []

    def checks(self) -> list:
        h = self.handover
        return [("handover", 0, f"{h.kind()} to receivers in shm domains "
                                f"{sorted(f'{d:016x}' for d in h.receivers or [])}",
                 {"transport": h.kind(), "shm_domain": f"{HOST_ID:016x}", "model_id": f"{h.model_id:016x}",
                  "ring_slots_reclaimed": str(h.reclaimed)})]

    def close(self) -> None:
        self.worker.close()
        self.handover.close()


class Suffix(Side):
    """The suffix's stage and handover decoder; a warm standby's role; chunked frames' accounting."""

    def __init__(self, node):
        p = node.params
        self.node = node
        self.stage = SuffixStage(node.model, p["partition_point"], node.placement, node.zone,
                                 any_boundary_dtype=node.boundary_dtype is None)
        self.chunks = SuffixChunks(node, self.stage)   # chunked frames' states (ros/chunk_flow.py)
        # Bounded like the prefix: in one process the prefix's in-flight gate keeps at most max_in_flight here;
        # across processes the ring does (shm). A full mailbox drops and counts, never blocks the executor.
        self.queue = SUFFIX_QUEUE * self.chunks.count   # chunked: as many frames' chunks (and in the topic's history)
        self.qos = self.chunks.qos()
        self.role = self._standby_role() if p["warm_standby"] else None
        # last: nothing after it can fail and leave it registered
        self.decoder = HandoverDecoder(scope=graph_scope(node), model_id=model_id(node.model))

    def _standby_role(self) -> SuffixRole:
        node = self.node

        def take_over(buffered) -> None:  # frames newer than the last published: the newest the queue takes run
            hand_to_worker(buffered, node.worker, lambda item: envelope_stamp(item[0]))
        # the standby keeps what the active one's queue may hold (frames x chunks), plus the takeover window
        return SuffixRole(node, node.get_name() == STANDBY_NODE, take_over, SUFFIX_QUEUE, self.chunks.count)

    def on_message(self, data: bytes, received: float) -> None:
        """The executor's thread: a standby keeps the state unread (a shm slot is the active's); an active suffix
        watches a new ring from now on and queues the state; an inactive one lets its slots go."""
        if self.role is not None and not self.role.active:
            self.role.keep((data, received), envelope_stamp(data))
        elif self.chunks.accepting(envelope_stamp(data)):   # a frame's chunks count one drop when inactive
            self.decoder.watch(data)   # a new shm ring is beaten from now on, not once the worker gets to it
            self.node.worker.submit((data, received))
        else:
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

    def handle(self, item) -> None:
        data, received = item
        t0 = time.perf_counter()
        try:
            state, transport = self.decoder.decode(data)
        except HybridVLAError as exc:   # a format this release replaced keeps its own reason (old_message)
            self.node._reject(getattr(exc, "reason", "invalid_boundary"), exc, envelope_stamp(data))
            return
        if state.flight is not None:  # handed over in this process: report to the prefix's in-flight gate
            state.flight.suffix_started()
        try:
            self._serve(state, transport, t0, received)
        finally:
            if state.flight is not None:   # chunked: the last chunk's state, with the frame's suffix time
                state.flight.suffix_finished(state.timings.get("frame_suffix_s", time.perf_counter() - t0))

    def _serve(self, state, transport: str, t0: float, received: float) -> None:
        node = self.node
        if state.chunk_count != 1:   # a chunk of a chunked frame: run now, published on the frame's last chunk
            return self.chunks.serve(state, transport, t0, received)
        if not node.limits.fresh(state.seq, state.stamp_ns, state.arrival_ns, queue_s=t0 - received):
            return  # already too old: not worth the compute
        if node._older(state.stamp_ns, f"boundary state of frame {state.seq}"):
            return
        try:
            trajectory = self.stage.run(state)
        except HybridVLAError as exc:  # NaN/Inf in the state or the output: nonfinite_boundary/_output
            node._reject(getattr(exc, "reason", "invalid_boundary"), exc, state.stamp_ns)
            return
        finally:
            self.chunks.report_abandoned()   # a chunked frame left unfinished by this whole one
        ms = (time.perf_counter() - t0) * 1e3
        stream = self.stage.stream   # streaming KV: slots the prefix kept that this suffix computed (it lost them)
        node.publish_trajectory(trajectory, state.arrival_ns, {
            "suffix_ms": f"{ms:.3f}", "queue_ms": f"{(t0 - received) * 1e3:.3f}", "transport": transport,
            **waits_to_suffix(state.arrival_ns, received),
            **({"kv_slots_recomputed_total": str(stream.recomputed_slots)} if stream is not None else {})})
        node.health.record(ms)
        node.diagnostics.publish_time(ms)

    def checks(self) -> list:
        return ([self.role.check()] if self.role is not None else []) + [self.chunks.check(), (
            "handover", 0, f"receives shared memory of domain {HOST_ID:016x}",
            {"receives_shm_domain": f"{HOST_ID:016x}", "model_id": f"{self.decoder.model_id:016x}"})]

    def close(self) -> None:
        self.decoder.close()
