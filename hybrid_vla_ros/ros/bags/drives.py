"""Drives as rosbag2 folders, the way a car records them: per step, the odometry and one image per camera,
each logged at its own receive time (header stamp + a delay, images later than the odometry), cameras
offered best effort. Two sources: the preset's synthetic frames (plumbing only) and the synthetic road of
sim/road.py, which also records the ground-truth future path (`GROUND_TRUTH_TOPIC`, nav_msgs/Path in
base_link at the frame's stamp)."""

from __future__ import annotations

import struct
from pathlib import Path
from typing import Iterable, NamedTuple

import numpy as np

from ...errors import ConfigError, InputError, expect
from ...model.presets import get_preset
from ...types import Trajectory
from .. import messages
from ...context import camera_info_topic, quaternion_of, sample_rig
from .storage import BagWriter, latched_qos, reliable_qos, sensor_qos, typestore_with
from ..topics import KINEMATIC_TOPIC, ROUTE_TOPIC

GROUND_TRUTH_TOPIC = "/ground_truth/trajectory"
TF_STATIC_TOPIC, TF_TYPE = "/tf_static", "tf2_msgs/msg/TFMessage"
START_NS = 1_700_000_000_000_000_000


class DriveStep(NamedTuple):
    images: list[np.ndarray]
    speed_mps: float
    yaw_rate_rps: float
    truth: np.ndarray | None        # (N, 5) x, y, heading, speed, time_from_start in base_link, or None
    pose: tuple | None = None       # (x, y, yaw) in the map frame: the odometry's pose, or None (zero)


def write_drive(path: str | Path, camera_topics: list[str], steps: Iterable[DriveStep], rate_hz: float = 10.0,
                storage: str = "mcap", compressed: bool = True, seed: int = 7,
                receive_delay_ms: tuple[float, float] = (2.0, 12.0), context: bool = True, route=None) -> Path:
    """context: with each camera's CameraInfo (on its image_transport sibling `<ns>/camera_info`, sent just
    before the image) and /tf_static (latched, once, first): context.py's sample rig. route: a route.Route,
    recorded once, first, on Autoware's route topic (reliable, transient local, as the mission planner offers it)."""
    from nav_msgs.msg import Odometry, Path as PathMsg
    from rclpy.serialization import serialize_message
    from sensor_msgs.msg import CompressedImage, Image
    writer = BagWriter(path, storage)
    for topic in camera_topics:
        writer.declare(topic, [sensor_qos()])
    rig = ContextRecording(writer, camera_topics) if context else None
    writer.declare(KINEMATIC_TOPIC, [reliable_qos()])
    if route is not None:
        writer.declare(ROUTE_TOPIC, [latched_qos()])
    writer.declare(GROUND_TRUTH_TOPIC, [reliable_qos()])  # a topic exists in the bag once it has a message
    rng, low, high = np.random.default_rng(seed), int(receive_delay_ms[0] * 1e6), int(receive_delay_ms[1] * 1e6)
    camera_type = "sensor_msgs/msg/CompressedImage" if compressed else "sensor_msgs/msg/Image"
    try:
        for seq, step in enumerate(steps):
            stamp = START_NS + int(seq * 1e9 / rate_hz)
            if rig is not None and seq == 0:
                rig.tf_static(step.images, START_NS - 1)
            if route is not None and seq == 0:
                from ..inputs.route_input import route_to_msg
                writer.write(ROUTE_TOPIC, "autoware_planning_msgs/msg/LaneletRoute", START_NS - 2,
                             serialize_message(route_to_msg(route)))
            odom = Odometry()
            messages.ns_to_stamp(stamp, odom.header.stamp)
            odom.header.frame_id, odom.child_frame_id = "map", "base_link"
            odom.twist.twist.linear.x, odom.twist.twist.angular.z = step.speed_mps, step.yaw_rate_rps
            if step.pose is not None:
                pose = odom.pose.pose
                pose.position.x, pose.position.y = float(step.pose[0]), float(step.pose[1])
                pose.orientation.z, pose.orientation.w = np.sin(step.pose[2] / 2), np.cos(step.pose[2] / 2)
            out = [(stamp + low // 2, KINEMATIC_TOPIC, "nav_msgs/msg/Odometry", serialize_message(odom))]
            if step.truth is not None:
                truth = messages.trajectory_to_msg(Trajectory(points=step.truth, seq=seq, stamp_ns=stamp, partition=-1),
                                                  PathMsg, "path", "base_link")
                out.append((stamp + low // 2, GROUND_TRUTH_TOPIC, "nav_msgs/msg/Path", serialize_message(truth)))
            for index, topic in enumerate(camera_topics):
                msg = messages.array_to_compressed(step.images[index], CompressedImage()) if compressed \
                    else messages.array_to_image(step.images[index], Image())
                messages.ns_to_stamp(stamp, msg.header.stamp)
                msg.header.frame_id = f"camera{index}/camera_optical_link"
                out.append((stamp + int(rng.integers(low, high + 1)), topic, camera_type, serialize_message(msg)))
                if rig is not None:   # its CameraInfo, received just before the image
                    out += rig.camera_info(index, step.images[index].shape, stamp, out[-1][0] - 1)
            for receive_ns, topic, msgtype, raw in sorted(out):
                writer.write(topic, msgtype, receive_ns, raw)
    finally:
        writer.close()
    return Path(path)


def write_route_drive(path: str | Path, preset, camera_topics: list[str], map_path: str | Path, turn: str = "left",
                      frames: int = 6, rate_hz: float = 10.0, start_x: float = -40.0, **kwargs) -> Path:
    """A sample drive (the preset's synthetic frames) on our intersection map (route/example_map.py, written to
    map_path): the ego on the approach lane from `start_x` at 8 m/s, its odometry poses along it, the route through
    the junction to `turn` recorded first; camera_info and /tf_static as write_drive records them."""
    from ...model.inputs import synthetic_camera_frame
    from ...route.example_map import intersection_route, write_intersection_map
    spec = get_preset(preset) if isinstance(preset, str) else preset
    route = intersection_route(write_intersection_map(map_path), turn)
    speed = 8.0
    steps = (DriveStep(f.images, speed, 0.0, None, (start_x + speed * seq / rate_hz, -1.75, 0.0))
             for seq, f in ((s, synthetic_camera_frame(spec, s)) for s in range(frames)))
    return write_drive(path, camera_topics, steps, rate_hz, route=route, **kwargs)


class ContextRecording:
    """A drive's frame context as a car records it (context.py sample_rig): /tf_static (reliable, transient
    local, as tf2's static broadcaster offers it) and each camera's CameraInfo (best effort, as a driver)."""

    def __init__(self, writer: BagWriter, camera_topics: list[str]):
        self.writer, self.topics = writer, [camera_info_topic(t) for t in camera_topics]
        self.rigs: dict = {}
        for topic in self.topics:
            writer.declare(topic, [sensor_qos()])
        writer.declare(TF_STATIC_TOPIC, [latched_qos()])

    def _rig(self, shape) -> list:
        height, width = shape[:2]
        return self.rigs.setdefault((width, height), sample_rig(len(self.topics), width, height))

    def tf_static(self, images, receive_ns: int) -> None:
        """One TFMessage with every camera's chain, serialised with the bag type store (no tf2_msgs needed)."""
        store = typestore_with([TF_TYPE])
        T = store.types
        transforms = []
        for parent, child, t in (edge for _, _, chain in self._rig(images[0].shape) for edge in chain):
            (x, y, z), q = t[:3, 3], quaternion_of(t[:3, :3])
            transforms.append(T["geometry_msgs/msg/TransformStamped"](
                header=T["std_msgs/msg/Header"](stamp=T["builtin_interfaces/msg/Time"](*divmod(START_NS, 10**9)),
                                                frame_id=parent), child_frame_id=child,
                transform=T["geometry_msgs/msg/Transform"](translation=T["geometry_msgs/msg/Vector3"](x, y, z),
                                                           rotation=T["geometry_msgs/msg/Quaternion"](*q))))
        raw = store.serialize_cdr(T[TF_TYPE](transforms=transforms), TF_TYPE)
        self.writer.write(TF_STATIC_TOPIC, TF_TYPE, receive_ns, bytes(raw))

    def camera_info(self, index: int, shape, stamp: int, receive_ns: int) -> list[tuple]:
        from rclpy.serialization import serialize_message
        from sensor_msgs.msg import CameraInfo
        frame_id, k, _ = self._rig(shape)[index]
        msg = CameraInfo(width=int(shape[1]), height=int(shape[0]), distortion_model="plumb_bob",
                         d=[0.0] * 5, k=k.ravel().tolist(), r=[1.0, 0, 0, 0, 1.0, 0, 0, 0, 1.0],
                         p=np.hstack([k, np.zeros((3, 1))]).ravel().tolist())
        messages.ns_to_stamp(stamp, msg.header.stamp)
        msg.header.frame_id = frame_id
        return [(receive_ns, self.topics[index], "sensor_msgs/msg/CameraInfo", serialize_message(msg))]


def road_steps(preset: str, frames: int, seed: int, rate_hz: float = 10.0):
    """The synthetic road at the preset's image size and camera count, ground truth at its waypoint spacing."""
    from ...sim.road import drive
    spec = get_preset(preset)
    for frame in drive(seed, frames, spec.num_cameras, spec.image_height, spec.image_width, spec.num_waypoints,
                       spec.waypoint_dt_s, rate_hz):
        t = np.arange(1, spec.num_waypoints + 1)[:, None] * spec.waypoint_dt_s
        yield DriveStep(frame.images, frame.scene.speed_mps, frame.yaw_rate_rps, np.hstack([frame.truth, t]))


def write_road_drive(path: str | Path, preset: str, camera_topics: list[str], frames: int = 40, seed: int = 0,
                     rate_hz: float = 10.0, storage: str = "mcap") -> Path:
    spec = get_preset(preset)
    expect(len(camera_topics) == spec.num_cameras, ConfigError,
           f"road drive: {len(camera_topics)} camera topics for a {spec.num_cameras}-camera model")
    return write_drive(path, camera_topics, road_steps(preset, frames, seed, rate_hz), rate_hz, storage, seed=seed)


def read_drive_view(path: str | Path, camera_topic: str | None = None, predictions: dict | None = None) -> list:
    """A drive bag -> sim.view.ViewFrame per odometry message (by header stamp): speed and yaw rate, the
    recorded ground truth and the front camera's image (`camera_topic`, default: the first camera topic) when
    the bag is a synthetic road drive (it has the ground truth), and `predictions` (stamp -> (N, 2)). Decoded with the bag type store (pure
    Python), never rclpy: a damaged message is skipped, not a crash."""
    from ...sim.view import ViewFrame
    from .storage import bag_info, stream_bag, typestore_with
    from .replay import CAMERA_TYPES
    types = bag_info(path).types
    cameras = [t for t, m in types.items() if m in CAMERA_TYPES]
    camera_topic = camera_topic or (sorted(cameras)[0] if cameras else None)
    # images only for the sim's drives (the ground truth says so): the paths are drawn with its camera model
    synthetic = GROUND_TRUTH_TOPIC in types
    wanted = {t for t in (camera_topic if synthetic else None, KINEMATIC_TOPIC, GROUND_TRUTH_TOPIC) if t in types}
    store = typestore_with({types[t] for t in wanted})
    images, odometry, truths = {}, {}, {}
    for message in stream_bag(path):
        if message.topic not in wanted:
            continue
        try:
            msg = store.deserialize_cdr(message.raw, message.msgtype)
            stamp = messages.stamp_to_ns(msg.header.stamp)
            if message.topic == KINEMATIC_TOPIC:
                odometry[stamp] = (float(msg.twist.twist.linear.x), float(msg.twist.twist.angular.z))
            elif message.topic == GROUND_TRUTH_TOPIC:
                truths[stamp] = np.array([[p.pose.position.x, p.pose.position.y,
                                           (messages.stamp_to_ns(p.header.stamp) - stamp) * 1e-9] for p in msg.poses])
            else:
                images[stamp] = (messages.compressed_to_array(msg, message.topic) if hasattr(msg, "format")
                                 else messages.image_to_array(msg, message.topic))
        except (InputError, ValueError, IndexError, KeyError, AttributeError, struct.error, UnicodeDecodeError):
            # a picture of the drive: a damaged message is left out
            continue
    predictions = predictions or {}
    return [ViewFrame(stamp, images.get(stamp), speed, yaw_rate, truth[:, :2] if truth is not None else None,
                      predictions.get(stamp), truth[:, 2] if truth is not None else None)
            for stamp, (speed, yaw_rate), truth in ((s, o, truths.get(s)) for s, o in sorted(odometry.items()))]
