"""The frame's context, as data (issue 38, item 1): per-camera geometry, the ego pose, ego status, pose history
and the route's navigation, in one typed structure for scene encoders, heads and prompt builders. ROS-free:
ros/inputs/context_input.py fills it from CameraInfo, /tf_static and odometry; the boundary codec carries it.

Conventions. base_link: x forward, y left, z up (REP 103). A camera's optical frame: z forward, x right, y down
(REP 103's `_optical` frames, as CameraInfo's K assumes). cam_from_base maps a point in base_link to the camera
frame; `lidar2img` = K (4x4, K in the top-left) @ cam_from_base, the matrix PETR-style position encodings
(ORION, MindDrive) take per camera: [u*d, v*d, d, 1] = lidar2img @ [x, y, z, 1] for a base_link point at depth d
(their "lidar" frame is the ego's here: base_link). The ego pose is map_from_base (4x4; z, roll and pitch 0:
odometry's planar pose).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

import numpy as np

from .errors import InputError, expect
from .types import NAV_COMMANDS, Navigation

CONTEXT_PIECES = ("cameras", "pose", "history", "navigation")   # what a model may declare it needs (spec.context)
BASE_FRAME = "base_link"
EGO_STATUS = ("speed_mps", "accel_mps2", "yaw_rate_rps", "steering_rad")   # ego_status's columns, in order
# FrameContext.as_tensors()'s names, each of a fixed shape (its docstring): what a head may declare as a side input
CONTEXT_TENSORS = ("intrinsics", "cam_from_base", "lidar2img", "image_size", "cameras_known", "ego_pose", "pose_known",
                   "ego_status", "ego_status_known", "history", "history_known", "history_dt_s", "command",
                   "target_point", "goal_point", "command_distance_m", "navigation_known")


# ---- rigid transforms (4x4, float64) ---------------------------------------------------------------------
def rotation_of(q) -> np.ndarray:
    """Quaternion (x, y, z, w), normalised here -> (3, 3) rotation."""
    x, y, z, w = np.asarray(q, dtype=np.float64) / (np.linalg.norm(q) or 1.0)
    return np.array([[1 - 2 * (y * y + z * z), 2 * (x * y - z * w), 2 * (x * z + y * w)],
                     [2 * (x * y + z * w), 1 - 2 * (x * x + z * z), 2 * (y * z - x * w)],
                     [2 * (x * z - y * w), 2 * (y * z + x * w), 1 - 2 * (x * x + y * y)]])


def quaternion_of(r: np.ndarray) -> tuple[float, float, float, float]:
    """(3, 3) rotation -> quaternion (x, y, z, w), w >= 0."""
    w = math.sqrt(max(0.0, 1.0 + r[0, 0] + r[1, 1] + r[2, 2])) / 2
    x = math.copysign(math.sqrt(max(0.0, 1.0 + r[0, 0] - r[1, 1] - r[2, 2])) / 2, r[2, 1] - r[1, 2])
    y = math.copysign(math.sqrt(max(0.0, 1.0 - r[0, 0] + r[1, 1] - r[2, 2])) / 2, r[0, 2] - r[2, 0])
    z = math.copysign(math.sqrt(max(0.0, 1.0 - r[0, 0] - r[1, 1] + r[2, 2])) / 2, r[1, 0] - r[0, 1])
    return x, y, z, w


def transform(translation=(0.0, 0.0, 0.0), quaternion=(0.0, 0.0, 0.0, 1.0)) -> np.ndarray:
    """parent_from_child (4, 4) from a TF's translation and rotation (the child's origin and axes in the parent)."""
    t = np.eye(4)
    t[:3, :3], t[:3, 3] = rotation_of(quaternion), translation
    return t


def invert(t: np.ndarray) -> np.ndarray:
    out = np.eye(4)
    out[:3, :3] = t[:3, :3].T
    out[:3, 3] = -t[:3, :3].T @ t[:3, 3]
    return out


def pose_matrix(x: float, y: float, yaw: float) -> np.ndarray:
    """A planar pose (map frame) -> map_from_base (4, 4)."""
    c, s = math.cos(yaw), math.sin(yaw)
    return np.array([[c, -s, 0.0, x], [s, c, 0.0, y], [0.0, 0.0, 1.0, 0.0], [0.0, 0.0, 0.0, 1.0]])


class TransformTree:
    """Static transforms (tf2's /tf_static edges: parent -> child) composed without a tf2 buffer. A child has
    one parent (a newer edge for it replaces the older one, as in tf2)."""

    def __init__(self):
        self.parents: dict[str, tuple[str, np.ndarray]] = {}   # child -> (parent, parent_from_child)

    def add(self, parent: str, child: str, parent_from_child: np.ndarray) -> None:
        self.parents[child.lstrip("/")] = (parent.lstrip("/"), np.asarray(parent_from_child, dtype=np.float64))

    def _to_root(self, frame: str) -> tuple[str, np.ndarray]:
        """-> (the tree's root above `frame`, root_from_frame)."""
        t, seen = np.eye(4), {frame}
        while frame in self.parents:
            frame, parent_from_child = self.parents[frame]
            expect(frame not in seen, InputError, f"/tf_static: the frames above '{frame}' form a loop")
            seen.add(frame)
            t = parent_from_child @ t
        return frame, t

    def lookup(self, target: str, source: str) -> np.ndarray | None:
        """target_from_source (4, 4), or None when the two frames are not connected."""
        root_t, root_from_target = self._to_root(target.lstrip("/"))
        root_s, root_from_source = self._to_root(source.lstrip("/"))
        return invert(root_from_target) @ root_from_source if root_t == root_s else None


def camera_info_topic(image_topic: str) -> str:
    """image_transport's convention: the image `<ns>/<image>` (or its transport `<ns>/<image>/compressed`) has
    its CameraInfo on `<ns>/camera_info`."""
    base = image_topic[:-len("/compressed")] if image_topic.endswith("/compressed") else image_topic
    ns = base.rsplit("/", 1)[0] if "/" in base else ""
    return f"{ns}/camera_info" if ns or base.startswith("/") else "camera_info"


# ---- the context -----------------------------------------------------------------------------------------
@dataclass(eq=False)
class CameraGeometry:
    """One camera. K: (3, 3) intrinsics; cam_from_base: (4, 4); width, height: the calibrated image's size."""
    frame_id: str
    K: np.ndarray
    cam_from_base: np.ndarray
    width: int
    height: int

    @property
    def lidar2img(self) -> np.ndarray:
        """(4, 4) K_4x4 @ cam_from_base (module docstring)."""
        k4 = np.eye(4)
        k4[:3, :3] = self.K
        return k4 @ self.cam_from_base

    def project(self, points_base: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """(N, 3) base_link points -> ((N, 2) pixel u, v; (N,) depth along the optical axis)."""
        p = self.lidar2img @ np.hstack([points_base, np.ones((len(points_base), 1))]).T
        return (p[:2] / p[2]).T, p[2]

    def resized(self, width: int, height: int) -> "CameraGeometry":
        """The geometry of the image scaled to width x height (a model's input size): K's rows scaled."""
        k = self.K.copy()
        k[0] *= width / self.width
        k[1] *= height / self.height
        return CameraGeometry(self.frame_id, k, self.cam_from_base.copy(), width, height)

    def to_dict(self) -> dict:
        return {"frame_id": self.frame_id, "K": self.K.tolist(), "cam_from_base": self.cam_from_base.tolist(),
                "width": self.width, "height": self.height}


def command_one_hot(command: str) -> np.ndarray:
    """(len(NAV_COMMANDS),) float32: 1 at the command's index (all 0 for an unknown command)."""
    out = np.zeros(len(NAV_COMMANDS), dtype=np.float32)
    if command in NAV_COMMANDS:
        out[NAV_COMMANDS.index(command)] = 1.0
    return out


def _unknown_status() -> np.ndarray:
    return np.zeros(len(EGO_STATUS))


@dataclass(eq=False)
class FrameContext:
    """What a frame's model may read besides pixels and prompt. Every piece may be unknown (None, or its
    `known` mask False); a model that declares a piece needed never sees it unknown (ros/inputs/context_input.py).

    cameras:      one entry per camera, in camera order (None: no CameraInfo or no /tf_static for it yet)
    ego_pose:     (4, 4) map_from_base at the frame's stamp, or None
    ego_status:   (4,) EGO_STATUS; ego_known (4,) bool: which are measured (steering: no input yet, so 0, False)
    history:      (N, 3) map-frame x, y, yaw of the N poses before the stamp, oldest first; history_known (N,)
    history_dt_s: (N,) how long before the stamp each was (s, > 0; 0 where unknown)
    navigation:   the route's next maneuver (types.Navigation), or None
    """
    stamp_ns: int = 0
    cameras: list = field(default_factory=list)
    ego_pose: np.ndarray | None = None
    ego_status: np.ndarray = field(default_factory=_unknown_status)
    ego_known: np.ndarray = field(default_factory=lambda: np.zeros(len(EGO_STATUS), dtype=bool))
    history: np.ndarray = field(default_factory=lambda: np.zeros((0, 3)))
    history_known: np.ndarray = field(default_factory=lambda: np.zeros(0, dtype=bool))
    history_dt_s: np.ndarray = field(default_factory=lambda: np.zeros(0))
    navigation: Navigation | None = None

    def missing(self, needs) -> list[str]:
        """The pieces of `needs` (CONTEXT_PIECES) this context lacks, in CONTEXT_PIECES order."""
        have = {"cameras": bool(self.cameras) and all(c is not None for c in self.cameras),
                "pose": self.ego_pose is not None,
                "history": bool(len(self.history_known)) and bool(self.history_known.all()),
                "navigation": self.navigation is not None and self.navigation.source == "route"}
        return [piece for piece in CONTEXT_PIECES if piece in needs and not have[piece]]

    def as_tensors(self, image_size: tuple[int, int] | None = None, num_cameras: int | None = None) -> dict:
        """Fixed-shape float32 tensors (C cameras, N history poses; unknown entries 0 with their mask 0):
            intrinsics (C, 3, 3), cam_from_base (C, 4, 4), lidar2img (C, 4, 4), image_size (C, 2) width, height,
            cameras_known (C,); ego_pose (4, 4) (identity when unknown), pose_known (1,); ego_status (4,)
            EGO_STATUS, ego_status_known (4,); history (N, 3) x, y, yaw in base_link at the stamp, oldest first,
            history_known (N,), history_dt_s (N,); command (7,) one-hot over NAV_COMMANDS, target_point (2,),
            goal_point (2,) (ego frame, m), command_distance_m (1,), navigation_known (1,).
        image_size (width, height): the intrinsics of the images scaled to it (the model's input size);
        num_cameras: C at least that (cameras the context lacks: unknown), so a model always gets its own C."""
        import torch
        cams = [c.resized(*image_size) if c is not None and image_size else c for c in self.cameras]
        cams += [None] * max(0, (num_cameras or 0) - len(cams))
        known = np.array([c is not None for c in cams], dtype=np.float32)
        eye = np.eye(4)
        out = {"intrinsics": [c.K if c is not None else np.zeros((3, 3)) for c in cams],
               "cam_from_base": [c.cam_from_base if c is not None else eye for c in cams],
               "lidar2img": [c.lidar2img if c is not None else eye for c in cams],
               "image_size": [(c.width, c.height) if c is not None else (0, 0) for c in cams]}
        out = {k: np.array(v, dtype=np.float64).reshape((len(cams),) + shape)
               for (k, v), shape in zip(out.items(), ((3, 3), (4, 4), (4, 4), (2,)))}
        nav = self.navigation
        out.update(cameras_known=known, ego_pose=self.ego_pose if self.ego_pose is not None else eye,
                   pose_known=[float(self.ego_pose is not None)], ego_status=self.ego_status,
                   ego_status_known=self.ego_known, history=self.history_in_ego(),
                   history_known=self.history_known, history_dt_s=self.history_dt_s,
                   command=command_one_hot(nav.command) if nav is not None else np.zeros(len(NAV_COMMANDS)),
                   target_point=nav.target_ego if nav is not None else (0.0, 0.0),
                   goal_point=nav.goal_ego if nav is not None else (0.0, 0.0),
                   command_distance_m=[nav.distance_m if nav is not None else 0.0],
                   navigation_known=[float(nav is not None and nav.source == "route")])
        return {k: torch.as_tensor(np.asarray(v, dtype=np.float32)) for k, v in out.items()}

    def history_in_ego(self) -> np.ndarray:
        """(N, 3) the history's x, y, yaw in base_link at the stamp (0 where unknown, or without the pose)."""
        out = np.zeros_like(self.history)
        if self.ego_pose is None:
            return out
        base_from_map = invert(self.ego_pose)
        yaw_now = math.atan2(self.ego_pose[1, 0], self.ego_pose[0, 0])
        for i, ((x, y, yaw), known) in enumerate(zip(self.history, self.history_known)):
            if known:
                p = base_from_map @ np.array([x, y, 0.0, 1.0])
                out[i] = (p[0], p[1], math.remainder(yaw - yaw_now, 2 * math.pi))
        return out

    # ---- the wire (engine/handover/codec.py): plain JSON-able values, every field checked on the way in ----
    def to_dict(self) -> dict:
        nav = self.navigation
        return {"stamp_ns": int(self.stamp_ns), "cameras": [c.to_dict() if c is not None else None for c in self.cameras],
                "ego_pose": self.ego_pose.tolist() if self.ego_pose is not None else None,
                "ego_status": [float(v) for v in self.ego_status], "ego_known": [bool(v) for v in self.ego_known],
                "history": self.history.tolist(), "history_known": [bool(v) for v in self.history_known],
                "history_dt_s": [float(v) for v in self.history_dt_s],
                "navigation": None if nav is None else {"command": nav.command, "distance_m": float(nav.distance_m),
                                                        "goal_ego": list(map(float, nav.goal_ego)),
                                                        "target_ego": list(map(float, nav.target_ego)),
                                                        "source": nav.source}}

    @classmethod
    def from_dict(cls, data, source: str = "frame context") -> "FrameContext":
        """The inverse of to_dict; InputError saying what when a field is missing or of the wrong shape."""
        try:
            cams = [None if c is None else CameraGeometry(str(c["frame_id"]), _array(c["K"], (3, 3)),
                                                          _array(c["cam_from_base"], (4, 4)), int(c["width"]),
                                                          int(c["height"])) for c in data["cameras"]]
            n = len(data["history"])
            nav = data["navigation"]
            return cls(int(data["stamp_ns"]), cams, None if data["ego_pose"] is None else _array(data["ego_pose"], (4, 4)),
                       _array(data["ego_status"], (len(EGO_STATUS),)), _array(data["ego_known"], (len(EGO_STATUS),), bool),
                       _array(data["history"], (n, 3)), _array(data["history_known"], (n,), bool),
                       _array(data["history_dt_s"], (n,)),
                       None if nav is None else Navigation(str(nav["command"]), float(nav["distance_m"]),
                                                           tuple(_array(nav["goal_ego"], (2,)).tolist()),
                                                           tuple(_array(nav["target_ego"], (2,)).tolist()),
                                                           str(nav["source"])))
        except (KeyError, TypeError, ValueError, IndexError, AttributeError, OverflowError) as exc:
            raise InputError(f"{source}: malformed ({type(exc).__name__}: {exc})") from exc

    def __eq__(self, other) -> bool:
        return isinstance(other, FrameContext) and self.to_dict() == other.to_dict()


def _array(value, shape: tuple, dtype=np.float64) -> np.ndarray:
    out = np.array(value, dtype=dtype)
    if out.size == 0 and shape and 0 in shape:
        out = out.reshape(shape)
    expect(out.shape == shape, InputError, f"frame context: an array of shape {out.shape}, expected {shape}")
    expect(dtype is bool or bool(np.isfinite(out).all()), InputError, "frame context: a non-finite number")
    return out


def sample_rig(num_cameras: int, width: int, height: int, fov_deg: float = 70.0) -> list[tuple[str, np.ndarray, list]]:
    """A plausible camera rig for synthetic drives: camera i 1.5 m up, looking 360 i / C degrees left of ahead.
    -> per camera (optical frame id, K (3, 3), the /tf_static chain as [(parent, child, parent_from_child)]:
    base_link -> camera{i}/camera_link (x forward) -> camera{i}/camera_optical_link (REP 103 optical axes))."""
    f = (width / 2) / math.tan(math.radians(fov_deg) / 2)
    k = np.array([[f, 0.0, width / 2], [0.0, f, height / 2], [0.0, 0.0, 1.0]])
    optical = np.eye(4)
    optical[:3, :3] = np.array([[0.0, 0.0, 1.0], [-1.0, 0.0, 0.0], [0.0, -1.0, 0.0]])   # columns: x, y, z axes
    rig = []
    for i in range(num_cameras):
        yaw = 2 * math.pi * i / num_cameras
        mount = pose_matrix(1.0 * math.cos(yaw), 0.5 * math.sin(yaw), yaw)
        mount[2, 3] = 1.5
        link, optical_frame = f"camera{i}/camera_link", f"camera{i}/camera_optical_link"
        rig.append((optical_frame, k.copy(), [(BASE_FRAME, link, mount), (link, optical_frame, optical)]))
    return rig
