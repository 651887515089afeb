"""Action-token models in the graph (model.kind "tokens"; ActionFlow, engine/actionflow/prefix_server.py): the same
prefix and suffix nodes, with packed steps instead of one boundary state per frame.

prefix: camera frames -> PackedPrefixServer; its worker runs one group's packed step at a time and
publishes the step's bytes on ~/output/boundary_state (inline: a packed step is small and answered within
milliseconds); ~/input/action_tokens brings each step's next tokens back. Parameters: pack (K frames in
flight per group), pack_groups, token_timeout_s, decode.* (the decode policy, engine/decode/policy.py: the
same on both nodes); partition_point moves at the next drain.
suffix: a packed step in (on the same boundary topic; the HVLM header's kind) -> the next tokens out on
~/output/action_tokens at once, then the trajectories of the frames this step completed, stamped with
their own frame's stamp; a frame whose tokens make no trajectory (decode.vocabulary full, or stopped early)
has its tokens in ~/debug/trajectory_info only.

Infos: both stages publish ~/debug/step_info per packed step (step, rows, partition, the stage's time: the
scheduler joins them by step). Per frame, as for waypoint models, the prefix publishes ~/debug/frame_info
at its prefill and the suffix ~/debug/trajectory_info with its trajectory (latency from its prefill).
"""

from __future__ import annotations

import time

from diagnostic_msgs.msg import DiagnosticStatus, KeyValue
from std_msgs.msg import UInt8MultiArray

from ....engine.actionflow.prefix_server import PackedPrefixServer, SentStep
from ....engine.actionflow.suffix_server import PackedSuffixServer
from ....engine.decode.policy import DecodePolicy
from ....engine.placement import CPU
from ....engine.pipeline.worker import StageWorker
from ....engine.chunking import parse_chunks
from ....errors import ConfigError, HybridVLAError, expect
from ... import messages
from ...topics import BOUNDARY_QOS, TOKENS_QOS
from .side import SUFFIX_QUEUE, Side
from .answers import AnswerInput

LOSSLESS_FRAMES = 64   # input_policy lossless: frames waiting for a packed slot (a replay queues them all)


def info(name: str, values: dict) -> DiagnosticStatus:
    return DiagnosticStatus(name=name, values=[KeyValue(key=k, value=str(v)) for k, v in values.items()])


class Prefix(Side):
    """The prefix node's compute for an action-token model: frames the node took go to the server, which admits
    them (`_prepare`) right before their prefill."""
    auto_device = "cpu"   # device auto: the packed prefix runs on the CPU in this version

    def __init__(self, node):
        p = node.params
        expect(node.placement.prefix_device == CPU, ConfigError,
               f"model '{node.model.spec.name}' decodes action tokens: its packed prefix runs on the CPU in this "
               f"version (device {node.placement.prefix_device}); set device: cpu (or auto)")
        self.node = node
        self.server = PackedPrefixServer(node.model, p["pack"], p["pack_groups"], p["partition_point"],
                                         policy=p["input_policy"], capacity=LOSSLESS_FRAMES,
                                         token_timeout_s=p["token_timeout_s"], prepare=self._prepare,
                                         zone=tuple(node.zone), dtype=node.placement.prefix_dtype,
                                         decode=DecodePolicy.from_params(p))
        self.lossy_reason = "displaced" if p["input_policy"] == "latest" else "queue_full"
        self.step_pub = node.configured_publisher(DiagnosticStatus, "~/debug/step_info", 100)
        self.worker = StageWorker("prefix", self._step, source=self.server.next_group, cores=node.cores,
                                  threads=p["threads"] or None, health=node.health, on_error=node._on_worker_error,
                                  pending=lambda: len(self.server.inbox))
        AnswerInput(node, self.server.tokens_in, "invalid_tokens")   # ~/input/action_tokens: each step's tokens
        self.stage = self.server   # partition, set_partition: the cut moves at the next drain
        self.worker.start()

    def describe(self) -> str:
        p = self.node.params
        return f"packed steps inline ({p['pack_groups']} groups of {p['pack']} frames)"

    def _prepare(self, frame) -> bool:
        """An action-token frame's admission, right before its prefill: False = rejected (counted by the node)."""
        node = self.node
        if not (node._admissible(frame) and node._inputs(frame)):
            return False
        node.last_stamp_ns = frame.stamp_ns
        return True

    def submit(self, frame) -> None:
        dropped, why = self.server.submit(frame)
        if dropped is not None:
            self.node.health.drop("shutdown" if why == "shutdown" else self.lossy_reason, dropped.stamp_ns)

    def _step(self, group: int) -> None:
        """One group's packed step (the worker's handler): publish its bytes, then account for the frames
        lost on the way and the step's time."""
        try:
            sent = self.server.step(group)
        finally:  # a step that raised lost its frames (step_failed): each reported now, once
            for lost in self.server.take_lost():
                self.node._reject(lost.reason, ConfigError(lost.message), lost.stamp_ns)
        self.server.take_completed()  # the suffix publishes the actions; here they only free their slots
        if sent is None:
            return
        self.node.pub.publish(messages.boundary_to_msg(sent.payload, UInt8MultiArray()))
        self._publish_info(sent)
        self.node.health.record(sent.prefix_ms)
        self.node.diagnostics.publish_time(sent.prefix_ms)

    def _publish_info(self, sent: SentStep) -> None:
        name = self.node.get_name()
        self.step_pub.publish(info(f"{name}: step", {
            "step": sent.step, "group": sent.group, "rows": sent.rows, "frames": sent.frames,
            "prefill": sent.prefill, "partition": sent.partition, "prefix_ms": f"{sent.prefix_ms:.3f}"}))
        if sent.prefill_seq is not None:  # a frame's info when its prefill went out
            self.node.info_pub.publish(info(f"{name}: frame", {
                "stamp_ns": sent.stamp_ns, "seq": sent.prefill_seq, "partition": sent.partition,
                "prefix_ms": f"{sent.prefix_ms:.3f}", "prefill_step": sent.step}))

    def time_limits(self) -> tuple[dict, list]:
        limit = self.server.timeout()
        return ({"token_timeout_ms": limit.seconds, "token_timeout_source": limit.source,
                 "token_round_trip_ms": self.server.round_trips.longest()}, [limit.warning] if limit.warning else [])

    def checks(self) -> list:
        s = self.server
        return [("packed", 0, f"{s.in_flight} frames in flight in {len(s.groups)} groups of {s.pack}, "
                              f"{len(s.inbox)} waiting for a slot",
                 {"pack": str(s.pack), "pack_groups": str(len(s.groups)), "in_flight": str(s.in_flight),
                  "waiting": str(len(s.inbox)),
                  "steps": str(s.step_no), "stale_tokens": str(s.stale_tokens),
                  "pending_partition": str(s.pending_partition if s.pending_partition is not None else "")})]

    def close(self) -> None:
        self.server.close()
        self.worker.close()
        for lost in self.server.take_lost():  # frames waiting or in flight: each accounted for, once
            self.node.health.drop(lost.reason, lost.stamp_ns)


class Suffix(Side):
    """The suffix node's compute for an action-token model, one packed step per boundary message."""
    queue, qos = SUFFIX_QUEUE, BOUNDARY_QOS

    def __init__(self, node):
        self.node = node
        p = node.params   # the KV ring a step may claim: the prefix's pack x pack_groups (both in the graph's YAML)
        model = node.model.spec.name
        expect(parse_chunks(p["chunks"]) == 1, ConfigError,
               f"chunks={p['chunks']!r}: model '{model}' decodes action tokens, which are not chunked")
        expect(not p["warm_standby"], ConfigError, f"warm_standby: model '{model}' decodes action tokens; the frames "
               f"in flight live in the active suffix's KV ring, a standby cannot take them over")
        self.server = PackedSuffixServer(node.model, tuple(node.zone), node.suffix_dtype, node.boundary_dtype,
                                         max_slots=p["pack"] * p["pack_groups"], int8=node.suffix_int8,
                                         decode=DecodePolicy.from_params(p))
        self.tokens_pub = node.configured_publisher(UInt8MultiArray, "~/output/action_tokens", TOKENS_QOS)
        self.step_pub = node.configured_publisher(DiagnosticStatus, "~/debug/step_info", 100)

    def checks(self) -> list:
        """The suffix's packed check: steps done after their deadline (dropped unanswered; the prefix counts
        their frames as token_feedback_timeout)."""
        late = self.server.expired_steps
        return [("packed", 1 if late else 0, f"{late} steps past their deadline", {"expired_steps": str(late)})]

    def on_message(self, data: bytes, received: float) -> None:
        if self.node.accepting():
            self.node.worker.submit((data, received))

    def handle(self, item) -> None:
        node, (data, received), t0 = self.node, item, time.perf_counter()
        try:
            out = self.server.step(data)
        except HybridVLAError as exc:  # NaN/Inf: nonfinite_boundary / nonfinite_output
            node._reject(getattr(exc, "reason", "invalid_boundary"), exc)
            return
        for seq, stamp_ns in out.incomplete:   # lost here only (the prefix counts the frames it gave up)
            node.health.drop("action_incomplete", stamp_ns)
        if out.expired:   # past its deadline: the prefix gives its frames up and counts them (one authority)
            node.get_logger().warning(f"packed step {out.step} done after its deadline: dropped unanswered")
            return
        self.tokens_pub.publish(UInt8MultiArray(data=out.tokens_payload))   # first: the prefix waits for it
        ms = (time.perf_counter() - t0) * 1e3   # the step's compute (the scheduler's sample), not the publishing
        for result in out.completed:
            values = {"latency_ms": f"{result.latency_s * 1e3:.3f}", **result.diagnostics(), "transport": "packed"}
            if result.trajectory is None:   # tokens only (reasoning, stopped before a whole action, no plan)
                if result.error:   # a text answer that is no plan: counted, nothing published
                    node.health.drop(result.reason, result.stamp_ns)
                    values["error"] = result.error
                node.info_pub.publish(info(f"{node.get_name()}: tokens", {
                    "stamp_ns": result.stamp_ns, "seq": result.seq, "partition": out.partition, **values}))
            else:
                node.publish_trajectory(result.trajectory, out.arrivals.get(result.seq, 0), values)
        self.step_pub.publish(info(f"{node.get_name()}: step", {
            "step": out.step, "rows": out.rows, "partition": out.partition, "completed": len(out.completed),
            "suffix_ms": f"{ms:.3f}", "queue_ms": f"{(t0 - received) * 1e3:.3f}", "transport": "packed"}))
        node.health.record(ms)
        node.diagnostics.publish_time(ms)
