"""The frame's context at the prefix (issue 38, item 1; the data: hybrid_vla_ros/context.py): each camera's
sensor_msgs/CameraInfo (`camera_info_topics`, auto: image_transport's `<ns>/camera_info` beside each camera
topic) and /tf_static (tf2_msgs/TFMessage, reliable + transient local: the latched transforms, composed here
into base_link -> each camera's optical frame), the ego pose and its history from the odometry's map-frame
poses (route_input's, matched by stamp), the ego status and the route's navigation -> frame.context.

A model declares what it needs (spec.context, CONTEXT_PIECES). A frame lacking a needed piece is refused and
counted under `context_missing_<piece>` (the first missing one, in CONTEXT_PIECES order; a piece of which
nothing has arrived yet is first waited for, once, up to FIRST_ARRIVAL_WAIT_S): cameras (no
CameraInfo for a camera, or no /tf_static chain from base_link to its frame), pose (no odometry within the
camera skew of the stamp), history (a history pose missing), navigation (no route navigates the frame). The
node keeps serving; pieces not needed are filled where known, never required. The `context` diagnostic shows
what arrived and the counts. Intrinsics: CameraInfo's K; for a rectified image topic (`image_rect` in its
name) P's left 3 x 3 where P is set (CameraInfo: P is the rectified image's camera matrix).
"""

from __future__ import annotations

import threading
import time
from collections import Counter

import numpy as np
from rclpy.qos import DurabilityPolicy, HistoryPolicy, QoSProfile, ReliabilityPolicy, qos_profile_sensor_data
from sensor_msgs.msg import CameraInfo

from ...context import (BASE_FRAME, EGO_STATUS, CONTEXT_PIECES, CameraGeometry, FrameContext, TransformTree,
                        camera_info_topic, pose_matrix, transform)
from ...errors import ConfigError, expect

FIRST_ARRIVAL_WAIT_S = 0.5   # a needed piece never seen yet: the frame lacking it waits this long for it, once
TF_STATIC_QOS = QoSProfile(depth=100, history=HistoryPolicy.KEEP_LAST, reliability=ReliabilityPolicy.RELIABLE,
                           durability=DurabilityPolicy.TRANSIENT_LOCAL)   # tf2's static listener's profile


def tf_message_type():
    """-> (tf2_msgs' TFMessage or None, why not). Every ROS install has tf2_msgs; a bare venv may lack it."""
    try:
        from tf2_msgs.msg import TFMessage
    except ImportError as exc:
        return None, f"{exc.name} not importable: no /tf_static, so no camera extrinsics"
    return TFMessage, "importable"


def info_topics(camera_topics: list[str], configured: list[str]) -> list[str]:
    """The `camera_info_topics` parameter -> one CameraInfo topic per camera ([auto]: each one's sibling)."""
    if list(configured) == ["auto"]:
        return [camera_info_topic(t) for t in camera_topics]
    expect(len(configured) == len(camera_topics), ConfigError,
           f"camera_info_topics: {len(configured)} topics for {len(camera_topics)} camera_topics (or [auto])")
    return list(configured)


def intrinsics(msg, rectified: bool) -> np.ndarray | None:
    """CameraInfo -> K (3, 3), or None when it is not a camera matrix (zeros, non-finite)."""
    p = np.array(msg.p, dtype=np.float64).reshape(3, 4)
    k = p[:, :3] if rectified and p[0, 0] > 0 else np.array(msg.k, dtype=np.float64).reshape(3, 3)
    usable = np.isfinite(k).all() and k[0, 0] > 0 and k[1, 1] > 0 and k[2, 2] != 0
    return k / k[2, 2] if usable else None


class ContextInput:
    """Made by the prefix in configure (its subscriptions live until cleanup). poses: the map-frame poses by
    stamp (route_input's StampedHistory of Pose2D); accel: the AccelerationInput (whether a frame's was measured);
    route_unseen: () -> True while no route has arrived on ~/input/route (where that subscription exists)."""

    def __init__(self, node, params, spec, poses, accel=None, route_unseen=lambda: False):
        self.node, self.poses, self.accel, self.route_unseen = node, poses, accel, route_unseen
        self.needs = [piece for piece in CONTEXT_PIECES if piece in spec.context]
        self.skew_ns = int(params["sync_skew_ms"] * 1e6)
        self.measured_ego = bool(params["use_kinematic_state"])
        self.history_len, self.step_ns = params["pose_history"], int(params["pose_history_step_s"] * 1e9)
        cameras = params["camera_topics"]
        self.topics = info_topics(cameras, params["camera_info_topics"])
        self.rectified = ["image_rect" in topic for topic in cameras]
        self.infos: list = [None] * len(cameras)     # (frame_id, K, width, height) per camera
        self.tree = TransformTree()
        self.lock = threading.Lock()
        self.counts: Counter = Counter()
        self.last_missing: list[str] = []
        self.settled: set[str] = set()   # pieces seen, or whose first arrival a frame waited for (once)
        for index, topic in enumerate(self.topics):
            node.configured_subscription(CameraInfo, topic, lambda msg, i=index: self._on_info(i, msg),
                                         qos_profile_sensor_data)
        tf_type, self.tf_why = tf_message_type()
        if tf_type is not None:
            node.configured_subscription(tf_type, "/tf_static", self._on_tf_static, TF_STATIC_QOS)
        else:
            node.get_logger().warning(f"context: {self.tf_why}")

    # ---- inputs ----------------------------------------------------------------------------------------
    def _on_info(self, camera: int, msg) -> None:
        k = intrinsics(msg, self.rectified[camera])
        with self.lock:
            if k is None or msg.width <= 0 or msg.height <= 0 or not msg.header.frame_id:
                self.counts["camera_info_invalid"] += 1
                return
            self.infos[camera] = (msg.header.frame_id.lstrip("/"), k, int(msg.width), int(msg.height))
            self.counts["camera_info_received"] += 1

    def _on_tf_static(self, msg) -> None:
        with self.lock:
            for t in msg.transforms:
                r, q = t.transform.translation, t.transform.rotation
                self.tree.add(t.header.frame_id, t.child_frame_id, transform((r.x, r.y, r.z), (q.x, q.y, q.z, q.w)))
            self.counts["tf_static_transforms"] += len(msg.transforms)

    # ---- per frame -------------------------------------------------------------------------------------
    def cameras(self) -> list:
        """One CameraGeometry per camera, None where its CameraInfo or its /tf_static chain is missing."""
        with self.lock:
            out = []
            for info in self.infos:
                cam_from_base = self.tree.lookup(info[0], BASE_FRAME) if info is not None else None
                out.append(None if cam_from_base is None else CameraGeometry(info[0], info[1], cam_from_base,
                                                                             info[2], info[3]))
            return out

    def pose(self, stamp_ns: int):
        """The map-frame Pose2D matched within the camera skew (interpolated), else None."""
        pose, matched = self.poses.match(stamp_ns, self.skew_ns)
        return pose if matched else None

    def history(self, stamp_ns: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """-> ((N, 3) x, y, yaw; (N,) known; (N,) seconds before the stamp), oldest first."""
        n = self.history_len
        poses, known, dt = np.zeros((n, 3)), np.zeros(n, dtype=bool), np.zeros(n)
        if self.step_ns > 0:
            for slot, k in enumerate(range(n, 0, -1)):
                pose, matched = self.poses.match(stamp_ns - k * self.step_ns, max(self.skew_ns, self.step_ns // 2))
                if matched:
                    poses[slot], known[slot], dt[slot] = (pose.x, pose.y, pose.yaw), True, k * self.step_ns / 1e9
            return poses, known, dt
        with self.poses.arrived:   # the last n samples before the stamp, as they came
            before = [entry for entry in self.poses.entries if entry[0] < stamp_ns][-n:] if n else []
        for slot, (stamp, pose) in enumerate(before, start=n - len(before)):
            poses[slot], known[slot], dt[slot] = (pose.x, pose.y, pose.yaw), True, (stamp_ns - stamp) / 1e9
        return poses, known, dt

    def ego_status(self, ego) -> tuple[np.ndarray, np.ndarray]:
        """(EGO_STATUS,) values and which are measured (steering: no input yet)."""
        if ego is None:
            return np.zeros(len(EGO_STATUS)), np.zeros(len(EGO_STATUS), dtype=bool)
        accel_known = self.accel is not None and not self.accel.last_missing
        return (np.array([ego.speed_mps, ego.accel_mps2, ego.yaw_rate_rps, 0.0], dtype=np.float64),
                np.array([self.measured_ego, accel_known, self.measured_ego, False]))

    def build(self, frame) -> FrameContext:
        pose = self.pose(frame.stamp_ns)
        status, known = self.ego_status(frame.ego)
        history, history_known, dt = self.history(frame.stamp_ns)
        return FrameContext(frame.stamp_ns, self.cameras(), None if pose is None else pose_matrix(pose.x, pose.y, pose.yaw),
                            status, known, history, history_known, dt, frame.navigation)

    def await_first_arrivals(self) -> None:
        """At start-up a frame's camera_info or route can arrive just after its images (another process; an
        executor taking callbacks in arrival order): a needed piece whose input has never delivered anything is
        waited for, once per piece, up to FIRST_ARRIVAL_WAIT_S, before the frame's context is built (the worker's
        thread; counted as `first_arrival_waits`)."""
        pending = [piece for piece in self.needs if piece not in self.settled and self._unseen(piece)]
        self.settled.update(self.needs)   # seen, or waited for now: never looked at again (no per-frame cost)
        if not pending:
            return
        with self.lock:
            self.counts["first_arrival_waits"] += 1
        deadline = time.monotonic() + FIRST_ARRIVAL_WAIT_S
        while any(self._unseen(piece) for piece in pending) and time.monotonic() < deadline:
            time.sleep(0.01)

    def _unseen(self, piece: str) -> bool:
        """Nothing has arrived yet of what the piece is made from."""
        if piece == "cameras":
            with self.lock:
                return any(info is None for info in self.infos) or not self.counts["tf_static_transforms"]
        if piece == "navigation":
            return self.route_unseen()
        return not self.poses.entries   # pose, history: the odometry

    def apply(self, frame) -> bool:
        """frame.context built; False (refused, counted as context_missing_<piece>) when a needed piece is missing."""
        context = frame.context = self.build(frame)
        missing = context.missing(self.needs)
        with self.lock:
            self.last_missing = missing
            self.counts.update(f"context_missing_{piece}" for piece in missing)
            self.counts["frames" if not missing else "refused"] += 1
        if missing:
            self.node._reject(f"context_missing_{missing[0]}", ConfigError(self._why(missing, context)), frame.stamp_ns)
            return False
        return True

    def _why(self, missing: list[str], context: FrameContext) -> str:
        said = []
        for piece in missing:
            if piece == "cameras":
                lacking = [self.topics[i] for i, c in enumerate(context.cameras) if c is None]
                said.append(f"no CameraInfo or no /tf_static chain from {BASE_FRAME} for {lacking}")
            elif piece == "pose":
                said.append(f"no odometry within {self.skew_ns / 1e6:g} ms of the stamp")
            elif piece == "history":
                said.append(f"{int((~context.history_known).sum())} of {self.history_len} history poses missing")
            else:
                said.append("no route navigates the frame")
        return f"frame stamped {context.stamp_ns}: the model needs {self.needs}; " + "; ".join(said)

    def check(self) -> tuple[str, int, str, dict]:
        """The `context` diagnostic: WARN while the last frame lacked a needed piece."""
        with self.lock:
            counts, missing = dict(self.counts), list(self.last_missing)
            received = sum(info is not None for info in self.infos)
        values = {"needs": ",".join(self.needs) or "none", "camera_info_topics": ",".join(self.topics),
                  "tf_static": self.tf_why,
                  "camera_info_cameras": f"{received}/{len(self.infos)}", "pose_history": str(self.history_len),
                  **{k: str(v) for k, v in sorted(counts.items())}}
        if missing:
            return "context", 1, f"the last frame lacked {missing} (refused)", values
        return "context", 0, f"needs {self.needs or 'nothing'}; {received}/{len(self.infos)} cameras known", values
