"""The closed-loop world, in world coordinates (x east, y north, metres; yaw counter-clockwise from x).

Road: a lane whose centre line has the curvature kappa(s) = sum of three sinusoids in the arc length s (road.py's
curves: the drives' ranges and formula, so the model sees curves of its training distribution),
integrated into a polyline every ROAD_STEP_M; the lane `width_m` wide. A lead vehicle drives on the lane
centre with its own speed profile: cruise, brake at `brake_mps2` to `slow_mps` at `brake_at_s`, hold
`hold_s`, accelerate back at 1.5 m/s^2. An optional traffic light: a stop line at `light_s`, red in
[red_from_s, red_to_s). Each camera frame is road.render's picture of the RoadScene seen from the ego's pose:
the centre line in the ego frame fitted by the renderer's parabola (offset, heading, curvature) over the
next FIT_AHEAD_M, the lead's forward distance, the drive's light/fog/noise.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from ..types import Pose2D
from .road import STANDSTILL_GAP_M, TIME_GAP_S, RoadScene, draw_curves, wave_curvature

ROAD_STEP_M = 0.5
FIT_AHEAD_M = 45.0
ROAD_EXTRA_M = 120.0        # road beyond the route's end (lookahead, the lead driving on)
LEAD_ACCEL_MPS2 = 1.5


@dataclass(frozen=True)
class Lead:
    start_s: float          # arc length of its rear at t = 0
    cruise_mps: float
    brake_at_s: float       # time it starts braking
    brake_mps2: float       # > 0
    slow_mps: float
    hold_s: float

    def speed(self, t: float) -> float:
        """Its speed profile (m/s) at time t: cruise, brake, hold, accelerate back."""
        if t < self.brake_at_s:
            return self.cruise_mps
        braking = (self.cruise_mps - self.slow_mps) / self.brake_mps2
        if t < self.brake_at_s + braking:
            return self.cruise_mps - self.brake_mps2 * (t - self.brake_at_s)
        back = t - self.brake_at_s - braking - self.hold_s
        return self.slow_mps if back < 0 else min(self.cruise_mps, self.slow_mps + LEAD_ACCEL_MPS2 * back)


@dataclass(frozen=True)
class Light:
    stop_s: float           # the stop line's arc length
    red_from_s: float
    red_to_s: float

    def red(self, t: float) -> bool:
        return self.red_from_s <= t < self.red_to_s


@dataclass(frozen=True)
class Scenario:
    seed: int
    length_m: float                      # the route: arc length 0 .. length_m
    width_m: float
    amps: tuple[float, ...]              # curvature waves: kappa(s) = sum a sin(2 pi s / p + phase)
    periods_m: tuple[float, ...]
    phases: tuple[float, ...]
    start_speed_mps: float
    start_offset_m: float                # ego start, left of the centre (m)
    lead: Lead | None
    light: Light | None
    look: tuple[float, float, float]     # brightness, fog_m, noise (as road.random_scene draws them)


class Road:
    """The lane centre as a polyline: s, x, y, theta (N,) every ROAD_STEP_M, from s = -20 m."""

    def __init__(self, sc: Scenario):
        self.width_m = sc.width_m
        s = np.arange(-20.0, sc.length_m + ROAD_EXTRA_M, ROAD_STEP_M)                   # (N,)
        kappa = np.where(s < 0, 0.0, wave_curvature(np.maximum(s, 0), sc.amps, sc.periods_m, sc.phases))
        theta = np.concatenate([[0.0], np.cumsum(kappa[:-1] * ROAD_STEP_M)])            # straight until s = 0
        theta -= np.interp(0.0, s, theta)
        x = np.concatenate([[0.0], np.cumsum(np.cos(theta[:-1]) * ROAD_STEP_M)])
        y = np.concatenate([[0.0], np.cumsum(np.sin(theta[:-1]) * ROAD_STEP_M)])
        self.s, self.theta = s, theta
        self.x, self.y = x - np.interp(0.0, s, x), y - np.interp(0.0, s, y)            # s = 0 at the origin

    def point(self, s: float) -> Pose2D:
        """The centre line at arc length s, heading along the lane."""
        return Pose2D(float(np.interp(s, self.s, self.x)), float(np.interp(s, self.s, self.y)),
                    float(np.interp(s, self.s, self.theta)))

    def project(self, x: float, y: float, near_s: float | None = None) -> tuple[float, float]:
        """A world point -> (arc length s, lateral d, left positive) against the nearest segment (of those
        within 30 m of arc length of near_s, if given: a road that curls back is not mistaken for itself)."""
        d2 = (self.x - x) ** 2 + (self.y - y) ** 2
        if near_s is not None:
            d2 = np.where(np.abs(self.s - near_s) < 30.0, d2, np.inf)
        i = int(np.argmin(d2))
        i = min(max(i, 0), len(self.s) - 2)
        c, s_ = math.cos(self.theta[i]), math.sin(self.theta[i])           # onto the segment: along it, left of it
        dx, dy = x - self.x[i], y - self.y[i]
        return float(self.s[i] + dx * c + dy * s_), float(-dx * s_ + dy * c)


def scene_at(road: Road, sc: Scenario, pose: Pose2D, speed: float, lead_s: float | None, lead_speed: float,
             near_s: float | None = None) -> RoadScene:
    """What the cameras see from `pose`: the renderer's lane parabola fitted to the centre line ahead."""
    s0, _ = road.project(pose.x, pose.y, near_s)
    ahead = np.arange(s0 - 2.0, s0 + FIT_AHEAD_M, 1.0)                                 # (K,)
    forward, left = pose.to_ego(np.interp(ahead, road.s, road.x), np.interp(ahead, road.s, road.y))   # (K,) each
    c2, c1, c0 = np.polyfit(forward, left, 2)                                          # y = c0 + c1 x + c2 x^2
    lead_m = None
    if lead_s is not None and 0.0 < lead_s - s0 < 60.0:
        at = road.point(lead_s)
        lead_m = float(pose.to_ego(at.x, at.y)[0])
    brightness, fog, noise = sc.look
    return RoadScene(curvature=float(2 * c2), offset_m=float(c0), heading_rad=float(c1), width_m=sc.width_m,
                     speed_mps=speed, lead_m=lead_m if lead_m and lead_m > 1.0 else None, lead_speed_mps=lead_speed,
                     brightness=brightness, fog_m=fog, noise=noise)


def random_scenario(seed: int, lead_probability: float = 0.8, lights: bool = False,
                    length_m: float = 150.0) -> Scenario:
    """One scenario, deterministic from the seed (the road's curves: road.draw_curves, in the world's order)."""
    rng = np.random.default_rng([41, seed])
    amps, periods, phases = draw_curves(rng, order=("amp", "period", "phase"))
    start_speed = float(rng.uniform(7.0, 12.0))
    lead = None
    if rng.random() < lead_probability:
        cruise = float(rng.uniform(0.6, 1.0) * start_speed)      # a gap the drives' driver keeps, plus 0..15 m
        lead = Lead(start_s=float(STANDSTILL_GAP_M + TIME_GAP_S * start_speed + rng.uniform(0.0, 15.0)),
                    cruise_mps=cruise, brake_at_s=float(rng.uniform(2.0, 8.0)), brake_mps2=float(rng.uniform(1.5, 3.0)),
                    slow_mps=float(rng.uniform(0.0, 0.5 * cruise)), hold_s=float(rng.uniform(1.0, 4.0)))
    light = None
    if lights:
        stop = float(rng.uniform(0.4, 0.7) * length_m)
        arrive = stop / start_speed
        red_from = float(arrive + rng.uniform(-3.0, 1.0))
        light = Light(stop, red_from, red_from + float(rng.uniform(3.0, 6.0)))
    look = (float(rng.uniform(0.6, 1.3)), float(rng.choice([1e4, rng.uniform(40.0, 120.0)])), float(rng.uniform(0, 8)))
    return Scenario(seed, length_m, float(rng.uniform(3.0, 3.8)), tuple(map(float, amps)), tuple(map(float, periods)),
                    tuple(map(float, phases)), start_speed, float(rng.normal(0, 0.2)), lead, light, look)
