"""Plain data that flows through the engine: a camera frame in, a boundary state between stages,
a trajectory out. No ROS types here; ros/messages.py translates."""

from __future__ import annotations

import math
from dataclasses import dataclass, field

import numpy as np
import torch

TRAJECTORY_COLUMNS = ("x", "y", "heading", "speed", "time_from_start")


@dataclass
class EgoState:
    speed_mps: float = 0.0
    yaw_rate_rps: float = 0.0
    accel_mps2: float = 0.0   # longitudinal (base_link x), from ~/input/acceleration; data for heads, not the prompt

    @staticmethod
    def between(a: "EgoState", b: "EgoState", w: float) -> "EgoState":
        """The state a fraction w in [0, 1] of the way from a to b (linear)."""
        return EgoState(a.speed_mps + w * (b.speed_mps - a.speed_mps),
                        a.yaw_rate_rps + w * (b.yaw_rate_rps - a.yaw_rate_rps),
                        a.accel_mps2 + w * (b.accel_mps2 - a.accel_mps2))


@dataclass
class Pose2D:
    """A planar pose in a fixed frame (the map; the simulator's world): x, y (m), yaw (rad, counter-clockwise from
    x). The ego's: from the kinematic state matched to a frame's stamp. Its ego frame: x forward, y left.

    The package's one pair of planar transforms: to_ego / from_ego take x and y as floats or as arrays of one
    shape (an (N, 2) array xy: `*xy.T`) and return (x, y) of that shape."""
    x: float = 0.0
    y: float = 0.0
    yaw: float = 0.0

    def to_ego(self, x, y):
        """Points in the fixed frame -> (x forward, y left) in this pose's ego frame."""
        c, s = math.cos(self.yaw), math.sin(self.yaw)
        dx, dy = x - self.x, y - self.y
        return c * dx + s * dy, -s * dx + c * dy

    def from_ego(self, x, y):
        """Points in this pose's ego frame -> the fixed frame."""
        c, s = math.cos(self.yaw), math.sin(self.yaw)
        return self.x + c * x - s * y, self.y + s * x + c * y

    @staticmethod
    def between(a: "Pose2D", b: "Pose2D", w: float) -> "Pose2D":
        """The pose a fraction w in [0, 1] of the way from a to b: position linear, yaw the short way round."""
        turn = math.remainder(b.yaw - a.yaw, 2.0 * math.pi)
        return Pose2D(a.x + w * (b.x - a.x), a.y + w * (b.y - a.y), math.remainder(a.yaw + w * turn, 2.0 * math.pi))


# The navigation commands (route/navigate.py): a small fixed vocabulary, as driving VLAs take them (SimLingo and
# CARLA's route planner: lane follow, left, right, straight, change lane left/right), plus arrive (goal ahead).
NAV_COMMANDS = ("follow lane", "turn left", "turn right", "go straight", "change lane left", "change lane right",
                "arrive")


@dataclass
class Navigation:
    """The route's next maneuver for one frame, at the frame's ego pose (route/navigate.py).

    command:    one of NAV_COMMANDS
    distance_m: along the route from the ego to where the command applies (0 while in it); follow lane: to the
                next command beyond the horizon, or to the goal; arrive: to the goal
    goal_ego:   (x, y) of the route's goal in the ego frame (m; x forward, y left)
    target_ego: (x, y) of the route's centreline point lookahead_m ahead, ego frame (a TransFuser-style target)
    source:     "route", or "default": no route, no map, no pose or the ego off the route (then the ego-frame
                points are (0, 0): unknown)
    """
    command: str = "follow lane"
    distance_m: float = 0.0
    goal_ego: tuple[float, float] = (0.0, 0.0)
    target_ego: tuple[float, float] = (0.0, 0.0)
    source: str = "default"

    @staticmethod
    def default() -> "Navigation":
        """The stated default: follow the lane, nothing known about the route."""
        return Navigation()


@dataclass
class Frame:
    """One time step of camera input. images: one (H, W, 3) uint8 RGB array per camera."""
    images: list[np.ndarray]
    seq: int = 0
    stamp_ns: int = 0
    ego: EgoState | None = None
    instruction: str = "drive safely to the goal"
    arrival_ns: int = 0  # wall clock (ns since the epoch) when the frame was complete at the prefix; 0 = unknown
    navigation: Navigation | None = None  # the route's navigation at the frame's pose (None: not computed)
    context: object = None  # context.FrameContext: geometry, pose, history, navigation as data; None: not built
    expected_delay_s: float = 0.0  # a delay-aware model's (spec.delay_aware) capture-to-effect delay it plans for
    image_keys: tuple | None = None  # one key per image, unique to its content (a window's: camera, stamp, source):
                                     # an image met again is not encoded again (engine/embedding.py); None: all are


@dataclass
class Waypoint:
    x: float
    y: float
    heading: float
    speed: float
    time_from_start: float


@dataclass
class Trajectory:
    """N future waypoints in the ego frame. points: (N, 5) float64, columns TRAJECTORY_COLUMNS. extras: what a
    head reports besides the waypoints (a decision's label and logits, the mode a command chose), JSON-able."""
    points: np.ndarray
    seq: int
    stamp_ns: int
    partition: int
    extras: dict = field(default_factory=dict)

    @property
    def waypoints(self) -> list[Waypoint]:
        return [Waypoint(*map(float, row)) for row in self.points]

    def in_map(self, pose: Pose2D) -> np.ndarray:
        """The points moved from the ego frame into the map frame at `pose`: (N, 5), same columns."""
        out = self.points.copy()
        out[:, 0], out[:, 1] = pose.from_ego(self.points[:, 0], self.points[:, 1])
        out[:, 2] = self.points[:, 2] + pose.yaw
        return out


def accelerations(points: np.ndarray) -> np.ndarray:
    """Longitudinal acceleration at each point (m/s^2) from the speed and time columns; the last point keeps
    the one before it. (N,)"""
    speed, t = points[:, 3], points[:, 4]
    if len(points) < 2:
        return np.zeros(len(points))
    dv = np.diff(speed) / np.maximum(np.diff(t), 1e-6)
    return np.append(dv, dv[-1])


@dataclass
class DeepStack:
    """Qwen3-VL's DeepStack: visual features from several vision layers, added to the hidden state at the image
    tokens after each of the first k decoder blocks. A boundary cut at p < k carries the ones still to add.

    positions: (n,) int64  the image tokens' indices in the frame's sequence
    features:  (m, n, H)   the additions after blocks first_block .. first_block + m - 1
    """
    positions: torch.Tensor
    features: torch.Tensor
    first_block: int = 0

    @property
    def end_block(self) -> int:
        return self.first_block + self.features.shape[0]

    def after_block(self, block: int, hidden: torch.Tensor) -> torch.Tensor:
        """hidden (1, S, H) after decoder block `block` -> with that block's addition (if any) at the image tokens."""
        if not self.first_block <= block < self.end_block:
            return hidden
        hidden = hidden.clone()
        hidden[0, self.positions] = hidden[0, self.positions] + self.features[block - self.first_block].to(hidden.dtype)
        return hidden

    def from_block(self, block: int) -> "DeepStack | None":
        """What a suffix starting at `block` still adds (views, no copy); None when nothing is left."""
        start = max(block, self.first_block)
        if start >= self.end_block:
            return None
        return DeepStack(self.positions, self.features[start - self.first_block:], start)

    def to(self, device) -> "DeepStack":
        return DeepStack(self.positions.to(device), self.features.to(device), self.first_block)

    def nbytes(self) -> int:
        return sum(t.numel() * t.element_size() for t in (self.positions, self.features))


@dataclass
class BoundaryState:
    """Everything the suffix needs to run blocks [partition, L) for one frame.

    hidden:         (B, S, H)  hidden state after block partition-1 (the embeddings when partition == 0)
    position_ids:   (3, B, S) for M-RoPE (Qwen-VL) or (B, S) for 1-D RoPE (LLaMA); int64
    attention_mask: (B, S)     1 = attend, 0 = padding; int64
    deepstack:      what DeepStack (Qwen3-VL) still adds after blocks >= partition; None for other families

    Chunked prefill (engine/chunking.py): the state of one chunk of the frame's tokens, S = that chunk's
    length; tokens [chunk_start, chunk_start + S) of the frame; chunk chunk_index of chunk_count (1 = the
    whole frame). query_index stays the frame's (absolute); DeepStack positions are chunk-relative.
    """
    hidden: torch.Tensor
    position_ids: torch.Tensor
    attention_mask: torch.Tensor
    partition: int
    seq: int = 0
    stamp_ns: int = 0
    query_index: int = -1  # position of the planning query token the head reads
    arrival_ns: int = 0    # the frame's arrival at the prefix (Frame.arrival_ns), carried in the envelope
    timings: dict = field(default_factory=dict)
    deepstack: DeepStack | None = None
    chunk_index: int = 0
    chunk_count: int = 1
    chunk_start: int = 0
    context: object = field(default=None, compare=False)  # the frame's context.FrameContext, for the head
    # Streaming KV (engine/kv_stream/): (2, image slots) int64, per slot its segment's serial and 1 where the prefix
    # kept it (its rows here are the kept ones), 0 where computed in this window; None: the full layout.
    kv_segments: torch.Tensor | None = None
    # Set by an in-process handover: the sender's FlightControl (engine/pipeline/flight.py); the receiver reports
    # suffix_started() / suffix_finished(s) to it, which frees the sender's in-flight slot. Never serialised.
    flight: object = field(default=None, repr=False, compare=False)

    @property
    def chunked(self) -> bool:
        return self.chunk_count > 1

    @property
    def last_chunk(self) -> bool:
        return self.chunk_index == self.chunk_count - 1

    def nbytes(self) -> int:
        tensors = sum(t.numel() * t.element_size() for t in (self.hidden, self.position_ids, self.attention_mask))
        tensors += self.kv_segments.numel() * 8 if self.kv_segments is not None else 0
        return tensors + (self.deepstack.nbytes() if self.deepstack is not None else 0)
