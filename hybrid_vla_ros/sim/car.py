"""The ego: a kinematic bicycle driven by a stated tracking controller on the newest delivered plan.

Car (reference point: the camera, where the model's waypoints start): x' = v cos(yaw), y' = v sin(yaw),
yaw' = v tan(delta) / WHEELBASE_M, v' = a; steering |delta| <= MAX_STEER_RAD with a steering rate limit,
acceleration in ACCEL_LIMITS_MPS2, v >= 0 (explicit Euler at the world's step).

Controller, on a plan in world coordinates (M, 5): x, y, heading, speed, time from the plan's start t0:
- lateral: pure pursuit. Lookahead Ld = max(LOOKAHEAD_MIN_M, LOOKAHEAD_S x v) along the plan's polyline from
  the point nearest the car (beyond its end: straight on along its last heading); curvature 2 y_l / Ld^2 of
  the lookahead point's lateral offset y_l in the car frame; delta = atan(curvature x wheelbase).
- longitudinal: a P-controller on the plan's speed profile: a = SPEED_GAIN x (v_ref - v), v_ref the plan's
  speed at plan time (t - t0 + SPEED_PREVIEW_S) (its last speed beyond the horizon), clipped to the limits;
  the preview 1 / SPEED_GAIN makes the loop follow a speed ramp (a braking plan) without a steady lag.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, replace

import numpy as np

from ..types import Pose2D

WHEELBASE_M = 2.7
MAX_STEER_RAD = 0.6
STEER_RATE_RPS = 1.0
ACCEL_LIMITS_MPS2 = (-6.0, 2.5)     # the car's: the controller's P-term is clipped to them
LOOKAHEAD_MIN_M = 4.0
LOOKAHEAD_S = 1.0
SPEED_GAIN = 2.0                    # 1/s
SPEED_PREVIEW_S = 1.0 / SPEED_GAIN  # a preview of 1/gain: a ramp in the reference is followed without lag


@dataclass(frozen=True)
class CarState:
    x: float
    y: float
    yaw: float
    v: float
    steer: float = 0.0
    accel: float = 0.0

    @property
    def pose(self) -> Pose2D:
        return Pose2D(self.x, self.y, self.yaw)

    @property
    def yaw_rate(self) -> float:
        return self.v * math.tan(self.steer) / WHEELBASE_M


@dataclass
class Plan:
    points: np.ndarray    # (M, 5) world x, y, heading, speed, time from t0 (s)
    t0: float             # world time of the plan's time 0
    age_s: float          # how old its camera frame was when it took effect


def step(car: CarState, steer_cmd: float, accel_cmd: float, dt: float) -> CarState:
    """One explicit Euler step of the kinematic bicycle."""
    steer = car.steer + float(np.clip(np.clip(steer_cmd, -MAX_STEER_RAD, MAX_STEER_RAD) - car.steer,
                                      -STEER_RATE_RPS * dt, STEER_RATE_RPS * dt))
    accel = float(np.clip(accel_cmd, *ACCEL_LIMITS_MPS2))
    v = max(0.0, car.v + accel * dt)
    if v == 0.0 and car.v == 0.0:
        accel = 0.0
    yaw = car.yaw + car.v * math.tan(steer) / WHEELBASE_M * dt
    return replace(car, x=car.x + car.v * math.cos(car.yaw) * dt, y=car.y + car.v * math.sin(car.yaw) * dt,
                   yaw=yaw, v=v, steer=steer, accel=accel)


def lookahead_point(xy: np.ndarray, heading_end: float, car: CarState, distance: float) -> np.ndarray:
    """The point `distance` along the plan's polyline xy (M, 2) from its point nearest the car. (2,)"""
    i = int(np.argmin(np.hypot(xy[:, 0] - car.x, xy[:, 1] - car.y)))
    path = xy[i:]                                                                    # (K, 2)
    seg = np.hypot(*np.diff(path, axis=0).T) if len(path) > 1 else np.zeros(0)       # (K - 1,)
    cum = np.concatenate([[0.0], np.cumsum(seg)])                                    # (K,)
    start = np.hypot(path[0, 0] - car.x, path[0, 1] - car.y)
    want = max(distance - start, 0.0)
    if want <= cum[-1]:
        return np.array([np.interp(want, cum, path[:, 0]), np.interp(want, cum, path[:, 1])])
    extra = want - cum[-1]
    return path[-1] + extra * np.array([math.cos(heading_end), math.sin(heading_end)])


def control(car: CarState, plan: Plan, t: float) -> tuple[float, float]:
    """Pure pursuit + speed P-control on `plan` at world time t -> (steering angle rad, acceleration m/s^2)."""
    pts = plan.points
    ld = max(LOOKAHEAD_MIN_M, LOOKAHEAD_S * car.v)
    target = lookahead_point(pts[:, :2], float(pts[-1, 2]), car, ld)
    dx, dy = target[0] - car.x, target[1] - car.y
    _, lateral = car.pose.to_ego(target[0], target[1])                     # left of the car, in its frame
    dist2 = max(dx * dx + dy * dy, 1e-6)
    steer = math.atan(2.0 * lateral / dist2 * WHEELBASE_M)
    v_ref = float(np.interp(t - plan.t0 + SPEED_PREVIEW_S, pts[:, 4], pts[:, 3]))
    return steer, SPEED_GAIN * (max(v_ref, 0.0) - car.v)
