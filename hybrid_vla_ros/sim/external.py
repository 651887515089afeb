"""The closed-loop world driven from outside (issue 41, item 4: the real graph in the loop). loop.py's Drive
schedules its policy itself by a mode's timing; here the plans come from whoever answers the published frames
(the ROS graph, ros/closed_loop/world_node.py): a frame is captured every CAMERA_PERIOD_S of world time, and a plan
takes effect at the next world step after it is received, whatever its age (re-timed or not, as loop.py's
apply_plan places it). World time runs at `time_scale` x the caller's clock (the node steps it from wall time).

Warm start as in loop.py: the world waits, time stopped, until the plan of frame 0 arrives. ROS-free.
"""

from __future__ import annotations

import numpy as np

from .car import Plan, control, step
from .loop import CAMERA_PERIOD_S, DT_S, TICKS, Drive, Record, apply_plan
from .policy import camera_frame
from .timing import ModeTiming
from .world import Scenario

START_NS = 1_000_000_000_000_000_000   # world time 0 as a ROS time (the frames' stamps, /clock): 2001-09-09


class ExternalDrive(Drive):
    """One scenario; frames out (`frame_due` / `frame`), plans in (`receive`), one world step per `advance`."""

    def __init__(self, scenario: Scenario, spec, retimed: bool = False, max_time_s: float | None = None):
        super().__init__(scenario, policy=None,
                         timing=ModeTiming("graph_retimed" if retimed else "graph", 0.0, CAMERA_PERIOD_S, retimed))
        self.spec, self.k, self.plan, self.ended = spec, 0, None, False
        self.limit_s = max_time_s or 2.0 * scenario.length_m / scenario.start_speed_mps + 20.0
        self.snapshot(0)
        self.record()
        self.latest_capture = -1           # newest frame a plan came back for

    @property
    def started(self) -> bool:
        return self.plan is not None

    def frame(self, index: int):
        """The camera frame captured at tick `index` (types.Frame; stamp START_NS + index x 100 ms): one image a camera
        (a model reading its history gets its window from the prefix node)."""
        frame = camera_frame(self.snapshots[index][2], self.spec)
        frame.stamp_ns = self.stamp_of(index)
        return frame

    @staticmethod
    def stamp_of(index: int) -> int:
        return START_NS + int(round(index * CAMERA_PERIOD_S * 1e9))

    @staticmethod
    def index_of(stamp_ns: int) -> int:
        return int(round((stamp_ns - START_NS) / (CAMERA_PERIOD_S * 1e9)))

    def now_ns(self) -> int:
        return START_NS + int(round(self.t * 1e9))

    def receive(self, plan_ego: np.ndarray, index: int) -> bool:
        """The plan (N, 5) computed from frame `index` -> the car's plan from now; False when refused (unknown or
        older than the newest applied frame, or wholly in the past after re-timing)."""
        if index not in self.snapshots or index <= self.latest_capture:
            return False
        capture_t, pose, _ = self.snapshots[index]
        plan = apply_plan(np.asarray(plan_ego, dtype=np.float64), pose, capture_t, self.believed_pose(), self.t,
                          self.timing.retimed)
        if plan is None:
            return False
        self.plan, self.latest_capture = plan, index
        self.rec.plan_ages_s.append(plan.age_s)
        self.rec.frames += 1
        return True

    def receive_placed(self, points_world: np.ndarray, output_s: float, index: int) -> bool:
        """A plan already in world (map) coordinates, re-timed by the graph: (M, 5) x, y, heading, speed, time from
        `output_s` (world time it was re-timed to), computed from frame `index` -> the car's plan from now; False
        when refused (unknown or not newer than the newest applied frame)."""
        points_world = np.asarray(points_world, dtype=np.float64)
        if index not in self.snapshots or index <= self.latest_capture or len(points_world) < 2 or \
                not np.isfinite(points_world).all() or not (np.diff(points_world[:, 4]) > 0).all():
            return False   # unknown, not newer, or no plan to follow (non-finite, times not increasing)
        capture_t = self.snapshots[index][0]
        self.plan, self.latest_capture = Plan(points_world, output_s, self.t - capture_t), index
        self.rec.plan_ages_s.append(self.plan.age_s)
        self.rec.frames += 1
        return True

    def advance(self) -> int | None:
        """One world step of DT_S (nothing before the first plan, or after the end) -> the index of the frame
        captured at the step's end, or None."""
        if not self.started or self.ended:
            return None
        steer, accel = control(self.car, self.plan, self.t)
        s_prev, d_prev = self.road.project(self.car.x, self.car.y, self.s_ego)
        self.car = step(self.car, steer, accel, DT_S)
        if self.lead_s is not None:
            self.lead_s += self.lead_speed(self.t) * DT_S
        self.k += 1
        self.t = self.k * DT_S
        end = self.events(s_prev, d_prev) or ("timeout" if self.t >= self.limit_s else None)
        if end:
            self.rec.end, self.ended = end, True
            self.record()
            return None
        if self.k % TICKS:
            return None
        index = self.k // TICKS
        self.snapshot(index)
        self.record()
        keep = min(self.latest_capture, index - 50)   # frames still in flight may be answered
        self.snapshots = {i: v for i, v in self.snapshots.items() if i >= keep}
        return index

    def result(self) -> Record:
        return self.rec
