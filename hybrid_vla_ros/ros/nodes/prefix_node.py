"""hybrid_vla_prefix: cameras (+ kinematic state) in; vision + blocks [0, p); boundary state out. The model's kind
serves it (ros/nodes/serving: a waypoint model's handover, an action-token model's packed steps, an Alpamayo
release's conversation); this node takes and prepares the frames of the kinds that leave that to it."""

from __future__ import annotations

import time

from nav_msgs.msg import Odometry
from rclpy.qos import qos_profile_sensor_data
from sensor_msgs.msg import CompressedImage, Image
from std_msgs.msg import Int32, UInt8MultiArray
from diagnostic_msgs.msg import DiagnosticStatus

from ...engine.cpu import default_stage_cores
from ...engine.pipeline.camera_counts import CameraCounts
from ...engine.handover.endpoints import PROCESS_REGISTRY
from ...engine.placement import Placement
from ..inputs.context_input import ContextInput
from ...engine.pipeline.camera_sync import CameraSync, StampedHistory, StateFreshness, WaitForState
from ...engine.pipeline.frame_window import DecodedOnce, FrameWindow, decode_window, window_depth
from ...engine.pipeline.stamp_order import stamp_order
from ...errors import ConfigError, HybridVLAError, expect
from ...types import EgoState, Frame
from .. import messages
from ..inputs import acceleration_input, route_input
from ..chunk_flow import PrefixChunks
from .diagnostics import DiagnosticsPublisher
from .serving import side_class
from .stage_node import StageNode
from .scene_memory import SceneMemory
from .time_limits import PrefixTimeLimits
from ..params import chosen_cores

NODE_NAME = "hybrid_vla_prefix"


class PrefixNode(StageNode):
    def __init__(self, node_name: str = NODE_NAME, **kwargs):
        self.worker = self.ego_gate = None
        super().__init__(node_name, NODE_NAME, **kwargs)

    def configure_stage(self) -> None:
        p = self.params
        side = side_class(self.model, "prefix")
        # cores [-1]: the prefix's share of a default split (bringup, launch and ros2 run alike)
        self.cores = chosen_cores(p["cores"]) or default_stage_cores(0)
        if side.node_inputs:
            self._configure_inputs(side.auto_device)
        self.serving = side(self)
        self.stage, self.worker = self.serving.stage, self.serving.worker
        if side.node_inputs:
            self._subscribe_inputs()
        self.configured_subscription(Int32, "~/input/partition_point", self._on_partition_topic, 10)
        self.diagnostics = DiagnosticsPublisher(self, self.health, self.worker, self._extra_checks)
        self.configured_timer(p["diagnostics_period_s"], self.diagnostics.publish)
        if side.node_inputs:
            self.get_logger().info(
                f"prefix: model '{self.model.spec.name}' ({self.model.num_blocks} blocks), partition "
                f"{self.stage.partition}, zone {list(self.zone)}, {self.placement.describe()}, cameras "
                f"{self.camera_topics}, input policy {p['input_policy']}, {self.serving.describe()}, "
                f"worker cores {self.cores or 'unpinned'}")

    def _configure_inputs(self, auto_device: str | None) -> None:
        """What the node builds for a kind whose frames it prepares: placement, the frame's inputs (kinematic state,
        route, acceleration, context), the boundary publisher and the frame infos."""
        p = self.params
        device = auto_device if auto_device and p["device"] == "auto" else p["device"]
        self.placement = Placement.create(device, p["dtype"], p["dtype"])
        self.seq, self.last_stamp_ns, self.time_jumps = 0, -1, 0
        self.ego_history = StampedHistory(between=EgoState.between)  # EgoState by stamp, matched to frames
        self.ego_freshness = StateFreshness(self.ego_history, "kinematic state")  # too old or missing: refused
        self.chunk_flow = PrefixChunks(self)   # the chunks parameter: a frame's states (ros/chunk_flow.py)
        self.route = route_input.RouteInput(self, p, self.model.spec.instruction_template, not p["use_kinematic_state"])
        self.accel = acceleration_input.AccelerationInput(self, int(p["sync_skew_ms"] * 1e6))  # EgoState.accel_mps2
        self.context_input = ContextInput(self, p, self.model.spec, self.route.poses, self.accel,  # frame.context
                                          lambda: self.route.route_topic and not self.route.routes_received)
        self.pub = self.configured_publisher(UInt8MultiArray, "~/output/boundary_state", self.chunk_flow.qos())
        self.info_pub = self.configured_publisher(DiagnosticStatus, "~/debug/frame_info", 10)

    def _subscribe_inputs(self) -> None:
        """The cameras and the kinematic state, once the kind's side takes frames (`serving.submit`)."""
        p = self.params
        self._subscribe_cameras()
        self.limits = PrefixTimeLimits(self)
        if p["use_kinematic_state"]:  # a frame waits for its kinematic state here, not in the compute thread
            self.ego_gate = WaitForState(self.ego_history, int(p["sync_skew_ms"] * 1e6),
                                         self.limits.kinematic_wait_s, lambda frame: self.serving.submit(frame))
            self.configured_subscription(Odometry, "~/input/kinematic_state", self._on_odometry, 10)
            self.configured_timer(0.01, self.ego_gate.poll)
        self.scene_memory = SceneMemory(self, getattr(self.stage, "model", self.model).scene_encoder)

    def release_stage(self) -> None:
        for frame in self.ego_gate.clear() if self.ego_gate is not None else []:  # accounted for, each
            self.health.drop("shutdown", frame.stamp_ns)
        self.worker = self.ego_gate = None

    # ---- inputs ----------------------------------------------------------------------------------------
    def _subscribe_cameras(self) -> None:
        topics = self.params["camera_topics"]
        self.camera_topics = topics
        expect(len(topics) == self.model.spec.num_cameras, ConfigError,
               f"camera_topics: {len(topics)} topics, model '{self.model.spec.name}' takes "
               f"{self.model.spec.num_cameras} cameras")
        self.camera_counts = CameraCounts(len(topics))   # images taken, received, decoded: diagnostics
        self.sync = CameraSync(len(topics), int(self.params["sync_skew_ms"] * 1e6),
                               on_discard=lambda stamp: self.health.drop("camera_set_incomplete", stamp))
        spec = self.model.spec   # a model reading its history: each complete set joins the window, taken or not
        self.window = FrameWindow(spec)
        self.decodes = DecodedOnce(2 * window_depth(spec) * spec.num_cameras)   # each image decoded once
        self.window_stand_ins = 0   # a window's older image that did not decode: the next newer stood in
        compressed = self.params["image_transport"] == "compressed"
        msg_type = CompressedImage if compressed else Image
        for index, topic in enumerate(topics):
            self.configured_subscription(msg_type, topic, lambda msg, i=index: self._on_image(i, msg, compressed),
                                         qos_profile_sensor_data)

    def _on_image(self, camera: int, msg, compressed: bool) -> None:
        """Headers are checked here; pixels are decoded only for a complete camera set the worker takes
        (a set the synchroniser or the input policy drops is never decoded). Inactive: a complete set is one
        drop ('inactive', with its stamp), however many cameras it has."""
        image_ns = messages.stamp_to_ns(msg.header.stamp)
        self.camera_counts.took(camera, image_ns, self.active)
        if self.active:
            where = f"camera {camera} ({self.camera_topics[camera]})"
            try:
                (messages.check_compressed_msg if compressed else messages.check_image_msg)(msg, where)
            except HybridVLAError as exc:
                self._reject("invalid_image", exc)
                return
        ready = self.sync.add(camera, image_ns, msg)
        window = None if ready is None else self.window.push(Frame(images=ready[0], stamp_ns=ready[1]))
        if ready is not None and self.accepting(stamp_ns=ready[1]):
            frame = Frame(images=window.images, image_keys=window.image_keys, seq=self.seq, stamp_ns=ready[1],
                          ego=None, instruction=self.params["instruction"], arrival_ns=time.time_ns(),
                          expected_delay_s=self.params["expected_delay_ms"] / 1e3)
            self.seq += 1
            (self.ego_gate.add if self.ego_gate is not None else self.serving.submit)(frame)

    def _decode(self, frame: Frame) -> bool:
        """The frame's camera messages -> (H, W, 3) uint8 RGB arrays, on the worker's thread."""
        compressed = self.params["image_transport"] == "compressed"
        limit = int(self.params["max_image_megapixels"] * 1e6)
        decode = messages.compressed_to_array if compressed else messages.image_to_array
        per_camera, before = self.model.spec.frames_per_camera, self.decodes.decoded   # window images, camera-major

        def decode_one(i: int, msg):
            where = f"camera {i // per_camera} ({self.camera_topics[i // per_camera]})"
            return self.decodes.get(msg, lambda m: decode(m, where, limit))
        try:
            frame.images, stand_ins, frame.image_keys = decode_window(frame.images, per_camera, decode_one,
                                                                      frame.image_keys)
            self.window_stand_ins += stand_ins
        except HybridVLAError as exc:
            self._reject("invalid_image", exc, frame.stamp_ns)
            return False
        finally:
            self.camera_counts.decoded += self.decodes.decoded - before
        return True

    def _on_odometry(self, msg: Odometry) -> None:
        self.ego_history.add(messages.stamp_to_ns(msg.header.stamp), messages.odometry_to_ego(msg))
        self.route.add_odometry(msg)   # the map-frame pose: the frame's navigation (ros/inputs/route_input.py)
        self.ego_gate.poll()

    def ego_at(self, stamp_ns: int) -> EgoState | None:
        """The kinematic state for a frame: the nearest (or interpolated) one within the camera skew (the frame
        waited for it in ego_gate, up to limits.kinematic_wait_s()); else the nearest one within the freshness
        bound (ego_freshness: a few odometry periods), counted as 'kinematic_state_late'. Further, or none:
        None (refused, counted), or with stale_kinematic_state serve_flagged that state (0 m/s when none).
        use_kinematic_state false: 0 m/s."""
        if not self.params["use_kinematic_state"]:
            return EgoState()
        ego, matched = self.ego_history.match(stamp_ns, int(self.params["sync_skew_ms"] * 1e6))
        judged = self.ego_freshness.judge(stamp_ns, self.params["stale_kinematic_state"] == "serve_flagged")
        if judged.verdict == "fresh" and not matched:
            self.health.reject("kinematic_state_late")
        elif not judged.use:
            self._reject(f"kinematic_state_{judged.verdict}", ConfigError(judged.why), stamp_ns)
            return None
        elif judged.verdict != "fresh":
            self.get_logger().warning(f"served flagged: {judged.why}", throttle_duration_sec=1.0)
        return ego or EgoState()

    def _on_partition_topic(self, msg: Int32) -> None:
        try:
            self._check_param("partition_point", int(msg.data))
        except HybridVLAError as exc:
            self._reject("partition", exc)
            return
        self.stage.set_partition(int(msg.data))

    # ---- compute ---------------------------------------------------------------------------------------
    def _admissible(self, frame: Frame) -> bool:
        order = stamp_order(self.last_stamp_ns, frame.stamp_ns)
        if order == "older":
            self._reject("out_of_order", ConfigError(
                f"frame stamp {frame.stamp_ns} is not newer than the last processed {self.last_stamp_ns}"), frame.stamp_ns)
            return False
        if order == "jump":  # a bag loop, /clock reset: start over (the scene memory resets on the stamp too)
            self.get_logger().warning(f"time went back from {self.last_stamp_ns} to {frame.stamp_ns} ns: starting over")
            self.time_jumps += 1
            self.ego_freshness.time_went_back()   # old odometry forgotten (kept if it went back already)
        stale_ms = self.params["stale_after_ms"]
        age_ms = (self.get_clock().now().nanoseconds - frame.stamp_ns) / 1e6
        if stale_ms > 0 and age_ms > stale_ms:
            self._reject("stale", ConfigError(f"frame {frame.seq} is {age_ms:.1f} ms old (stale_after_ms {stale_ms})"),
                         frame.stamp_ns)
            return False
        return True

    def _inputs(self, frame: Frame) -> bool:
        """The frame's kinematic state, pixels, navigation and instruction, at processing time: False = rejected."""
        frame.ego = self.ego_at(frame.stamp_ns)
        if frame.ego is None or not self._decode(frame):
            return False
        self.context_input.await_first_arrivals()   # at start-up: a camera_info / route just after the images
        self.route.apply(frame)
        self.accel.apply(frame)
        return self.context_input.apply(frame)   # frame.context; a needed piece missing: refused, counted

    def _window_values(self) -> dict:
        spec = self.model.spec
        if spec.frames_per_camera == 1:
            return {}
        return {"window_frames_per_camera": str(spec.frames_per_camera), "window_frame_stride": str(spec.frame_stride),
                "window_restarts": str(self.window.restarts), "images_decodes_reused": str(self.decodes.reused),
                "window_stand_ins": str(self.window_stand_ins)}

    def _extra_checks(self):
        if not self.serving.node_inputs:   # the kind's own (an Alpamayo release's: its cut, inputs, route)
            return self.serving.checks()
        partition = [("partition", 0, f"p={self.stage.partition}",
                      {"partition": str(self.stage.partition), "zone_min": str(self.zone[0]),
                       "zone_max": str(self.zone[1]), "num_blocks": str(self.model.num_blocks),
                       "camera_sync_discarded": str(self.sync.discarded), **self.camera_counts.values(),
                       "time_jumps": str(self.time_jumps), "inproc_handles_evicted": str(PROCESS_REGISTRY.evicted),
                       **self._window_values()})]
        freshness = self.params["stale_kinematic_state"] if self.params["use_kinematic_state"] else None
        return partition + self.scene_memory.checks() + [
            self.limits.check(), self.chunk_flow.check(), self.route.check(), self.accel.check(),
            self.ego_freshness.check(freshness), self.context_input.check()] + self.serving.checks()
