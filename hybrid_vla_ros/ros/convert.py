"""ROS message <-> engine data. Images in, boundary envelopes across, trajectories out.

The boundary topic is a standard `std_msgs/msg/UInt8MultiArray` (docs/INTERFACES.md):
    layout.dim[0].label = "hybrid_vla_ros/boundary/v1", data = envelope header + body
    header "<4sBBHIQq": magic b"HVLE", version, kind, reserved, sender pid, host id, stamp_ns
    kind 1 in-process: body "<Q" handle into the sender's in-process registry (zero copy)
    kind 2 shared memory: body "<H" name length, segment name, 40-byte slot descriptor
    kind 3 inline: body = the codec's serialised boundary state
"""

from __future__ import annotations

import io
import math
import os
import socket
import struct
import zlib

import numpy as np

from ..engine import codec
from ..engine.transport import InProcessTransport, SharedMemoryRing, SlotDescriptor
from ..engine.types import BoundaryState, EgoState, Trajectory
from ..errors import InputError, expect

ENVELOPE = struct.Struct("<4sBBHIQq")
ENVELOPE_MAGIC = b"HVLE"
ENVELOPE_VERSION = 1
KIND_INPROC, KIND_SHM, KIND_INLINE = 1, 2, 3
KIND_NAMES = {KIND_INPROC: "inproc", KIND_SHM: "shm", KIND_INLINE: "inline"}
BOUNDARY_LABEL = "hybrid_vla_ros/boundary/v1"
CHANNELS = {"rgb8": 3, "bgr8": 3, "rgba8": 4, "bgra8": 4, "mono8": 1}


def host_id() -> int:
    """Stable id of this host (boot id when readable): shared memory is only valid on the same host."""
    try:
        with open("/proc/sys/kernel/random/boot_id", "rb") as f:
            seed = f.read().strip()
    except OSError:
        seed = socket.gethostname().encode()
    return zlib.crc32(seed) | (zlib.crc32(seed[::-1]) << 32)


HOST_ID = host_id()
PROCESS_REGISTRY = InProcessTransport(max_pending=64)  # states handed over by handle inside this process


# ---- time ------------------------------------------------------------------------------------------------

def stamp_to_ns(stamp) -> int:
    return int(stamp.sec) * 1_000_000_000 + int(stamp.nanosec)


def ns_to_stamp(ns: int, stamp) -> None:
    stamp.sec, stamp.nanosec = int(ns // 1_000_000_000), int(ns % 1_000_000_000)


# ---- images ----------------------------------------------------------------------------------------------

def image_to_array(msg, where: str) -> np.ndarray:
    """sensor_msgs/Image -> (H, W, 3) uint8 RGB."""
    enc = msg.encoding.lower()
    expect(enc in CHANNELS, InputError,
           f"{where}: image encoding '{msg.encoding}' is not supported; expected one of {sorted(CHANNELS)}")
    ch = CHANNELS[enc]
    h, w, step = int(msg.height), int(msg.width), int(msg.step)
    expect(h > 0 and w > 0, InputError, f"{where}: empty image {w}x{h}")
    expect(step >= w * ch, InputError, f"{where}: step {step} is smaller than width {w} x {ch} channels")
    data = np.frombuffer(bytes(msg.data) if not isinstance(msg.data, (bytes, bytearray)) else msg.data, np.uint8)
    expect(data.size == step * h, InputError,
           f"{where}: {data.size} data bytes, expected step {step} x height {h} = {step * h} (truncated image?)")
    pixels = data.reshape(h, step)[:, : w * ch].reshape(h, w, ch)
    if enc == "mono8":
        return np.repeat(pixels, 3, axis=2)
    if enc.startswith("bgr"):
        pixels = pixels[..., [2, 1, 0]]
    return np.ascontiguousarray(pixels[..., :3])


def compressed_to_array(msg, where: str) -> np.ndarray:
    """sensor_msgs/CompressedImage (jpeg/png) -> (H, W, 3) uint8 RGB."""
    from PIL import Image, UnidentifiedImageError
    fmt = msg.format.lower()
    expect(any(k in fmt for k in ("jpeg", "jpg", "png")), InputError,
           f"{where}: compressed format '{msg.format}' is not supported; expected jpeg or png")
    try:
        with Image.open(io.BytesIO(bytes(msg.data))) as img:
            return np.asarray(img.convert("RGB"))
    except (UnidentifiedImageError, OSError, ValueError) as exc:
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


def odometry_to_ego(msg) -> EgoState:
    return EgoState(speed_mps=float(msg.twist.twist.linear.x), yaw_rate_rps=float(msg.twist.twist.angular.z))


# ---- boundary envelope -----------------------------------------------------------------------------------

def pack_envelope(kind: int, stamp_ns: int, body: bytes) -> bytes:
    return ENVELOPE.pack(ENVELOPE_MAGIC, ENVELOPE_VERSION, kind, 0, os.getpid(), HOST_ID, stamp_ns) + body


def encode_boundary(state: BoundaryState, kind: str, shm_send=None) -> bytes:
    """kind: inproc | shm | inline. shm_send(state) -> (segment, packed descriptor) for kind shm."""
    if kind == "inproc":
        return pack_envelope(KIND_INPROC, state.stamp_ns, struct.pack("<Q", PROCESS_REGISTRY.send(state)))
    if kind == "shm":
        segment, packed = shm_send(state)
        name = segment.encode()
        return pack_envelope(KIND_SHM, state.stamp_ns, struct.pack("<H", len(name)) + name + packed)
    return pack_envelope(KIND_INLINE, state.stamp_ns, codec.encode(state))


class BoundaryDecoder:
    """Suffix side: turns an envelope back into a BoundaryState, attaching to shared-memory rings as needed."""

    def __init__(self):
        self._rings: dict[str, SharedMemoryRing] = {}

    def decode(self, data: bytes) -> tuple[BoundaryState, str]:
        view = memoryview(data)
        expect(view.nbytes >= ENVELOPE.size, InputError,
               f"boundary message: {view.nbytes} bytes, shorter than the {ENVELOPE.size}-byte envelope")
        magic, version, kind, _, pid, host, _stamp = ENVELOPE.unpack_from(view, 0)
        expect(magic == ENVELOPE_MAGIC, InputError, f"boundary message: magic {magic!r}, expected {ENVELOPE_MAGIC!r}")
        expect(version == ENVELOPE_VERSION, InputError,
               f"boundary message: envelope version {version}, this node reads {ENVELOPE_VERSION}")
        expect(kind in KIND_NAMES, InputError, f"boundary message: unknown kind {kind}")
        body = view[ENVELOPE.size:]
        if kind == KIND_INPROC:
            expect(pid == os.getpid() and host == HOST_ID, InputError,
                   f"boundary message: in-process handle from process {pid}, this is process {os.getpid()} "
                   f"(set the prefix's boundary_transport to shm or inline)")
            expect(body.nbytes == 8, InputError, f"boundary message: in-process body of {body.nbytes} bytes, expected 8")
            return PROCESS_REGISTRY.receive(struct.unpack("<Q", body)[0]), "inproc"
        if kind == KIND_SHM:
            expect(host == HOST_ID, InputError, "boundary message: shared-memory descriptor from another host")
            (length,) = struct.unpack_from("<H", body, 0)
            segment = bytes(body[2:2 + length]).decode("ascii", errors="replace")
            desc = SlotDescriptor.unpack(segment, bytes(body[2 + length:]))
            ring = self._rings.get(segment)
            if ring is None:
                ring = self._rings[segment] = SharedMemoryRing.attach(segment)
            return ring.read(desc), "shm"
        return codec.decode(body, source="inline boundary payload"), "inline"

    def close(self) -> None:
        for ring in self._rings.values():
            ring.close()
        self._rings.clear()


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


def trajectory_to_msg(traj: Trajectory, msg_cls, kind: str, frame_id: str):
    msg = msg_cls()
    msg.header.frame_id = frame_id
    ns_to_stamp(traj.stamp_ns, msg.header.stamp)
    if kind == "path":
        from geometry_msgs.msg import PoseStamped
        for x, y, heading, _speed, _t in traj.points:
            pose = PoseStamped()
            pose.header = msg.header
            pose.pose.position.x, pose.pose.position.y = float(x), float(y)
            _yaw_quaternion(pose.pose.orientation, float(heading))
            msg.poses.append(pose)
        return msg
    point_cls = type(msg).__module__  # the TrajectoryPoint class lives beside Trajectory
    point_type = __import__(point_cls.rsplit(".", 1)[0], fromlist=["TrajectoryPoint"]).TrajectoryPoint
    for x, y, heading, speed, t in traj.points:
        point = point_type()
        ns_to_stamp(int(round(float(t) * 1e9)), point.time_from_start)
        point.pose.position.x, point.pose.position.y = float(x), float(y)
        _yaw_quaternion(point.pose.orientation, float(heading))
        point.longitudinal_velocity_mps = float(speed)
        msg.points.append(point)
    return msg
