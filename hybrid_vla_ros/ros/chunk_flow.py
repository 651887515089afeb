"""Chunked prefill in the graph (issue 29; the stages: engine/chunked_stages.py): the `chunks` parameter of both
stage nodes, the prefix publishing a frame chunk by chunk, and the suffix running each arriving chunk and
accounting for every frame once.

Prefix: a frame's chunks are computed and published one after the other (each envelope as soon as its blocks
are done). In-flight slots, latest-wins and the partition stay per frame: only the last chunk's state carries
the frame's flight slot to an in-process suffix (which frees it when the frame is done); a frame that fails
part-way is dropped whole, counted once, and its slot freed here.

Suffix: a chunk is run as it arrives; the trajectory is published on the last one, with the frame's times
(first chunk received to trajectory). A refused chunk is counted by reason in the `chunks` diagnostic; its
frame, and a frame left unfinished (`take_abandoned`: a chunk never came), is counted once as lost
(rejected with the refusal's reason, or dropped as `chunk_lost`), whatever happens to its other chunks.
"""

from __future__ import annotations

import threading
import time
from collections import Counter, OrderedDict
from dataclasses import dataclass

from rclpy.qos import QoSProfile
from std_msgs.msg import UInt8MultiArray

from ..engine.chunking import chunk_count, parse_chunks
from ..engine.scheduling.partition import boundary_bytes
from ..errors import ConfigError, HybridVLAError, expect
from . import messages
from .nodes.diagnostics import publish_frame_info
from .topics import BOUNDARY_QOS

SUFFIX_TABLE = "hybrid_vla_suffix"   # the suffix node's parameter table (ros/nodes/suffix_node.py NODE_NAME)

FRAMES_REMEMBERED = 1024   # stamps of frames already published or counted lost (each is counted once)


def chunks_per_frame(model, chunks) -> int:
    """The `chunks` parameter -> the number of chunks of every frame of `model` (its prompt's layout is fixed),
    checked at configure: a chunking the model cannot take is a clear error there, not a refusal per frame."""
    chunks = parse_chunks(chunks)
    if chunks == 1:
        return 1
    expect(model.kind == "waypoints", ConfigError,
           f"chunks={chunks!r}: model '{model.spec.name}' decodes action tokens (ActionFlow's packed steps), which "
           f"are not chunked; keep chunks: 1")
    return chunk_count(model, chunks)


def boundary_qos(depth: int) -> QoSProfile:
    """The boundary topic's QoS (reliable, transient local) holding at least `depth` messages."""
    return QoSProfile(depth=max(BOUNDARY_QOS.depth, depth), durability=BOUNDARY_QOS.durability,
                      reliability=BOUNDARY_QOS.reliability, history=BOUNDARY_QOS.history)


def frame_compute_ms(values: dict) -> float:
    """A published frame's own time, for its age limit (from its trajectory info): a chunked one's from its first
    chunk taken to its trajectory (frame_ms less queue_ms), not per chunk; a frame served as a conversation (tokens
    answered back: action tokens, Alpamayo's decode and expert steps) its whole latency since it arrived, of which
    the suffix's own share (suffix_ms) is a part; else the suffix's time."""
    if "frame_ms" in values:
        return float(values["frame_ms"]) - float(values["queue_ms"])
    return float(values.get("latency_ms") or values.get("suffix_ms") or 0)


class PrefixChunks:
    """The prefix node's side: parameter, ring and queue sizes, and one frame served chunk by chunk."""

    def __init__(self, node):
        p = node.params
        self.node, self.chunks = node, parse_chunks(p["chunks"])
        self.count = chunks_per_frame(node.model, self.chunks)
        self.slots = p["max_in_flight"] * self.count   # shared-memory ring slots, boundary history
        self.states_sent = 0
        self.cut_short = 0     # frames dropped after some of their chunks had been published

    def check_ring_room(self, handover) -> None:
        """Configure: refused (ConfigError: sizes, remedy) when /dev/shm cannot hold the boundary ring; a state's
        bytes estimated from the model at the zone's lowest cut (the most DeepStack additions). Not when a
        receiver (a suffix node) shares this node's executor: auto then hands over in process."""
        node = self.node
        frame = boundary_bytes(node.model, node.zone.lo, node.placement.prefix_dtype.itemsize)["boundary_bytes"]
        executor = node.executor
        local = executor is not None and any(getattr(n, "table", None) == SUFFIX_TABLE for n in executor.get_nodes())
        handover.check_ring_room(-(-frame // self.count), self.count > 1, local)

    def serve(self, frame, t0: float, waits: dict | None = None) -> bool:
        """The frame (decoded, with its ego state) -> its chunks published; True when the last one went to a
        suffix in this process (which then frees the frame's flight slot). waits: what the frame waited before
        the prefix took it, for its ~/debug/frame_info."""
        node, sent, states = self.node, 0, iter(())
        side = node.serving   # the waypoint kind's prefix (ros/nodes/serving/waypoints.py)
        kind = side.handover.kind()   # one transport for all chunks of the frame
        try:
            states = side.stage.run_chunks(frame, self.chunks)   # chunks 1: the whole state, computed here
            for state in states:
                node.last_stamp_ns = frame.stamp_ns
                try:
                    envelope = side.handover.encode(state, kind)
                except (HybridVLAError, TimeoutError) as exc:
                    return self._lost(sent, "handover", exc, frame)
                if not state.last_chunk:
                    state.flight = None   # the frame's slot travels with its last chunk only
                else:
                    side.flight.prefix_finished(state.timings["prefix_ms"] / 1e3, handed_to_suffix=kind == "inproc")
                side.report_reclaimed(state)
                node.pub.publish(messages.boundary_to_msg(envelope, UInt8MultiArray()))
                sent += 1
                self.states_sent += 1
        except HybridVLAError as exc:
            return self._lost(sent, "invalid_input", exc, frame)
        finally:
            getattr(states, "close", lambda: None)()   # a generator left part-way frees the frame's keys now
        vision = getattr(side.stage, "vision", None) if self.chunks == 1 else None   # images encoded once
        counts = {} if vision is None else {"images_encoded": vision.encoded, "images_reused": vision.reused,
                                            "encode_once": "on" if vision.exact else f"off: {vision.why}"
                                            if vision.exact is False else f"undecided: {vision.why}"}
        if getattr(side.stage, "stream", None) is not None:   # streaming KV: this window's kept and computed slots
            kept = state.kv_segments[1]
            counts.update(kv_slots_kept=int(kept.sum()), kv_slots_computed=int((kept == 0).sum()))
        publish_frame_info(node.info_pub, node.get_name(), state, {**(waits or {}), **counts})
        ms = (time.perf_counter() - t0) * 1e3
        node.health.record(ms)
        node.diagnostics.publish_time(ms)
        return kind == "inproc"

    def _lost(self, sent: int, reason: str, exc: Exception, frame) -> bool:
        """The frame dropped whole, counted once (the suffix drops the chunks it got: it counts the frame too,
        as chunk_lost, when the next frame starts)."""
        self.cut_short += sent > 0
        self.node._reject(reason, exc, frame.stamp_ns)
        return False

    def qos(self) -> QoSProfile:
        """The boundary publisher's: every chunk state in flight kept (chunks 1: the graph's BOUNDARY_QOS)."""
        return boundary_qos(self.slots) if self.count > 1 else BOUNDARY_QOS

    def check(self) -> tuple:
        return ("chunks", 0, f"{self.chunks} ({self.count} per frame)",
                {"chunks": str(self.chunks), "chunks_per_frame": str(self.count),
                 "chunk_states_sent": str(self.states_sent), "frames_cut_short": str(self.cut_short)})


@dataclass
class _Frame:
    received: float      # perf_counter when its first chunk arrived
    taken: float         # ... and when the worker took it
    handled_s: float = 0.0


class SuffixChunks:
    """The suffix node's side: queue sizes, and the chunks of chunked frames (chunk_count > 1) served."""

    def __init__(self, node, stage):
        self.node, self.stage = node, stage   # a waypoint model's SuffixStage (its `chunks`: the frame assembled)
        self.chunks = parse_chunks(node.params["chunks"])
        self.count = chunks_per_frame(node.model, self.chunks)
        self.refused: Counter = Counter()   # chunks refused, by reason
        self.states = self.frames_served = self.frames_lost = 0
        self._done: OrderedDict = OrderedDict()    # stamps of frames published or counted lost
        self._opened: OrderedDict = OrderedDict()  # seq -> stamp of chunked frames the stage opened
        self._open: dict[int, _Frame] = {}         # stamp -> times of a frame being assembled
        self._lock = threading.Lock()
        told = node.health.listener                # every frame counted lost is done: never counted again
        node.health.listener = lambda kind, reason, stamp: (self._close(stamp), told and told(kind, reason, stamp))

    def qos(self) -> QoSProfile:
        """The boundary subscription's: BOUNDARY_QOS's depth in frames, of chunks."""
        return boundary_qos(BOUNDARY_QOS.depth * self.count) if self.count > 1 else BOUNDARY_QOS

    def _close(self, stamp_ns: int | None) -> None:
        if stamp_ns is None:
            return
        with self._lock:
            self._done[stamp_ns] = True
            while len(self._done) > FRAMES_REMEMBERED:
                self._done.popitem(last=False)
            self._open.pop(stamp_ns, None)

    def done(self, stamp_ns: int | None) -> bool:
        with self._lock:
            return stamp_ns in self._done

    def accepting(self, stamp_ns: int | None) -> bool:
        """As StageNode.accepting, but a frame's chunks arriving while inactive count one drop."""
        if self.node.active:
            return True
        if stamp_ns is None or not self.done(stamp_ns):
            self.node.health.drop("inactive", stamp_ns)
        return False

    def serve(self, state, transport: str, t0: float, received: float) -> None:
        node, stamp = self.node, state.stamp_ns
        self.states += 1
        where = f"chunk {state.chunk_index}/{state.chunk_count} of frame {state.seq}"
        if self.done(stamp):   # published, or already counted lost: this chunk cannot serve it
            self._refuse("frame_closed", f"{where}: the frame was already published or counted lost")
            if self.stage.chunks._belongs(state):
                self.stage.chunks.abandon()
            self.report_abandoned()
            return
        if state.chunk_index == 0:   # the frame's checks, once: its age when taken, its stamp order
            if not node.limits.fresh(state.seq, stamp, state.arrival_ns, queue_s=t0 - received) or \
                    node._older(stamp, f"boundary state of frame {state.seq}"):
                return
            with self._lock:
                self._open[stamp] = _Frame(received, t0)
                self._opened[state.seq] = stamp
                while len(self._opened) > FRAMES_REMEMBERED:
                    self._opened.popitem(last=False)
        try:
            trajectory = self.stage.run(state)
        except HybridVLAError as exc:   # out of order, foreign, malformed, non-finite: the frame is lost here
            reason = getattr(exc, "reason", "invalid_boundary")
            self._refuse(reason, str(exc))
            if not self.done(stamp):
                self.frames_lost += 1
                node._reject(reason, exc, stamp)
            return
        finally:
            self._handled(stamp, t0)
            self.report_abandoned()
        if trajectory is not None:
            self._publish(state, trajectory, transport, t0)

    def _handled(self, stamp_ns: int, t0: float) -> None:
        with self._lock:
            frame = self._open.get(stamp_ns)
            if frame is not None:
                frame.handled_s += time.perf_counter() - t0

    def _publish(self, state, trajectory, transport: str, t0: float) -> None:
        """The frame's trajectory, with its times: suffix_ms (this node's compute on its chunks), frame_ms
        (first chunk received to trajectory) and queue_ms (the first chunk's wait); the age limits use these."""
        node = self.node
        with self._lock:
            frame = self._open.pop(state.stamp_ns, None) or _Frame(t0, t0, time.perf_counter() - t0)
        self._close(state.stamp_ns)
        self.frames_served += 1
        now = time.perf_counter()
        state.timings["frame_suffix_s"] = frame.handled_s   # the in-flight gate's suffix time of this frame
        ms = frame.handled_s * 1e3
        node.publish_trajectory(trajectory, state.arrival_ns, {
            "suffix_ms": f"{ms:.3f}", "queue_ms": f"{(frame.taken - frame.received) * 1e3:.3f}",
            "frame_ms": f"{(now - frame.received) * 1e3:.3f}", "transport": transport,
            "chunks": str(state.chunk_count)})
        node.health.record(ms)
        node.diagnostics.publish_time(ms)

    def _refuse(self, reason: str, message: str) -> None:
        self.refused[reason] += 1
        self.node.get_logger().warning(f"chunk refused ({reason}): {message}", throttle_duration_sec=1.0)

    def report_abandoned(self) -> None:
        """Frames the stage dropped unfinished (a chunk lost or refused, the next frame begun): each counted
        once, as chunk_lost, unless already counted for the chunk that was refused."""
        for seq in self.stage.chunks.take_abandoned():
            with self._lock:
                stamp = self._opened.pop(seq, None)
            if stamp is not None and not self.done(stamp):
                self.frames_lost += 1
                self.node.health.drop("chunk_lost", stamp)

    def check(self) -> tuple:
        refused = dict(self.refused)
        return ("chunks", 0, f"expecting {self.chunks} ({self.count} per frame); {sum(refused.values())} chunks "
                             f"refused, {self.frames_lost} chunked frames lost",
                {"chunks": str(self.chunks), "chunks_per_frame": str(self.count), "chunk_states": str(self.states),
                 "chunked_frames_served": str(self.frames_served), "chunked_frames_lost": str(self.frames_lost),
                 "chunks_refused": str(sum(refused.values())),
                 **{f"chunks_refused.{k}": str(v) for k, v in sorted(refused.items())}})

