"""ROS message <-> engine data only: stamps, images in, odometry, the boundary message's frame around the
handover envelope (engine/handover/endpoints.py), trajectories out."""

from __future__ import annotations

import io
import math

import numpy as np

from ..engine.handover.endpoints import BOUNDARY_LABEL
from ..errors import InputError, expect
from ..types import EgoState, Pose2D, Trajectory, accelerations

CHANNELS = {"rgb8": 3, "bgr8": 3, "rgba8": 4, "bgra8": 4, "mono8": 1}
# 4:2:2 YUV, two bytes per pixel, BT.601 video range (sensor_msgs image_encodings; uyvy/yuyv: newer names).
YUV422 = {"yuv422": "uyvy", "uyvy": "uyvy", "yuv422_yuy2": "yuyv", "yuyv": "yuyv"}
BYTES_PER_PIXEL = {**CHANNELS, **{name: 2 for name in YUV422}}
COMPRESSED_FORMATS = ("jpeg", "jpg", "png")


# ---- time ------------------------------------------------------------------------------------------------

def stamp_to_ns(stamp) -> int:
    return int(stamp.sec) * 1_000_000_000 + int(stamp.nanosec)


def ns_to_stamp(ns: int, stamp) -> None:
    stamp.sec, stamp.nanosec = int(ns // 1_000_000_000), int(ns % 1_000_000_000)


# ---- images ----------------------------------------------------------------------------------------------

def check_image_msg(msg, where: str) -> None:
    """The header of a sensor_msgs/Image against its data (no pixel touched: cheap enough for a callback)."""
    enc = msg.encoding.lower()
    expect(enc in BYTES_PER_PIXEL, InputError,
           f"{where}: image encoding '{msg.encoding}' is not supported; expected one of {sorted(BYTES_PER_PIXEL)}")
    bpp = BYTES_PER_PIXEL[enc]
    h, w, step = int(msg.height), int(msg.width), int(msg.step)
    expect(h > 0 and w > 0, InputError, f"{where}: empty image {w}x{h}")
    expect(enc not in YUV422 or w % 2 == 0, InputError, f"{where}: {enc} needs an even width, got {w}")
    expect(step >= w * bpp, InputError, f"{where}: step {step} is smaller than width {w} x {bpp} bytes")
    expect(len(msg.data) == step * h, InputError,
           f"{where}: {len(msg.data)} data bytes, expected step {step} x height {h} = {step * h} (truncated image?)")


def _yuv422_to_rgb(packed: np.ndarray, order: str) -> np.ndarray:
    """(H, W/2, 4) uint8 macropixels (uyvy: U Y0 V Y1; yuyv: Y0 U Y1 V) -> (H, W, 3) uint8 RGB, BT.601 video
    range (what cv_bridge / OpenCV's YUV2RGB_UYVY give). torch ops: about 3x faster than numpy's here."""
    import torch
    p = torch.from_numpy(np.require(packed, requirements="W"))  # a message's bytes are read-only: copied
    iu, iy0, iv, iy1 = (0, 1, 2, 3) if order == "uyvy" else (1, 0, 3, 2)
    u = p[..., iu].float().sub_(128.0).repeat_interleave(2, dim=1)                  # (H, W)
    v = p[..., iv].float().sub_(128.0).repeat_interleave(2, dim=1)                  # (H, W)
    luma = p[..., [iy0, iy1]].reshape(p.shape[0], -1).float().sub_(16.0).mul_(1.164)  # (H, W)
    rgb = torch.stack([luma + 1.596 * v, luma - 0.813 * v - 0.391 * u, luma + 2.018 * u], dim=-1)
    return rgb.round_().clamp_(0.0, 255.0).to(torch.uint8).numpy()


def image_to_array(msg, where: str, max_pixels: int = 40_000_000) -> np.ndarray:
    """sensor_msgs/Image (any size up to max_pixels; rgb8, bgr8, rgba8, bgra8, mono8, yuv422 variants) ->
    (H, W, 3) uint8 RGB."""
    check_image_msg(msg, where)
    expect(int(msg.height) * int(msg.width) <= max_pixels, InputError,
           f"{where}: image of {msg.width}x{msg.height} = {int(msg.height) * int(msg.width) / 1e6:.1f} MP, above "
           f"max_image_megapixels {max_pixels / 1e6:g}")
    enc = msg.encoding.lower()
    bpp, h, w, step = BYTES_PER_PIXEL[enc], int(msg.height), int(msg.width), int(msg.step)
    data = np.frombuffer(msg.data if not isinstance(msg.data, list) else bytes(msg.data), np.uint8)  # a view
    rows = data.reshape(h, step)[:, : w * bpp]
    if enc in YUV422:
        return _yuv422_to_rgb(rows.reshape(h, w // 2, 4), YUV422[enc])
    pixels = rows.reshape(h, w, bpp)
    if enc == "mono8":
        return np.repeat(pixels, 3, axis=2)
    if enc.startswith("bgr"):
        pixels = pixels[..., [2, 1, 0]]
    return np.ascontiguousarray(pixels[..., :3])


def check_compressed_msg(msg, where: str) -> None:
    expect(any(k in msg.format.lower() for k in COMPRESSED_FORMATS), InputError,
           f"{where}: compressed format '{msg.format}' is not supported; expected jpeg or png")
    expect(len(msg.data) > 0, InputError, f"{where}: compressed image has no data")


def compressed_to_array(msg, where: str, max_pixels: int = 40_000_000) -> np.ndarray:
    """sensor_msgs/CompressedImage (jpeg/png, any size up to max_pixels) -> (H, W, 3) uint8 RGB. The size is
    read from the header before anything is decoded: a few-KB PNG may declare ~170 MP (0.5 GB decoded)."""
    from PIL import Image, UnidentifiedImageError
    check_compressed_msg(msg, where)
    try:
        with Image.open(io.BytesIO(bytes(msg.data))) as img:
            width, height = img.size
            expect(width * height <= max_pixels, InputError,
                   f"{where}: compressed image declares {width}x{height} = {width * height / 1e6:.1f} MP, above "
                   f"max_image_megapixels {max_pixels / 1e6:g}; refused before decoding")
            return np.asarray(img.convert("RGB"))
    except (UnidentifiedImageError, OSError, ValueError, Image.DecompressionBombError) as exc:
        raise InputError(f"{where}: compressed image could not be decoded ({exc})") from exc


def array_to_compressed(image: np.ndarray, msg, fmt: str = "jpeg", quality: int = 90):
    from PIL import Image
    buf = io.BytesIO()
    Image.fromarray(image).save(buf, format="JPEG" if fmt == "jpeg" else "PNG", quality=quality)
    msg.format = f"rgb8; {fmt} compressed rgb8" if fmt == "jpeg" else "rgb8; png compressed rgb8"
    msg.data = buf.getvalue()
    return msg


def array_to_image(image: np.ndarray, msg):
    msg.height, msg.width = int(image.shape[0]), int(image.shape[1])
    msg.encoding, msg.is_bigendian, msg.step = "rgb8", 0, int(image.shape[1] * 3)
    msg.data = image.tobytes()
    return msg


def odometry_to_pose(msg) -> Pose2D:
    """nav_msgs/Odometry -> the ego pose in its header frame (yaw from the orientation quaternion)."""
    p, q = msg.pose.pose.position, msg.pose.pose.orientation
    yaw = math.atan2(2.0 * (q.w * q.z + q.x * q.y), 1.0 - 2.0 * (q.y * q.y + q.z * q.z))
    return Pose2D(float(p.x), float(p.y), yaw)


def odometry_to_ego(msg) -> EgoState:
    return EgoState(speed_mps=float(msg.twist.twist.linear.x), yaw_rate_rps=float(msg.twist.twist.angular.z))


# ---- boundary message --------------------------------------------------------------------------------

def boundary_from_msg(msg) -> memoryview:
    """std_msgs/UInt8MultiArray -> a view of its bytes, which the handover decodes (no copy: the message's
    array stays alive as long as the view)."""
    return memoryview(msg.data) if not isinstance(msg.data, list) else memoryview(bytes(msg.data))


def boundary_to_msg(envelope: bytes, msg):
    """Envelope bytes -> std_msgs/UInt8MultiArray (one labelled dimension)."""
    from std_msgs.msg import MultiArrayDimension
    msg.layout.dim = [MultiArrayDimension(label=BOUNDARY_LABEL, size=len(envelope), stride=len(envelope))]
    msg.data = envelope
    return msg


# ---- trajectories ----------------------------------------------------------------------------------------

def resolve_trajectory_type(requested: str):
    """-> (message class, kind, reason). kind: autoware | autoware_auto | path."""
    tried = []
    order = {"auto": ("autoware", "autoware_auto", "path"), "autoware": ("autoware",),
             "autoware_auto": ("autoware_auto",), "path": ("path",)}[requested]
    for kind in order:
        try:
            if kind == "autoware":
                from autoware_planning_msgs.msg import Trajectory as cls
            elif kind == "autoware_auto":
                from autoware_auto_planning_msgs.msg import Trajectory as cls
            else:
                from nav_msgs.msg import Path as cls
        except ImportError as exc:
            tried.append(f"{kind}: {exc.name} not importable")
            continue
        reason = f"output_type={requested}" + (f"; {'; '.join(tried)}" if tried else "")
        return cls, kind, reason
    raise InputError(f"output_type '{requested}': no trajectory message type importable ({'; '.join(tried)})")


def _yaw_quaternion(orientation, heading: float) -> None:
    orientation.x = orientation.y = 0.0
    orientation.z, orientation.w = math.sin(heading / 2.0), math.cos(heading / 2.0)


def trajectory_to_msg(traj: Trajectory, msg_cls, kind: str, frame_id: str, points=None, stamp_ns=None, z=0.0):
    """points: the (N, 5) points to publish (default: traj.points, the ego frame), e.g. traj.in_map(pose), their
    times counted from stamp_ns (default: the frame's stamp; a re-timed plan's: its publish time); z: every
    point's height."""
    points = traj.points if points is None else points
    stamp_ns = traj.stamp_ns if stamp_ns is None else stamp_ns
    msg = msg_cls()
    msg.header.frame_id = frame_id
    ns_to_stamp(stamp_ns, msg.header.stamp)
    if kind == "path":
        from geometry_msgs.msg import PoseStamped
        for x, y, heading, _speed, t in points:
            pose = PoseStamped()  # each pose stamped with the time the car is to be there
            pose.header.frame_id = frame_id
            ns_to_stamp(stamp_ns + int(round(float(t) * 1e9)), pose.header.stamp)
            pose.pose.position.x, pose.pose.position.y, pose.pose.position.z = float(x), float(y), float(z)
            _yaw_quaternion(pose.pose.orientation, float(heading))
            msg.poses.append(pose)
        return msg
    point_cls = type(msg).__module__  # the TrajectoryPoint class lives beside Trajectory
    point_type = __import__(point_cls.rsplit(".", 1)[0], fromlist=["TrajectoryPoint"]).TrajectoryPoint
    msg.points = trajectory_points(points, point_type, z)
    return msg


def msg_to_points(msg) -> np.ndarray:
    """A trajectory message (Autoware's or nav_msgs/Path) -> (N, 5) x, y, heading, speed, time from its stamp:
    trajectory_to_msg's inverse (a Path's speed from its poses' spacing and stamps)."""
    stamp = stamp_to_ns(msg.header.stamp)
    rows = []
    for p in (msg.points if hasattr(msg, "points") else msg.poses):
        pose, q = p.pose, p.pose.orientation
        heading = math.atan2(2.0 * (q.w * q.z + q.x * q.y), 1.0 - 2.0 * (q.y * q.y + q.z * q.z))
        if hasattr(p, "time_from_start"):
            t, speed = p.time_from_start.sec + p.time_from_start.nanosec * 1e-9, p.longitudinal_velocity_mps
        else:
            t, speed = (stamp_to_ns(p.header.stamp) - stamp) * 1e-9, math.nan
        rows.append([pose.position.x, pose.position.y, heading, speed, t])
    out = np.array(rows, dtype=np.float64).reshape(-1, 5)
    if len(out) and np.isnan(out[:, 3]).any():
        step = np.diff(np.vstack([[0.0, 0.0], out[:, :2]]), axis=0)
        dt = np.diff(np.concatenate([[0.0], out[:, 4]]))
        out[:, 3] = np.linalg.norm(step, axis=1) / np.maximum(dt, 1e-6)
    return out


def trajectory_points(points, point_type, z: float = 0.0) -> list:
    """(N, 5) points -> TrajectoryPoint messages (Autoware's layout: time_from_start, pose at height z, velocity
    and the acceleration of the speed profile); shared by Trajectory and CandidateTrajectory."""
    out = []
    for (x, y, heading, speed, t), accel in zip(points, accelerations(points)):
        point = point_type()
        ns_to_stamp(int(round(float(t) * 1e9)), point.time_from_start)
        point.pose.position.x, point.pose.position.y, point.pose.position.z = float(x), float(y), float(z)
        _yaw_quaternion(point.pose.orientation, float(heading))
        point.longitudinal_velocity_mps = float(speed)
        point.acceleration_mps2 = float(accel)
        out.append(point)
    return out


def trajectory_markers(points, frame_id: str, stamp_ns: int, marker_array_cls, marker_cls, point_cls):
    """A visualization_msgs/MarkerArray with the predicted path as a line strip (RViz)."""
    marker = marker_cls()
    marker.header.frame_id = frame_id
    ns_to_stamp(stamp_ns, marker.header.stamp)
    marker.ns, marker.id, marker.type, marker.action = "hybrid_vla/trajectory", 0, marker_cls.LINE_STRIP, marker_cls.ADD
    marker.scale.x = 0.3
    marker.color.r, marker.color.g, marker.color.b, marker.color.a = 0.1, 0.8, 0.3, 1.0
    marker.pose.orientation.w = 1.0
    for x, y, *_ in points:
        p = point_cls()
        p.x, p.y = float(x), float(y)
        marker.points.append(p)
    array = marker_array_cls()
    array.markers.append(marker)
    return array
