"""Where and when the suffix's trajectory is: the frame's plan moved into the output frame with the pose matched
to the frame, then (output_retime, a world frame) re-timed to the present by engine/retime.py: stamped at
publish time, starting at the ego's pose from the newest kinematic state. The node only calls `locate` and
`timed`; a frame that cannot be placed or re-timed is refused here, counted under its reason."""

from __future__ import annotations

import math
import threading
from typing import NamedTuple

from ...engine.pipeline.stamp_order import stamp_order
from ...engine.pose_steps import PoseSteps
from ...engine.retime import CurrentPose, JumpLimits, RetimeError, retime
from ...errors import ConfigError, NonFiniteError
from ...types import Pose2D
from .. import messages

POSE_SKEW_NS = 50_000_000   # the kinematic state matched to a frame lies within this of its stamp (sensor
# time: ~1 m at 20 m/s, whatever the model's size); it may arrive late by half a frame period (time_limits.py)


class Output(NamedTuple):
    stamp_ns: int     # the messages' header stamp: the publish time (re-timed) or the camera's stamp
    points: object    # (M, 5) x, y, heading, speed, time_from_start (s after stamp_ns) in the output frame
    z: float          # every point's height (the ego's, re-timed; else 0)
    info: dict        # what ~/debug/trajectory_info adds (output_stamp_ns, frame_age_ms, retime_dropped)


class PresentOutput:
    """The suffix node's output placement and timing. `node.poses` (a StampedHistory, None in base_link) holds
    the odometry for matching; the newest sample (stamp, pose, z) is the ego's current pose; `steps` the jumps
    between consecutive samples (localization resets, engine/pose_steps.py)."""

    def __init__(self, node):
        self.node = node
        self.newest: CurrentPose | None = None
        self.steps = PoseSteps()
        self.lock = threading.Lock()

    def describe(self) -> str:
        if self.node.poses is None:
            return "the plan as predicted, at the camera stamp (frame_id base_link: no ego pose to re-time from)"
        if not self.node.params["output_retime"]:
            return "the plan as predicted, at the camera stamp (output_retime false)"
        return f"re-timed to the present every {self.node.params['output_dt_s']:g} s (output_retime)"

    def add_odometry(self, msg) -> None:
        """A kinematic state in the output frame: kept for matching, and the current pose when newest (a stamp
        that went back by TIME_JUMP_S or more starts a new timeline: engine/pipeline/stamp_order.py), with its
        twist (speed, yaw rate: how far the car could have gone since a frame, engine/retime.py). A pose that
        jumped (a localization reset) is kept as it comes, and its step from the sample before noted (judged
        with the pose jump allowances of the moment): a frame is matched to the samples around its own stamp,
        so only the frames stamped before the reset and published after it meet it (refused, pose_jump)."""
        stamp_ns, pose = messages.stamp_to_ns(msg.header.stamp), messages.odometry_to_pose(msg)
        self.node.poses.add(stamp_ns, pose)
        twist = msg.twist.twist
        sample = CurrentPose(stamp_ns, pose.x, pose.y, pose.yaw, float(msg.pose.pose.position.z),
                             math.hypot(twist.linear.x, twist.linear.y), float(twist.angular.z))
        limits = self._limits()
        with self.lock:
            self.steps.add(sample, limits)
            if self.newest is None or stamp_order(self.newest.stamp_ns, stamp_ns) != "older":
                self.newest = sample

    def _limits(self) -> JumpLimits:
        params = self.node.params
        return JumpLimits(params["output_pose_jump_m"], params["output_pose_jump_rad"])

    def current_pose(self) -> Pose2D | None:
        """The ego's pose from the newest kinematic state (None: none yet, or base_link with no pose input)."""
        with self.lock:
            ego = self.newest
        return None if ego is None else Pose2D(ego.x, ego.y, ego.yaw)

    def locate(self, trajectory):
        """-> (points (N, 5) in the output frame, the frame's pose or None in base_link), or None (counted as
        pose_missing) when the map frame has no pose for this frame."""
        node = self.node
        if node.poses is None:
            return trajectory.points, None
        pose, matched = node.poses.match(trajectory.stamp_ns, POSE_SKEW_NS, node.limits.pose_wait_s())
        if not matched:
            node._reject("pose_missing", ConfigError(
                f"no kinematic state within {POSE_SKEW_NS / 1e6:.0f} ms of frame {trajectory.seq}: the "
                f"{node.params['frame_id']}-frame trajectory is not published (frame_id: base_link needs none)"),
                trajectory.stamp_ns)
            return None
        return trajectory.in_map(pose), pose

    def timed(self, trajectory, points, pose) -> Output | None:
        """The output as published: re-timed to now (output_retime, a world frame), else as predicted. None:
        refused and counted (retime_too_old, retime_no_current_pose, retime_invalid_plan, pose_jump,
        nonfinite_output)."""
        params = self.node.params
        if pose is None or not params["output_retime"]:
            return Output(trajectory.stamp_ns, points, 0.0, {"output_stamp_ns": trajectory.stamp_ns})
        with self.lock:   # the ego and the jumps up to it, together: none newer than the ego is taken
            ego = self.newest
            stepped = None if ego is None else self.steps.since(trajectory.stamp_ns, ego.stamp_ns)
        try:
            out = retime(points, pose, trajectory.stamp_ns, self.node.get_clock().now().nanoseconds, ego,
                         params["output_dt_s"], self._limits(), stepped)
        except (RetimeError, NonFiniteError) as exc:
            self.node._reject(exc.reason, ConfigError(f"trajectory of frame {trajectory.seq}: {exc}"),
                              trajectory.stamp_ns)
            return None
        return Output(out.stamp_ns, out.points, out.z, {
            "output_stamp_ns": out.stamp_ns, "frame_age_ms": f"{out.age_s * 1e3:.1f}", "retime_dropped": out.dropped})
