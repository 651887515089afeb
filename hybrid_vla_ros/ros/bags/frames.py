"""A recorded drive as the model's frames, offline (no graph, no rclpy): what `hybrid-vla calibrate` feeds the
model. Frames are grouped as replay groups them (replay.bag_frames: one image per camera within the skew);
the ego state is the newest odometry received up to the frame. Decoded with the bag type store (pure Python):
a damaged message or an incomplete frame is skipped and counted, never a crash."""

from __future__ import annotations

import struct
from pathlib import Path

from ...errors import InputError
from ...types import EgoState, Frame
from .. import messages
from ..topics import KINEMATIC_TOPIC
from .replay import CAMERA_TYPES, bag_frames
from .storage import bag_info, typestore_with

DEFAULT_SKEW_NS = 20_000_000
_DAMAGED = (InputError, ValueError, IndexError, KeyError, AttributeError, struct.error, UnicodeDecodeError)


def drive_frames(path: str | Path, num_cameras: int, limit: int | None = None,
                 skew_ns: int = DEFAULT_SKEW_NS) -> tuple[list[Frame], dict]:
    """-> (up to `limit` complete frames with `num_cameras` images each in camera-topic order, counts of what
    was skipped). A bag whose camera topics are not `num_cameras` is refused: the model would see other cameras."""
    types = bag_info(path).types
    cameras = sorted(t for t, m in types.items() if m in CAMERA_TYPES)
    if len(cameras) != num_cameras:
        raise InputError(f"bag {path}: {len(cameras)} camera topics {cameras}, the model takes {num_cameras}")
    store = typestore_with({types[t] for t in [*cameras, KINEMATIC_TOPIC] if t in types})
    frames, skipped, ego = [], {"incomplete": 0, "damaged": 0, "no_odometry": 0}, None
    for grouped in bag_frames(path, skew_ns, cameras):
        if limit is not None and len(frames) >= limit:
            break
        images = {}
        try:
            for message in grouped.messages:
                msg = store.deserialize_cdr(message.raw, message.msgtype)
                if message.topic == KINEMATIC_TOPIC:
                    ego = EgoState(float(msg.twist.twist.linear.x), float(msg.twist.twist.angular.z))
                elif message.topic in cameras:
                    images[message.topic] = (messages.compressed_to_array(msg, message.topic) if hasattr(msg, "format")
                                             else messages.image_to_array(msg, message.topic))
        except _DAMAGED:
            skipped["damaged"] += 1
            continue
        if len(images) != num_cameras:
            skipped["incomplete"] += bool(images)
            continue
        if ego is None:
            skipped["no_odometry"] += 1
            continue
        frames.append(Frame(images=[images[t] for t in cameras], seq=len(frames), stamp_ns=grouped.stamp_ns, ego=ego))
    return frames, skipped
