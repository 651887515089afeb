"""The suffix node's stage for an Alpamayo release: each message of the prefix (~/input/boundary_state) answered by
AlpamayoSuffixServer on the worker's thread (answers on ~/output/action_tokens, reliable and volatile:
TOKENS_QOS); each finished frame's trajectory (the t0 ego frame as predicted) goes out through the node's one output
path (serving/output.py: in frame_id with the suffix's odometry, re-timed, CandidateTrajectories, turn signals,
markers), its ~/debug/trajectory_info with the decoded token ids and their count, why the decode ended (stop_token /
max_tokens), the seed, the expert's Euler steps and each side's ms per phase (expert time per side included);
its reasoning as text on ~/output/reasoning where the release has a tokenizer (ReasoningOutput).
A frame the server refuses (non-finite boundary, damaged or out-of-turn message) is counted here with its reason;
the prefix hears it and moves on. Up to max_in_flight frames open at once (the prefix's overlap); a frame that
finishes after a newer one of the same prefix run went to the output (its reasoning longer) is not published:
superseded, counted.
"""

from __future__ import annotations

import time

import numpy as np
from std_msgs.msg import String, UInt8MultiArray

from .....engine.expert_serve.suffix_server import AlpamayoSuffixServer, SuffixFrame
from .....engine.pipeline.worker import StageWorker
from .....errors import ConfigError, HybridVLAError
from .....model.plugins.alpamayo.release import release_tokenizer
from .....types import Trajectory
from ....messages import ns_to_stamp
from ....topics import TOKENS_QOS
from ..side import Side
from .weights import side_model

QUEUE = 256          # messages waiting for the worker (a frame sends 1 + tokens + steps of them)


def trajectory_points(xyz: np.ndarray, heading: np.ndarray, dt: float) -> np.ndarray:
    """(N, 3) positions 0.1 s apart after t0 and their heading -> (N, 5) x, y, heading, speed, time_from_start
    (speed: each step's distance / dt, the first from the origin)."""
    xy = xyz[:, :2]
    steps = np.diff(np.vstack([np.zeros((1, 2)), xy]), axis=0)
    speed = np.hypot(steps[:, 0], steps[:, 1]) / dt
    times = dt * np.arange(1, len(xy) + 1)
    return np.column_stack([xy, heading, speed, times])


ANSWER_LINK_WAIT_S = 10.0   # the longest wait for the prefix's answers reader (it sent a crossing: it is there)


class ReasoningOutput:
    """~/output/reasoning: each finished frame's decoded reasoning as text (the release's tokenizer, extended as the
    authors' code extends it; special tokens left out), stamped with the frame's camera stamp:
    autoware_internal_debug_msgs/StringStamped, or std_msgs/String under ~/output/reasoning_text where that
    package is not importable. Not published for a release without a tokenizer (said once at configure)."""

    def __init__(self, node, model):
        directory = model.checkpoint_directory
        self.tokenizer = release_tokenizer(model.config, directory) if directory is not None else None
        self.pub = None
        if self.tokenizer is None:
            node.get_logger().info("no tokenizer in the release (nor its backbone's folder): ~/output/reasoning is "
                                   "not published; trajectory_info carries the token ids")
            return
        try:
            from autoware_internal_debug_msgs.msg import StringStamped
            self.cls, topic = StringStamped, "~/output/reasoning"
        except ImportError:
            self.cls, topic = String, "~/output/reasoning_text"
        self.pub = node.configured_publisher(self.cls, topic, 10)

    def publish(self, tokens: list[int], stamp_ns: int) -> None:
        if self.pub is None:
            return
        msg = self.cls(data=self.tokenizer.decode(tokens, skip_special_tokens=True))
        if hasattr(msg, "stamp"):
            ns_to_stamp(stamp_ns, msg.stamp)
        self.pub.publish(msg)


class AlpamayoSuffixStage(Side):
    node_inputs = False   # its own subscription and worker: every message of a frame's conversation, in any state

    def __init__(self, node):
        p = node.params
        self.node = node
        self.model = model = side_model(node, "suffix")
        self.server = AlpamayoSuffixServer(model, max_open=p["max_in_flight"])
        self.newest = (None, -1)   # (run, seq) of the newest frame published: an older one finishing is superseded
        self.answer_pub = node.configured_publisher(UInt8MultiArray, "~/output/action_tokens", TOKENS_QOS)
        node.configured_subscription(UInt8MultiArray, "~/input/boundary_state", self._on_message, TOKENS_QOS)
        self.worker = StageWorker("suffix", self._handle, policy="lossless", capacity=QUEUE,
                                  cores=node.cores, threads=p["threads"] or None,
                                  health=node.health, on_error=node._on_worker_error).start()
        self.frames = 0
        self.reasoning = ReasoningOutput(node, model)
        choice = node.dtype_choice
        node.get_logger().info(f"suffix: {model.config.release} ({model.num_blocks} blocks), dtype {choice.dtype} "
                               f"({choice.reason}), {node.describe_output()}")

    def _on_message(self, msg) -> None:
        """Taken in any state: a frame started before a deactivate finishes (its prefix waits for the answers)."""
        self.worker.submit((bytes(msg.data), time.perf_counter()), timeout_s=1.0)

    def _handle(self, item) -> None:
        data, received = item
        t0 = time.perf_counter()
        try:
            reply = self.server.handle(data)
        except HybridVLAError as exc:   # not even a frame's head (an old format: old_message): nothing to answer
            self.node._reject(getattr(exc, "reason", "invalid_boundary"), exc)
            return
        if reply.answers:
            self._await_prefix_reader()
        for answer in reply.answers:
            self.answer_pub.publish(UInt8MultiArray(data=answer))
        if reply.refused is not None:
            tag, reason, message = reply.refused
            self.node._reject(reason, ConfigError(message), tag.stamp_ns)
        if reply.finished is not None and not self._superseded(reply.finished.tag):
            self._publish(reply.finished, (t0 - received) * 1e3)

    def _superseded(self, tag) -> bool:
        """A frame finished after a newer frame of its prefix's run went to the output (its plan is older than the
        car's newest): counted, not published."""
        run, seq = self.newest
        if tag.run == run and tag.seq < seq:
            self.node.health.drop("superseded", tag.stamp_ns)
            return True
        self.newest = (tag.run, tag.seq)
        return False

    def _await_prefix_reader(self) -> None:
        """The answers writer counts the prefix's reader before an answer goes out (a reliable, volatile message
        reaches only the readers its writer already counts; at start-up the prefix's first crossing can arrive
        first). The prefix that sent it is there: its reader matches within discovery, else ANSWER_LINK_WAIT_S."""
        end = time.monotonic() + ANSWER_LINK_WAIT_S
        while self.answer_pub.get_subscription_count() == 0 and time.monotonic() < end:
            time.sleep(0.01)

    def _publish(self, frame: SuffixFrame, queue_ms: float) -> None:
        """The frame's trajectory to the node's output path (which places, re-times, checks and counts it)."""
        result, tag = frame.result, frame.tag
        points = trajectory_points(result.xyz.double().numpy(), result.heading.double().numpy(),
                                   self.model.action_space.dt)
        trajectory = Trajectory(points, tag.seq, tag.stamp_ns, frame.settings.partition)
        self.node.publish_trajectory(trajectory, tag.arrival_ns, self._values(frame, queue_ms))
        self.reasoning.publish(result.tokens, tag.stamp_ns)
        suffix_ms = sum(frame.times["suffix"].values())
        self.frames += 1
        self.node.health.record(suffix_ms)
        self.node.diagnostics.publish_time(suffix_ms)

    def _values(self, frame: SuffixFrame, queue_ms: float) -> dict:
        result, s = frame.result, frame.settings
        latency = (time.time_ns() - frame.tag.arrival_ns) / 1e6 if frame.tag.arrival_ns else 0.0
        times = {f"{side}_{phase}_ms": f"{ms:.3f}" for side, phases in frame.times.items()
                 for phase, ms in phases.items()}
        return {"tokens": ",".join(map(str, result.tokens)), "token_count": len(result.tokens),
                "decode_end": frame.end, "seed": s.seed, "expert_steps": s.flow.steps,
                "guidance_weight": f"{s.flow.guidance_weight:g}" if s.guidance else "none",
                "suffix_ms": f"{sum(frame.times['suffix'].values()):.3f}", "queue_ms": f"{queue_ms:.3f}",
                "latency_ms": f"{latency:.3f}", "transport": "alpamayo", **times}

    def checks(self) -> list:
        s = self.server
        return [("alpamayo", 0, f"{self.model.config.release}: {self.frames} frames finished",
                 {"frames": str(self.frames), "frames_replaced": str(s.replaced),
                  "frames_aborted": str(s.aborted)})]
