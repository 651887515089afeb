"""One closed-loop drive: a scenario, a policy, a mode's timing -> the drive's record.

Simulated time, world step DT_S; a camera frame every CAMERA_PERIOD_S (the training drives' 10 Hz). The
first stage takes a frame as timing.py says; the policy sees the world as it was at that frame's capture
(the scene from the car's pose then) and its plan takes effect `latency` after the stage started (at the
first world step at or after). Before the first plan arrives the car follows the plan of the frame at t = 0
(every mode alike: the system is warm when the drive starts). A plan that takes effect becomes the
controller's plan (car.py) until the next one does:

- not re-timed: its ego-frame waypoints from the car's pose at that moment, its times from that moment;
- re-timed: engine/retime.retime: the waypoints placed at the frame's pose, shifted by the frame's age,
  starting at the car's current pose (a plan wholly in the past is dropped, the previous one kept).

Both resampled every RESAMPLE_S (retime's finite-difference speeds) so the controller reads the same kind
of plan. Events (geometry in the road's frame, s along / d left of the centre; car: the camera point,
EGO_FRONT_M ahead of it and EGO_REAR_M behind, 1.8 m wide; the lead: LEAD_LENGTH_M from its rear, 1.8 m
wide, on the centre): collision (boxes overlap; ends the drive), red light (the car's front crosses the stop
line while red), lane departure (the car's centre crosses a lane line; one per excursion; the distance
driven outside is recorded), route deviation (more than DEVIATION_M beyond a lane line; ends the drive),
blocked (slower than 0.1 m/s for BLOCKED_S; ends it), timeout. Completed: the car reaches the route's end.
"""

from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass, field

import numpy as np

from ..engine.retime import CurrentPose, RetimeError, retime
from ..types import Pose2D, Trajectory
from .car import CarState, Plan, control, step
from .perturb import ActionBuffer, CameraStream, Perturbations, believed_pose
from .policy import View, history_ticks
from .timing import ModeTiming
from .world import Road, Scenario, random_scenario, scene_at

DT_S = 0.02
CAMERA_PERIOD_S = 0.1
TICKS = int(round(CAMERA_PERIOD_S / DT_S))
RESAMPLE_S = 0.1
EGO_FRONT_M, EGO_REAR_M, WIDTH_M, LEAD_LENGTH_M = 2.0, 2.5, 1.8, 4.5
DEVIATION_M = 2.5
BLOCKED_S = 10.0


@dataclass
class Record:
    scenario: Scenario
    mode: str
    t: list = field(default_factory=list)        # per camera tick: time, x, y, yaw, v, s, d, lead gap
    rows: list = field(default_factory=list)
    events: dict = field(default_factory=lambda: {"collision": 0, "red_light": 0, "lane_departure": 0})
    off_lane_m: float = 0.0
    progress_m: float = 0.0
    end: str = "timeout"
    min_ttc_s: float = math.inf
    plan_ages_s: list = field(default_factory=list)
    frames: int = 0


def _ns(t: float) -> int:
    return int(round(t * 1e9))


def apply_plan(plan_ego: np.ndarray, capture: Pose2D, capture_t: float, car: Pose2D, now: float,
               retimed: bool) -> Plan | None:
    """A delivered plan (N, 5) ego frame of its capture -> the controller's world plan from `now`. car: the pose
    the system believes the car is at now."""
    origin = capture if retimed else car
    stamp = capture_t if retimed else now
    world = Trajectory(plan_ego, seq=0, stamp_ns=0, partition=0).in_map(origin)
    try:
        r = retime(world, origin, _ns(stamp), _ns(now),
                   CurrentPose(_ns(now), car.x, car.y, car.yaw), RESAMPLE_S)
    except RetimeError:
        return None
    return Plan(r.points, now, now - capture_t)


class Drive:
    def __init__(self, scenario: Scenario, policy, timing: ModeTiming, perturb: Perturbations = Perturbations()):
        self.sc, self.policy, self.timing, self.perturb = scenario, policy, timing, perturb
        self.camera = CameraStream(perturb, scenario.seed)           # burst frame drops (sim/perturb.py)
        self.actions = ActionBuffer(int(round(perturb.control_delay_s / DT_S)))
        if hasattr(policy, "start_drive"):   # e.g. a delay-aware model is told its mode's latency
            policy.start_drive(timing)
        self.road = Road(scenario)
        start = self.road.point(0.0)
        x, y = start.from_ego(0.0, scenario.start_offset_m)                   # left of the lane centre
        self.car = CarState(x, y, start.yaw, scenario.start_speed_mps)
        self.lead_s = scenario.lead.start_s if scenario.lead else None
        self.s_ego, self.t = 0.0, 0.0
        self.snapshots: dict[int, tuple] = {}        # frame index -> (time, pose, view)
        self.history_ticks = history_ticks(policy)   # past camera ticks the policy reads with a frame
        self.free_at, self.last_index = 0.0, -1
        self.pending: list[tuple] = []               # (takes effect at, plan, capture pose, capture time)
        self.rec = Record(scenario, timing.mode)
        self.slow_since = None

    def lead_speed(self, t: float) -> float:
        return self.sc.lead.speed(t) if self.sc.lead else 0.0

    def snapshot(self, index: int) -> None:
        scene = scene_at(self.road, self.sc, self.car.pose, self.car.v, self.lead_s, self.lead_speed(self.t),
                         near_s=self.s_ego)
        past = tuple(self.snapshots[i][2] for i in range(max(0, index - self.history_ticks), index)
                     if i in self.snapshots)
        past = tuple(dataclasses.replace(v, past=()) for v in past)     # one level: no chain of pasts
        view = self.camera.deliver(index, View(scene, self.car.yaw_rate, self.sc.seed, index, past))
        self.snapshots[index] = (self.t, self.believed_pose(), view)

    def believed_pose(self) -> Pose2D:
        """The pose the system believes the car is at now: the true one, plus this camera tick's localisation noise
        (sim/perturb.py; none by default)."""
        car, tick = self.car, int(round(self.t / CAMERA_PERIOD_S, 6))
        return Pose2D(*believed_pose(self.perturb, self.sc.seed, tick, car.x, car.y, car.yaw))

    def schedule(self, index: int) -> None:
        """Start every frame the first stage can take by now (index: the newest captured frame)."""
        while True:
            want = self.last_index + 1
            newest = min(index, int(math.floor(self.free_at / CAMERA_PERIOD_S + 1e-9)))
            take = max(want, newest)
            if take > index:
                return
            capture_t, pose, view = self.snapshots[take]
            start = max(self.free_at, capture_t)
            if start > self.t + 1e-9:
                return
            self.pending.append((start + self.timing.latency_s, self.policy(view), pose, capture_t))
            self.rec.frames += 1
            self.last_index, self.free_at = take, start + self.timing.period_s

    def deliver(self) -> None:
        due = [p for p in self.pending if p[0] <= self.t + 1e-9]
        self.pending = [p for p in self.pending if p[0] > self.t + 1e-9]
        for _, plan_ego, pose, capture_t in sorted(due, key=lambda p: p[0]):
            plan = apply_plan(plan_ego, pose, capture_t, self.believed_pose(), self.t, self.timing.retimed)
            if plan is not None:
                self.plan = plan
                self.rec.plan_ages_s.append(plan.age_s)

    def events(self, s_prev: float, d_prev: float) -> str | None:
        """Infractions of the step that just ended; -> why the drive ends, or None."""
        rec, sc, half = self.rec, self.sc, self.sc.width_m / 2
        s, d = self.road.project(self.car.x, self.car.y, self.s_ego)
        self.s_ego = s
        rec.progress_m = min(max(rec.progress_m, s), sc.length_m)
        if abs(d) > half:
            rec.off_lane_m += max(0.0, s - s_prev)
            if abs(d_prev) <= half:
                rec.events["lane_departure"] += 1
        if sc.light and s_prev + EGO_FRONT_M < sc.light.stop_s <= s + EGO_FRONT_M and sc.light.red(self.t):
            rec.events["red_light"] += 1
        if self.lead_s is not None and abs(d) < WIDTH_M:
            gap = self.lead_s - (s + EGO_FRONT_M)
            if gap < 0 and s - EGO_REAR_M < self.lead_s + LEAD_LENGTH_M:
                rec.events["collision"] += 1
                return "collision"
            closing = self.car.v - self.lead_speed(self.t)
            if gap >= 0 and closing > 0:
                rec.min_ttc_s = min(rec.min_ttc_s, gap / closing)
        if abs(d) > half + DEVIATION_M:
            return "route_deviation"
        self.slow_since = None if self.car.v > 0.1 else (self.slow_since if self.slow_since is not None else self.t)
        if self.slow_since is not None and self.t - self.slow_since > BLOCKED_S:
            return "blocked"
        return "completed" if s >= sc.length_m else None

    def record(self) -> None:
        gap = math.nan if self.lead_s is None else self.lead_s - self.s_ego - EGO_FRONT_M
        c = self.car
        self.rec.rows.append((self.t, c.x, c.y, c.yaw, c.v, self.s_ego, gap))

    def run(self, max_time_s: float | None = None) -> Record:
        limit = max_time_s or 2.0 * self.sc.length_m / self.sc.start_speed_mps + 20.0
        self.snapshot(0)
        capture_t, pose, view = self.snapshots[0]
        self.plan = apply_plan(self.policy(view), pose, capture_t, self.believed_pose(), 0.0, False)   # warm start
        for k in range(int(round(limit / DT_S)) + 1):
            self.t = k * DT_S
            index = k // TICKS
            if k % TICKS == 0:
                if index:
                    self.snapshot(index)
                self.record()
                self.snapshots = {i: v for i, v in self.snapshots.items()
                                  if i >= min(self.last_index, index) - self.history_ticks}
            self.schedule(index)
            self.deliver()
            steer, accel = self.actions.through(control(self.car, self.plan, self.t))
            s_prev, d_prev = self.road.project(self.car.x, self.car.y, self.s_ego)
            self.car = step(self.car, steer, accel, DT_S)
            if self.lead_s is not None:
                self.lead_s += self.lead_speed(self.t) * DT_S
            self.t = (k + 1) * DT_S
            end = self.events(s_prev, d_prev)
            if end:
                self.rec.end = end
                self.record()
                return self.rec
        return self.rec


def drive_scenario(seed: int, policy, timing: ModeTiming, lights: bool = False,
                   scenario: Scenario | None = None, perturb: Perturbations = Perturbations()) -> Record:
    return Drive(scenario or random_scenario(seed, lights=lights), policy, timing, perturb).run()
