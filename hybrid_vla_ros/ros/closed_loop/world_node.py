"""hybrid_vla_world: the simulator's closed-loop world (sim/) as a ROS node, for the graph in the loop.

Out: /clock (world time, START_NS + t: the graph's nodes run with use_sim_time), each camera's sensor_msgs/Image
(rgb8, stamped at its capture), the ego's nav_msgs/Odometry on the kinematic-state topic (map-frame pose = world
coordinates, speed and yaw rate; stamped with the frame). In: the suffix's trajectories, either base_link plans
stamped with their camera frame, or (placed) map-frame plans the suffix re-timed to its present (output_retime),
stamped then, their camera frame read from the suffix's trajectory_info. Each takes effect at the next world step
(sim/external.py), or, given a latency (a timing profile's: the graph on this CPU is far faster than the hardware
it stands for), no earlier than that latency after its camera frame: the missing compute time added as a delay. A
map-frame plan keeps its own times, so a later effect reads it further along.

World time follows the wall clock x time_scale: each timer tick (every DT_S / time_scale) advances as many DT_S
steps as are due since the first plan (a late tick catches up, MAX_CATCH_UP steps at most; the rest is reported as
lag); time_scale < 1 slows the world, so a model slower than real time drives at its latency x time_scale. Before the plan of
frame 0 arrives the world stands still and re-sends frame 0 every second (warm start).
"""

from __future__ import annotations

import math
import time

from nav_msgs.msg import Odometry
from rclpy.node import Node
from rclpy.qos import qos_profile_sensor_data
from rosgraph_msgs.msg import Clock
from diagnostic_msgs.msg import DiagnosticStatus
from sensor_msgs.msg import Image

from ...sim.external import ExternalDrive
from ...sim.loop import DT_S
from ...sim.world import random_scenario
from .. import messages
from ..topics import KINEMATIC_TOPIC, TRAJECTORY_INFO_TOPIC, TRAJECTORY_TOPIC

NODE_NAME = "hybrid_vla_world"
RESEND_S = 1.0
MAX_CATCH_UP = 25   # world steps per tick (half a second of world time)
KEEP_UNMATCHED = 100   # placed plans (or infos) waiting for their partner: 10 s of frames


def keep_bounded(kept: dict, key, value) -> None:
    """A placed plan or an info waiting for its partner, the oldest dropped past KEEP_UNMATCHED (a partner that
    never comes)."""
    kept[key] = value
    while len(kept) > KEEP_UNMATCHED:
        kept.pop(next(iter(kept)))


class WorldNode(Node):
    def __init__(self, spec, camera_topics: list[str], seed: int = 0, time_scale: float = 1.0,
                 output_type: str = "auto", max_time_s: float | None = None, context=None, placed: bool = False,
                 latency_s: float = 0.0):
        super().__init__(NODE_NAME, context=context)
        self.drive = ExternalDrive(random_scenario(seed), spec, retimed=placed, max_time_s=max_time_s)
        self.placed, self.latency_s = placed, latency_s
        self.waiting: list[tuple] = []          # (effect at, points, output stamp ns or None, capture index)
        self.unmatched: dict[int, object] = {}  # a placed plan's output stamp -> points, until its info comes
        self.captures: dict[int, int] = {}      # output stamp -> camera stamp (the suffix's trajectory_info)
        if placed:
            self.create_subscription(DiagnosticStatus, TRAJECTORY_INFO_TOPIC, self._on_info, 50)
        self.clock = self.create_publisher(Clock, "/clock", 10)
        self.cameras = [self.create_publisher(Image, topic, qos_profile_sensor_data) for topic in camera_topics]
        self.odometry = self.create_publisher(Odometry, KINEMATIC_TOPIC, 10)
        msg_cls, _, _ = messages.resolve_trajectory_type(output_type)
        self.create_subscription(msg_cls, TRAJECTORY_TOPIC, self._on_plan, 10)
        self.plans_received = self.plans_refused = 0
        self._sent_first = 0.0
        self.time_scale, self.wall_start, self.lag_steps = time_scale, None, 0
        self.timer = self.create_timer(DT_S / time_scale, self._tick)

    @property
    def done(self) -> bool:
        return self.drive.ended

    def _tick(self) -> None:
        if not self.drive.started:
            if time.monotonic() - self._sent_first >= RESEND_S:   # warm start: frame 0 until its plan comes
                self._publish_frame(0)
                self._sent_first = time.monotonic()
            return
        if self.wall_start is None:
            self.wall_start = time.monotonic()
        due = int((time.monotonic() - self.wall_start) * self.time_scale / DT_S) - self.drive.k
        for _ in range(max(0, min(due, MAX_CATCH_UP))):
            self._apply_due()
            index = self.drive.advance()
            if index is not None:
                self._publish_frame(index)
        self.lag_steps = max(self.lag_steps, due - MAX_CATCH_UP)
        self._publish_clock()

    def _publish_clock(self) -> None:
        msg = Clock()
        messages.ns_to_stamp(self.drive.now_ns(), msg.clock)
        self.clock.publish(msg)

    def _publish_frame(self, index: int) -> None:
        frame = self.drive.frame(index)
        self._publish_clock()
        odom = Odometry()
        messages.ns_to_stamp(frame.stamp_ns, odom.header.stamp)
        odom.header.frame_id, odom.child_frame_id = "map", "base_link"
        car = self.drive.car
        odom.pose.pose.position.x, odom.pose.pose.position.y = float(car.x), float(car.y)
        odom.pose.pose.orientation.z, odom.pose.pose.orientation.w = math.sin(car.yaw / 2), math.cos(car.yaw / 2)
        odom.twist.twist.linear.x, odom.twist.twist.angular.z = float(car.v), float(car.yaw_rate)
        self.odometry.publish(odom)
        for i, pub in enumerate(self.cameras):
            msg = messages.array_to_image(frame.images[i], Image())
            messages.ns_to_stamp(frame.stamp_ns, msg.header.stamp)
            msg.header.frame_id = f"camera{i}/camera_optical_link"
            pub.publish(msg)

    def _on_plan(self, msg) -> None:
        stamp, points = messages.stamp_to_ns(msg.header.stamp), messages.msg_to_points(msg)
        if not self.placed:
            self._wait(points, None, ExternalDrive.index_of(stamp))
        elif stamp in self.captures:
            self._wait(points, stamp, ExternalDrive.index_of(self.captures.pop(stamp)))
        else:
            keep_bounded(self.unmatched, stamp, points)

    def _on_info(self, msg) -> None:
        values = {kv.key: kv.value for kv in msg.values}
        try:
            output, capture = int(values["output_stamp_ns"]), int(values["stamp_ns"])
        except (KeyError, ValueError):
            return
        if output in self.unmatched:
            self._wait(self.unmatched.pop(output), output, ExternalDrive.index_of(capture))
        else:
            keep_bounded(self.captures, output, capture)

    def _wait(self, points, output_ns: int | None, index: int) -> None:
        """A plan takes effect at the next step, or `latency_s` after its frame's capture if that is later (frame 0's
        at once: the world stands still for it, warm, as sim/loop.py's drives start)."""
        capture_s = (ExternalDrive.stamp_of(index) - ExternalDrive.stamp_of(0)) * 1e-9
        effect = max(self.drive.t, capture_s + self.latency_s) if self.drive.started else self.drive.t
        self.waiting.append((effect, points, output_ns, index))
        if not self.drive.started:
            self._apply_due()

    def _apply_due(self) -> None:
        due = sorted((w for w in self.waiting if w[0] <= self.drive.t + 1e-9), key=lambda w: w[3])
        self.waiting = [w for w in self.waiting if w[0] > self.drive.t + 1e-9]
        for _, points, output_ns, index in due:
            if output_ns is None:
                taken = self.drive.receive(points, index)
            else:
                taken = self.drive.receive_placed(points, (output_ns - self.drive.stamp_of(0)) * 1e-9, index)
            self.plans_received += taken
            self.plans_refused += not taken
