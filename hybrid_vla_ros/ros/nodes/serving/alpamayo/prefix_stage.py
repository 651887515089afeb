"""The prefix node's stage for an Alpamayo release: 4 camera topics synchronised by stamp, the odometry's poses
kept, each frame's inputs built (engine/expert_serve/frame_inputs.py: the last 4 frames per camera, 16 poses of
ego history, the prompt ids) and served by AlpamayoPrefixServer on the worker's thread: its messages out on
~/output/boundary_state, the suffix's answers in on ~/input/action_tokens (both reliable, volatile: TOKENS_QOS).

Up to max_in_flight frames open at once (the next frame's prefill while the suffix decodes the one before: the
worker takes the server's events, engine/expert_serve/prefix_server.py next_event: each open frame's answer or
its deadline passed, oldest first, then a new frame while fewer than max_in_flight are open); frames waiting to
start: input_policy latest, the newest wins (the one displaced counted); lossless, up to 64 queued (a frame coming
to a full queue turned away, queue_full). A frame is refused, and counted, when its images do not fit
(invalid_image), its stamp is not newer (out_of_order), its ego history is incomplete (kinematic_state_missing; use_kinematic_state false: standing
still), no suffix is linked within token_timeout_s (suffix_absent: both topics matched; a frame waits for one, as
at start-up), or its exchange fails here (suffix_timeout: token_timeout_s, -1 = 60 s; invalid_answer;
nonfinite_boundary). A frame the suffix refuses is counted there. ~/debug/frame_info per frame sent: the prefix's
ms per phase and their sum (prefix_ms: the scheduler joins it by stamp with the suffix's trajectory_info), the
seed, the cut, the route text and whether the frame was guided. ~/input/partition_point (the scheduler's) moves
the cut at the next frame, as the parameter does.
The route (ros/inputs/route_input.py: ~/input/route and the map, as for every model): a release with a tokenizer
and route tokens (1.5) gets, per frame, the route text of the next turn at the frame's pose ("Turn left in 11m",
route/text.py release_route_text) in its prompt; a frame without one (no route, no turn ahead) has no route span
and, with guidance on, runs unguided (frame_info guided false).
"""

from __future__ import annotations

import threading
import time

from diagnostic_msgs.msg import DiagnosticStatus, KeyValue
from nav_msgs.msg import Odometry
from rclpy.qos import qos_profile_sensor_data
from sensor_msgs.msg import CompressedImage, Image
from std_msgs.msg import UInt8MultiArray

from .....engine.expert_serve.release_prompt import release_prompt
from .....engine.expert_serve.frame_inputs import (FRAMES_PER_CAMERA, ImageHistory, ImageRows, history_poses,
                                                  inputs_from_rows, patchify, pixel_budget, still_history)
from .....engine.expert_serve.prefix_server import DEFAULT_TIMEOUT_S, AlpamayoPrefixServer, PrefixJob
from .....engine.pipeline.camera_sync import CameraSync, StampedHistory
from .....engine.pipeline.worker import StageWorker
from .....errors import ConfigError, HybridVLAError, expect
from .....route import release_route_text
from .....types import Pose2D
from .... import messages
from ....inputs.route_input import RouteInput
from ....topics import TOKENS_QOS
from ..side import Side
from ..answers import AnswerInput
from ...diagnostics import matched_peers
from .settings import stage_settings
from .weights import side_model

LOSSLESS_FRAMES = 64
POSE_WAIT_S = 0.5            # the frame's newest pose may come this much after its images
MIN_POSE_SKEW_NS = 50_000_000


def image_keys(window: list) -> tuple:
    """The window's camera messages (camera-major, FRAMES_PER_CAMERA each) -> one key per image: its camera, its
    stamp and the message (held by the window while the key can be met: a driver repeating a stamp with another
    image gets another key); a repeated oldest frame shares its key."""
    return tuple((i // FRAMES_PER_CAMERA, messages.stamp_to_ns(m.header.stamp), id(m)) for i, m in enumerate(window))


def event_stamp(event) -> int:
    """The frame stamp of a server event (AlpamayoPrefixServer.next_event): a frame to begin or an open one's."""
    kind, subject, _ = event
    return subject.stamp_ns if kind == "frame" else subject.frame.tag.stamp_ns


class _Taken:
    """A complete camera set and the frames before it (messages, decoded on the worker's thread)."""

    def __init__(self, messages: list, padded: int, seq: int, stamp_ns: int):
        self.messages, self.padded, self.seq, self.stamp_ns = messages, padded, seq, stamp_ns
        self.arrival_ns, self.route_text, self.inputs_ms, self.begun = time.time_ns(), "", 0.0, 0.0


class AlpamayoPrefixStage(Side):
    node_inputs = False   # its own cameras (four-frame windows) and poses (16 of ego history)

    def __init__(self, node):
        p = node.params
        self.node = node
        self.model = model = side_model(node, "prefix")
        s = stage_settings(p, model)
        self.text, self.guidance = release_prompt(model), s.guidance
        self.pixels = pixel_budget(model.config)   # ConfigError: a budget the images cannot be resized into
        expect(not s.guidance or self.text.can_route(model.config), ConfigError,
               "flow.guidance_weight: guidance needs a route: the release's tokenizer (the route text from the live "
               "LaneletRoute) or the route's ids in its prompt_ids.json ('route')")
        timeout = p["token_timeout_s"] if p["token_timeout_s"] > 0 else DEFAULT_TIMEOUT_S
        lossless = p["input_policy"] == "lossless"
        self.lossy_reason = "queue_full" if lossless else "displaced"
        self.server = self.stage = AlpamayoPrefixServer(model, p["partition_point"], s.sampling, s.flow,
                                                        s.guidance, s.seed, timeout, max_open=p["max_in_flight"],
                                                        capacity=LOSSLESS_FRAMES if lossless else 1,
                                                        keep_newest=not lossless)
        self.skew_ns = int(p["sync_skew_ms"] * 1e6)
        self.seq, self.last_stamp_ns, self.padded_frames = 0, -1, 0
        self.images, self.rows = ImageHistory(), ImageRows()   # each image decoded, resized, patchified once
        self.frames_by_guidance, self.last_guided = {True: 0, False: 0}, True
        self.poses = StampedHistory(between=Pose2D.between) if p["use_kinematic_state"] else None
        self.route = RouteInput(node, p, own_odometry=self.poses is None)   # ~/input/route: 1.5's route text
        if s.guidance and (not self.route.route_topic or self.route.lane_map is None):
            why = self.route.why if not self.route.route_topic else "no map_path (a map may come on ~/input/vector_map)"
            node.get_logger().warning(f"flow.guidance_weight: guidance runs only on frames with a route text; {why}: "
                                      f"until a route and a map are in, every frame runs unguided")
        self.pub = node.configured_publisher(UInt8MultiArray, "~/output/boundary_state", TOKENS_QOS)
        self.info_pub = node.configured_publisher(DiagnosticStatus, "~/debug/frame_info", 10)
        self.answers = AnswerInput(node, self.server.answer, "invalid_answer")   # ~/input/action_tokens
        self._subscribe_cameras(p["camera_topics"], p["image_transport"] == "compressed")
        if self.poses is not None:
            node.configured_subscription(Odometry, "~/input/kinematic_state", self._on_odometry, 50)
        self.most_open = 0   # the most frames open at once (the overlap, in the `alpamayo` check)
        self.accounting = threading.Lock()   # a frame ended by the worker or by close: reported once
        self.worker = StageWorker("prefix", self._handle, source=self.server.next_event, cores=node.cores,
                                  threads=p["threads"] or None, health=node.health, on_error=node._on_worker_error,
                                  stamp_of=event_stamp, pending=lambda: len(self.server.inbox)).start()
        node.get_logger().info(
            f"prefix: {model.config.release} ({model.num_blocks} blocks), partition {self.server.partition}, "
            f"dtype {node.dtype_choice.dtype} on {model.vlm.model.language_model.embed_tokens.weight.device}, "
            f"cameras {p['camera_topics']} (resized into {self.pixels or 'no budget: as they come'} pixels), "
            f"sampling {s.sampling}, flow {s.flow}, guidance {s.guidance}, up to {p['max_in_flight']} frames open")

    def _subscribe_cameras(self, topics: list[str], compressed: bool) -> None:
        cameras = self.model.config.cameras
        expect(len(topics) == cameras, ConfigError,
               f"camera_topics: {len(topics)} topics, an {self.model.config.release} release takes {cameras} cameras")
        self.topics, self.compressed = topics, compressed
        self.sync = CameraSync(cameras, self.skew_ns,
                               on_discard=lambda stamp: self.node.health.drop("camera_set_incomplete", stamp))
        msg_type = CompressedImage if compressed else Image
        for index, topic in enumerate(topics):
            self.node.configured_subscription(msg_type, topic, lambda msg, i=index: self._on_image(i, msg),
                                              qos_profile_sensor_data)

    # ---- the executor's thread ---------------------------------------------------------------------------
    def _on_image(self, camera: int, msg) -> None:
        try:
            (messages.check_compressed_msg if self.compressed else messages.check_image_msg)(
                msg, f"camera {camera} ({self.topics[camera]})")
        except HybridVLAError as exc:
            self.node._reject("invalid_image", exc)
            return
        ready = self.sync.add(camera, messages.stamp_to_ns(msg.header.stamp), msg)
        if ready is None or not self.node.accepting(stamp_ns=ready[1]):
            return
        camera_msgs, padded = self.images.add(ready[0])   # the history keeps every complete set, served or not
        dropped, why = self.server.submit(_Taken(camera_msgs, padded, self.seq, ready[1]))
        if dropped is not None:
            self.node.health.drop("shutdown" if why == "shutdown" else self.lossy_reason, dropped.stamp_ns)
        self.seq += 1

    def _on_odometry(self, msg: Odometry) -> None:
        self.poses.add(messages.stamp_to_ns(msg.header.stamp), messages.odometry_to_pose(msg))
        self.route.add_odometry(msg)

    # ---- the worker's thread -----------------------------------------------------------------------------
    def _handle(self, event) -> None:
        """One event of the server (next_event): a frame to begin, or an answer (None: its deadline passed) for
        an open one; a frame whose outcome is set is accounted for."""
        kind, subject, back = event
        if kind == "frame":
            conversation = self._begin(subject)
        else:
            conversation = subject
            self.server.step(conversation, back)
        if conversation is not None and conversation.outcome is not None:
            self._account(conversation.outcome, conversation.context)

    def _begin(self, taken: _Taken):
        """The frame's inputs, then its prompt out (None: refused, counted)."""
        start = time.perf_counter()
        job = self._job(taken)
        if job is None:
            return None
        taken.begun = time.perf_counter()
        taken.inputs_ms = (taken.begun - start) * 1e3   # decoding, resizing and patchifying its new images, the prompt
        conversation = self.server.begin(job, lambda data: self.pub.publish(UInt8MultiArray(data=data)),
                                         self._linked)
        conversation.context = taken
        self.most_open = max(self.most_open, len(self.server.open))
        return conversation

    def _account(self, outcome, taken: _Taken | None) -> None:
        """A frame over: sent (its frame_info, the stage time), or lost (counted here, or by the suffix)."""
        with self.accounting:
            if outcome.reported:
                return
            outcome.reported = True
        if outcome.reason == "shutdown":
            self.node.health.drop("shutdown", outcome.tag.stamp_ns)
        elif outcome.sent:
            self.padded_frames += int(taken.padded > 0)
            self.last_guided = outcome.settings.guidance
            self.frames_by_guidance[self.last_guided] += 1
            self._publish_info(outcome, taken, (time.perf_counter() - taken.begun) * 1e3)
            self.node.health.record(sum(outcome.times.values()))
            self.node.diagnostics.publish_time(sum(outcome.times.values()))
        elif outcome.counted_here:
            self.node._reject(outcome.reason, ConfigError(outcome.message), outcome.tag.stamp_ns)
        else:
            self.node.get_logger().warning(outcome.message, throttle_duration_sec=1.0)

    def _linked(self) -> bool:
        """A suffix is there both ways: this boundary writer counts its reader, and this answers reader counts its
        writer (that writer, in turn, waits to count this reader before its first answer: the suffix stage)."""
        return matched_peers(self.node, self.pub) > 0 and matched_peers(self.node, self.answers.subscription) > 0

    def _job(self, taken: _Taken) -> PrefixJob | None:
        """The frame's inputs (None: refused, counted)."""
        if taken.stamp_ns <= self.last_stamp_ns:
            self.node._reject("out_of_order", ConfigError(f"frame stamp {taken.stamp_ns} is not newer than the last "
                                                          f"served {self.last_stamp_ns}"), taken.stamp_ns)
            return None
        poses = self._poses(taken.stamp_ns)
        if poses is None:
            return None
        route = self._route(taken)
        try:
            inputs = inputs_from_rows(self.model, self._image_rows(taken), poses, self.text, route=route,
                                      keys=image_keys(taken.messages))
        except HybridVLAError as exc:
            self.node._reject("invalid_image", exc, taken.stamp_ns)
            return None
        self.last_stamp_ns = taken.stamp_ns
        return PrefixJob(inputs, taken.seq, taken.stamp_ns, taken.arrival_ns)

    def _image_rows(self, taken: _Taken) -> list:
        """Each of the window's images as patch rows: only the images no earlier window had are decoded, resized
        into the release's budget and patchified (ImageRows)."""
        limit = int(self.node.params["max_image_megapixels"] * 1e6)
        decode = messages.compressed_to_array if self.compressed else messages.image_to_array
        vision = self.model.config.vlm.vision_config
        return self.rows.rows(taken.messages, lambda i, m: patchify(decode(m, f"camera image {i}", limit), vision,
                                                                    self.pixels))

    def _route(self, taken: _Taken) -> bool | str:
        """The frame's route span: 1.5's route text of the route's next turn at the frame's pose, kept on `taken` for
        its frame_info ("prompt_ids": the hand-made ids' fixed route); False: none. The navigation is counted by
        reason in the `navigation` diagnostic."""
        pose = self.route.pose_at(taken.stamp_ns)
        self.route.navigation(pose)
        turn = self.route.turn_ahead(pose)
        route = self.text.route_for(self.model.config, release_route_text(*turn) if turn else None, self.guidance)
        taken.route_text = route if isinstance(route, str) else "prompt_ids" if route else ""
        return route

    def _poses(self, stamp_ns: int):
        if self.poses is None:
            return still_history()
        poses = history_poses(self.poses, stamp_ns, max(self.skew_ns, MIN_POSE_SKEW_NS), POSE_WAIT_S)
        if poses is None:
            self.node._reject("kinematic_state_missing", ConfigError(
                f"frame stamped {stamp_ns}: no odometry for one of its 16 history poses (0.1 s apart)"), stamp_ns)
        return poses

    def _publish_info(self, outcome, taken: _Taken, ms: float) -> None:
        s = outcome.settings
        values = {"stamp_ns": taken.stamp_ns, "seq": taken.seq, "partition": s.partition, "seed": s.seed,
                  "prefix_ms": f"{sum(outcome.times.values()):.3f}",   # the compute (the scheduler's sample)
                  "frame_ms": f"{ms:.3f}", "images_padded": taken.padded, "route": taken.route_text,
                  "guided": str(s.guidance).lower(), "inputs_ms": f"{taken.inputs_ms:.3f}",
                  "images_encoded": outcome.images.get("encoded", ""),
                  "images_reused": outcome.images.get("reused", ""),
                  **{f"prefix_{k}_ms": f"{v:.3f}" for k, v in outcome.times.items()}}
        self.info_pub.publish(DiagnosticStatus(name=f"{self.node.get_name()}: frame", values=[
            KeyValue(key=k, value=str(v)) for k, v in values.items()]))

    def checks(self) -> list:
        """The `alpamayo` check WARNs while guidance is on and the last frame ran unguided (no route text: no route,
        no map, no turn ahead)."""
        s, guided, unguided = self.server, self.frames_by_guidance[True], self.frames_by_guidance[False]
        level = 1 if self.guidance and not self.last_guided else 0
        message = f"{self.model.config.release} at p={s.partition}" + (
            f"; guidance on, {unguided} frames unguided (no route text)" if level else "")
        return [("alpamayo", level, message,
                 {"partition": str(s.partition), "num_blocks": str(self.model.num_blocks),
                  "stale_answers": str(s.stale_answers), "camera_sync_discarded": str(self.sync.discarded),
                  "frames_with_repeated_images": str(self.padded_frames), "dtype": self.node.dtype_choice.dtype,
                  "frames_guided": str(guided), "frames_unguided": str(unguided),
                  "frames_open": str(len(s.open)), "frames_open_most": str(self.most_open),
                  "encode_once": "on" if s.vision.exact else
                  f"{'off' if s.vision.exact is False else 'undecided'}: {s.vision.why}",
                  "images_encoded": str(s.vision.encoded_total)}),
                self.route.check()]

    def close(self) -> None:
        """Frames waiting to start and frames open: each counted `shutdown` (an open one's suffix told to let it
        go)."""
        for taken in self.server.close():
            self.node.health.drop("shutdown", taken.stamp_ns)
        self.worker.close()
        for outcome in self.server.give_up_open():
            self._account(outcome, None)
