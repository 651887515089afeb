"""A model that reads its history (spec.frames_per_camera > 1): each camera's last frames as one model frame
(ROS-free). The window of frame t holds, per camera, the frames t - (K-1)s, ..., t - s, t (K = frames_per_camera,
s = frame_stride, counted in the camera's frames), oldest first, camera-major: [cam0 oldest .. cam0 newest,
cam1 oldest ..], the order of the prompt's image blocks. Until K frames have arrived (a cold start, or after the
stamps jump back: a replayed bag starting again) the oldest frame kept stands in for the older ones, as it does
in training (learn/train.road_samples), so the first plan comes with the first frame.
"""

from __future__ import annotations

import dataclasses
from collections import OrderedDict, deque

from ...errors import HybridVLAError
from .stamp_order import stamp_order
from ...types import Frame


MAX_GAP_NS = 1_000_000_000   # camera sets further apart than 1 s: the older ones no longer make a window's history


def window_depth(spec) -> int:
    """Camera frames a window spans: (K - 1) s + 1."""
    return (spec.frames_per_camera - 1) * spec.frame_stride + 1


def window_of(history: list[Frame], spec, epoch: int = 0) -> Frame:
    """history: the camera frames up to the newest (oldest first; each with num_cameras images) -> the newest
    frame with the window's image_slots images in place of its own (everything else the newest frame's). Keys:
    (camera, stamp, the image object's id, epoch): the window holds each image while its key can be met; epoch (the
    window's restarts) keeps a replayed stamp whose new image took a dropped one's id from meeting its old key."""
    newest = len(history) - 1
    picks = [history[step] for step in spec.window_steps(newest)]
    images = [pick.images[camera] for camera in range(spec.num_cameras) for pick in picks]   # camera-major
    keys = tuple((camera, pick.stamp_ns, id(pick.images[camera]), epoch) for camera in range(spec.num_cameras)
                 for pick in picks)
    return dataclasses.replace(history[-1], images=images, image_keys=keys)


class FrameWindow:
    """The last window_depth(spec) frames; push(frame) -> the model's frame for it (frame itself when the model
    reads one frame a camera). Images are shared, not copied."""

    def __init__(self, spec):
        self.spec = spec
        self.kept: deque[Frame] = deque(maxlen=window_depth(spec))
        self.restarts = 0   # times the stamps went back and the window started over

    def push(self, frame: Frame) -> Frame:
        """A set older than the newest kept but within TIME_JUMP_S (a duplicate, a late one) is not kept: its
        window is built for it alone (the prefix refuses it as out of order); time going back further, or a gap of
        more than MAX_GAP_NS since the newest (the camera stopped, the node was inactive), starts over."""
        if self.spec.frames_per_camera == 1:
            return frame
        order = stamp_order(self.kept[-1].stamp_ns, frame.stamp_ns) if self.kept else "newer"
        if order == "older":
            return window_of([*self.kept, frame], self.spec, self.restarts)
        if order == "jump" or (self.kept and frame.stamp_ns - self.kept[-1].stamp_ns > MAX_GAP_NS):
            self.kept.clear()
            self.restarts += 1
        self.kept.append(frame)
        return window_of(list(self.kept), self.spec, self.restarts)

    def clear(self) -> None:
        self.kept.clear()


class DecodedOnce:
    """Each image of a window decoded once: decode(image) -> kept by the input's identity (the window holds the
    input itself while a later window may still read it), up to `capacity` images, the least recent dropped.
    Counts decoded and reused images."""

    def __init__(self, capacity: int):
        self.capacity = max(1, capacity)
        self.kept: OrderedDict[int, tuple] = OrderedDict()   # id(input) -> (input, decoded)
        self.decoded = self.reused = 0

    def get(self, item, decode):
        hit = self.kept.get(id(item))
        if hit is not None and hit[0] is item:
            self.kept.move_to_end(id(item))
            self.reused += 1
            if isinstance(hit[1], HybridVLAError):
                raise hit[1]
            return hit[1]
        self.decoded += 1            # tried, as a decode that fails is
        try:
            out = decode(item)
        except HybridVLAError as exc:   # a bad image stays bad: kept as its error, not decoded again
            out = exc
        self.kept[id(item)] = (item, out)
        while len(self.kept) > self.capacity:
            self.kept.popitem(last=False)
        if isinstance(out, HybridVLAError):
            raise out
        return out


def decode_window(items: list, per_camera: int, decode_one, keys: tuple | None = None) -> tuple[list, int, tuple]:
    """A window's inputs (camera-major, oldest first) and their keys -> (decoded images, stand-ins, the keys of what
    stands in each slot). decode_one(index, item) decodes one. Each camera's newest image must decode (its error is
    the frame's); an older one that does not is replaced by the next newer image of its camera (and its key), as a
    cold start's window repeats, so one bad image costs one frame, not every window that still holds it."""
    out, stand_ins, used = [None] * len(items), 0, list(keys) if keys is not None else None
    for start in range(0, len(items), per_camera):
        newest = start + per_camera - 1
        for i in range(newest, start - 1, -1):
            try:
                out[i] = decode_one(i, items[i])
            except HybridVLAError:
                if i == newest:
                    raise
                out[i], stand_ins = out[i + 1], stand_ins + 1
                if used is not None:
                    used[i] = used[i + 1]
    return out, stand_ins, tuple(used) if used is not None else None
