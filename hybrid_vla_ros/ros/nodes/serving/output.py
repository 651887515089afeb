"""The suffix node's one output path, whatever the model (a waypoint head, action tokens, an Alpamayo release): a
finished frame's Trajectory goes to `publish_trajectory`, which places it in the output frame with the suffix's own
odometry (ros/outputs/present.py), re-times it to the present (output_retime), refuses it when out of order,
stale (max_output_age_ms), without a pose or non-finite (each counted), and publishes ~/output/trajectory,
~/output/trajectories (CandidateTrajectories, ros/outputs/candidates.py), ~/output/turn_indicators
(ros/outputs/turn_signals.py), ~/debug/markers and ~/debug/trajectory_info. In a world frame (frame_id other than
base_link) it runs on a thread of its own, which may wait for the frame's pose; in base_link at once, on the
caller's thread."""

from __future__ import annotations

import time

from diagnostic_msgs.msg import DiagnosticStatus
from nav_msgs.msg import Odometry

from ....engine.pipeline.camera_sync import StampedHistory
from ....engine.pipeline.stamp_order import stamp_order
from ....engine.pipeline.worker import StageWorker
from ....errors import ConfigError, NonFiniteError, expect_finite
from ....types import Pose2D
from ... import messages
from ...outputs.candidates import CandidateOutput
from ...chunk_flow import frame_compute_ms
from ...outputs.present import PresentOutput
from ...outputs.turn_signals import TurnSignalOutput
from ..diagnostics import publish_trajectory_info
from ..time_limits import SuffixTimeLimits, timeline, with_output_wait

EGO_FRAME = "base_link"
OUTPUT_QUEUE = 256   # finished frames waiting for the output thread (a world frame's pose may come late)


class SuffixOutput:
    """Mixed into the suffix node (a StageNode): its output entities live on the node (pub, info_pub, candidates,
    present, signals, markers, limits, poses, output), built by `configure_output` before the model's stage."""

    def configure_output(self) -> None:
        p = self.params
        self.msg_cls, self.output_kind, self.output_reason = messages.resolve_trajectory_type(p["output_type"])
        self.last_stamp_ns = -1
        self.limits = SuffixTimeLimits(self)   # max_output_age_ms and the pose wait, from measured times
        self.pub = self.configured_publisher(self.msg_cls, "~/output/trajectory", 10)
        self.candidates = CandidateOutput(self, p["generator_name"])  # ~/output/trajectories
        self.info_pub = self.configured_publisher(DiagnosticStatus, "~/debug/trajectory_info", 10)
        self.poses = StampedHistory(between=Pose2D.between) if p["frame_id"] != EGO_FRAME else None
        self.present = PresentOutput(self)   # where and when the output is: matched pose, re-timing
        self.signals = TurnSignalOutput(self)   # ~/output/turn_indicators from the route
        if self.poses is not None:  # the map-frame output needs the ego pose of each frame
            self.configured_subscription(Odometry, "~/input/kinematic_state", self._on_odometry, 50)
            # ... and may wait for it (limits.pose_wait_s): on a thread of its own, never the compute thread's
            self.output = StageWorker("output", self._publish_now, policy="lossless", capacity=OUTPUT_QUEUE,
                                      health=self.health, on_error=self._on_worker_error,
                                      stamp_of=lambda item: item[0].stamp_ns).start()
        self.markers = self._marker_publisher()

    def describe_output(self) -> str:
        return (f"publishing {self.msg_cls.__module__.split('.')[0]}/{self.msg_cls.__name__} on ~/output/trajectory "
                f"({self.output_reason}); {self.candidates.describe()}; {self.present.describe()}; "
                f"{self.signals.describe()}")

    def output_checks(self) -> list:
        return [self.limits.check(), *self.signals.checks()]

    def close_output(self) -> None:
        if self.output is not None:
            self.output.close(drain=True)
        self.output = None

    def _marker_publisher(self):
        try:
            from visualization_msgs.msg import MarkerArray
        except ImportError:
            self.get_logger().info("visualization_msgs not importable: no ~/debug/markers")
            return None
        return self.configured_publisher(MarkerArray, "~/debug/markers", 1)

    def _on_odometry(self, msg) -> None:
        """A pose in another frame than the output's would put the trajectory in the wrong place: refused,
        counted (odometry_frame_mismatch); its frames then go out as pose_missing."""
        frame = msg.header.frame_id.lstrip("/")
        if frame != self.params["frame_id"]:  # an empty frame_id says nothing: refused too
            self.health.reject("odometry_frame_mismatch")
            self.get_logger().warning(f"kinematic state in frame '{frame}', the trajectory's frame_id is "
                                      f"'{self.params['frame_id']}': refused", throttle_duration_sec=1.0)
            return
        self.present.add_odometry(msg)

    def _older(self, stamp_ns: int, what: str) -> bool:
        """Refused (out_of_order) when not newer than the last one published, unless time went back (a bag
        loop, /clock reset: engine/pipeline/stamp_order.py), which starts the order over."""
        order = stamp_order(self.last_stamp_ns, stamp_ns)
        if order == "jump":
            self.last_stamp_ns = -1
        elif order == "older":
            self._reject("out_of_order", ConfigError(
                f"{what} has stamp {stamp_ns}, not newer than {self.last_stamp_ns}"), stamp_ns)
        return order == "older"

    def publish_trajectory(self, trajectory, arrival_ns: int, values: dict) -> None:
        """A finished frame's trajectory in the output frame, its markers and its info (in the map frame from
        the output thread, which may wait for the frame's pose; in the ego frame at once)."""
        item = (trajectory, arrival_ns, {**values, "done": time.perf_counter()})   # output_wait_ms from it
        if self.output is None:
            self._publish_now(item)
        else:
            self.output.submit(item)

    def _publish_now(self, item) -> None:
        """Not published when older than the last one (out_of_order), without a pose, stale by now, too old
        to re-time or non-finite (each counted)."""
        trajectory, arrival_ns, values = item
        values = with_output_wait(values)
        if self._older(trajectory.stamp_ns, f"trajectory of frame {trajectory.seq}"):
            return
        self.last_stamp_ns = trajectory.stamp_ns
        placed = self.present.locate(trajectory)   # (points in the output frame, the frame's pose) or None
        if placed is None or not self.limits.fresh(
                trajectory.seq, trajectory.stamp_ns, arrival_ns, queue_s=float(values.get("queue_ms", 0)) / 1e3,
                compute_s=frame_compute_ms(values) / 1e3, final=True):
            return
        out = self.present.timed(trajectory, *placed)   # stamped now, from the ego now (output_retime), or as is
        if out is None:   # too old to re-time (or no current pose): counted there; where its time went, logged
            self.get_logger().warning(timeline(trajectory, values), throttle_duration_sec=1.0)
            return
        try:  # the last gate before the car, for every kind of model and output frame
            expect_finite(out.points, "nonfinite_output", f"trajectory of frame {trajectory.seq}")
        except NonFiniteError as exc:
            self._reject(exc.reason, exc, trajectory.stamp_ns)
            return
        frame_id = self.params["frame_id"]
        msg = messages.trajectory_to_msg(trajectory, self.msg_cls, self.output_kind, frame_id, out.points,
                                         stamp_ns=out.stamp_ns, z=out.z)
        turn = self.signals.command(out.stamp_ns, self.present.current_pose(), float(out.points[0, 3]))  # ego now
        self.pub.publish(msg)
        self.candidates.publish(msg, out.points, out.stamp_ns, frame_id, out.z, turn)  # same stamp, frame, points
        self.signals.publish(turn)
        self._publish_markers(out.points, out.stamp_ns)
        publish_trajectory_info(self.info_pub, self.get_name(), trajectory, {**values, **out.info})  # camera stamp

    def _publish_markers(self, points, stamp_ns: int) -> None:
        if self.markers is None:
            return
        from geometry_msgs.msg import Point
        from visualization_msgs.msg import Marker, MarkerArray
        self.markers.publish(messages.trajectory_markers(points, self.params["frame_id"], stamp_ns, MarkerArray,
                                                         Marker, Point))
