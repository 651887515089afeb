"""Synthetic drives: camera images of a road and the ego vehicle's ground-truth future, deterministic from a
seed. ROS-free (ros/demo.py writes them as rosbag2 drives).

Road, in the ego frame (x forward, y left, metres): the lane centre is the usual lane-model parabola
y_c(x) = offset + heading * x + curvature * x^2 / 2, the lane `width` wide, with a line on each edge. A lead
vehicle (a box 1.8 m wide, 1.5 m high) may sit in the lane `lead_m` ahead. Cameras are pinholes 1.4 m above
the road, each turned by its yaw; light, fog and sensor noise vary per drive.

Ground truth: a kinematic car from the ego pose follows the lane centre by pure pursuit; its speed tracks
the curve's comfortable speed (lateral acceleration <= 2 m/s^2) and a 1.5 s gap to the lead vehicle, with
acceleration limits. The waypoints are its positions every `dt_s` (what the model's action head predicts).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from ..types import Pose2D

CAMERA_HEIGHT_M = 1.4
LANE_LINE_M = 0.15
LEAD_SIZE_M = (1.8, 1.5)        # width, height
MAX_SPEED_MPS = 20.0
LATERAL_ACCEL_MPS2 = 2.0
ACCEL_LIMITS_MPS2 = (-4.0, 1.5)
TIME_GAP_S = 1.5
STANDSTILL_GAP_M = 4.0
# The road's curves, the drives' and the closed-loop world's (world.py): kappa(s) = sum of CURVE_WAVES sinusoids
# a sin(2 pi s / period + phase) in the arc length s, each parameter drawn uniform in its range.
CURVE_WAVES = 3
CURVE_RANGES = {"amp": (0.002, 0.009), "period": (60.0, 200.0), "phase": (0.0, 2 * math.pi)}   # 1/m, m, rad


@dataclass(frozen=True)
class RoadScene:
    curvature: float        # 1/m, left positive
    offset_m: float         # lane centre's y at the ego (ego right of centre: > 0)
    heading_rad: float      # lane direction relative to the ego's heading
    width_m: float
    speed_mps: float        # the ego's current speed
    lead_m: float | None    # distance to a lead vehicle in the lane (None: free road)
    lead_speed_mps: float
    brightness: float       # 0.6 .. 1.3
    fog_m: float            # visibility scale (large: clear)
    noise: float            # sensor noise std (0..255 scale)

    def centre_y(self, x: np.ndarray) -> np.ndarray:
        return self.offset_m + self.heading_rad * x + 0.5 * self.curvature * x * x


def random_scene(rng: np.random.Generator) -> RoadScene:
    """One scene drawn from the drive distribution (each field independent)."""
    lead = rng.random() < 0.5
    return RoadScene(curvature=float(rng.uniform(-0.02, 0.02)), offset_m=float(rng.normal(0, 0.3)),
                     heading_rad=float(rng.normal(0, 0.03)), width_m=float(rng.uniform(3.0, 3.8)),
                     speed_mps=float(rng.uniform(4.0, 16.0)), lead_m=float(rng.uniform(8.0, 45.0)) if lead else None,
                     lead_speed_mps=float(rng.uniform(0.0, 12.0)), brightness=float(rng.uniform(0.6, 1.3)),
                     fog_m=float(rng.choice([1e4, rng.uniform(40.0, 120.0)])), noise=float(rng.uniform(0.0, 8.0)))


# ---- drawing ---------------------------------------------------------------------------------------------

def render(scene: RoadScene, height: int, width: int, yaw_rad: float = 0.0, fov_rad: float = math.radians(90),
           rng: np.random.Generator | None = None) -> np.ndarray:
    """The scene from a camera turned by yaw_rad (left positive) -> (height, width, 3) uint8 rgb."""
    focal = (width / 2) / math.tan(fov_rad / 2)
    rows = np.arange(height, dtype=np.float64)[:, None] + 0.5
    cols = np.arange(width, dtype=np.float64)[None, :] + 0.5
    horizon = height / 2
    below = np.maximum(rows - horizon, 1e-3)
    # ray through each pixel, camera frame (forward, left, up) -> ego frame by the yaw
    fwd, left = np.ones_like(cols), -(cols - width / 2) / focal
    dx, dy = Pose2D(0.0, 0.0, yaw_rad).from_ego(fwd, left)
    t = CAMERA_HEIGHT_M * focal / below                                          # ground distance along the ray
    x, y = t * dx, t * dy                                                        # (H, W) ground points
    ground = (rows > horizon) & (x > 0.5)
    lateral = np.abs(y - scene.centre_y(x))
    road = ground & (lateral < scene.width_m / 2 + LANE_LINE_M)
    line = road & (np.abs(lateral - scene.width_m / 2) < LANE_LINE_M / 2 + 0.01 * x)  # lines stay visible far away
    sky = np.linspace(1.0, 0.75, height)[:, None, None] * np.array([150, 185, 230])
    image = np.broadcast_to(sky, (height, width, 3)).copy()
    image[ground] = (95, 120, 70)                                                # verge
    image[road] = (70, 70, 75)                                                   # asphalt
    image[line] = (235, 235, 225)
    distance = np.where(ground, x, 1e4)
    if scene.lead_m is not None:
        image, distance = _draw_lead(image, distance, scene, focal, horizon, yaw_rad, width)
    fog = 1.0 - np.exp(-distance / scene.fog_m)[..., None]
    image = image * (1 - fog) + np.array([190, 190, 195]) * fog
    image = image * scene.brightness
    if rng is not None and scene.noise > 0:
        image = image + rng.normal(0, scene.noise, image.shape)
    return np.clip(image, 0, 255).astype(np.uint8)


def project_to_image(points_xy: np.ndarray, height: int, width: int, fov_rad: float = math.radians(90)) -> np.ndarray:
    """Ground points (N, 2) x forward, y left (ego frame, metres) -> (N, 2) pixel u, v in the front camera's
    image as render() draws it (yaw 0); points less than 0.5 m ahead come back as NaN."""
    focal = (width / 2) / math.tan(fov_rad / 2)
    x, y = points_xy[:, 0], points_xy[:, 1]
    ahead = x > 0.5
    safe = np.where(ahead, x, 1.0)
    u = np.where(ahead, width / 2 - y * focal / safe, np.nan)
    v = np.where(ahead, height / 2 + CAMERA_HEIGHT_M * focal / safe, np.nan)
    return np.column_stack([u, v])


def _draw_lead(image, distance, scene: RoadScene, focal, horizon, yaw_rad, width):
    """The lead vehicle as a dark box standing on the lane centre, occluding what lies behind it."""
    x = scene.lead_m
    y = float(scene.centre_y(np.array(x)))
    fwd, left = Pose2D(0.0, 0.0, yaw_rad).to_ego(x, y)                             # into the camera frame
    if fwd < 1.0:
        return image, distance
    half_w, tall = LEAD_SIZE_M[0] / 2, LEAD_SIZE_M[1]
    u0 = int(round(width / 2 - (left + half_w) * focal / fwd))
    u1 = int(round(width / 2 - (left - half_w) * focal / fwd))
    v_bottom = int(round(horizon + CAMERA_HEIGHT_M * focal / fwd))
    v_top = int(round(horizon + (CAMERA_HEIGHT_M - tall) * focal / fwd))
    rows, cols = slice(max(v_top, 0), max(min(v_bottom, image.shape[0]), 0)), slice(max(u0, 0), max(min(u1, width), 0))
    image[rows, cols] = (40, 30, 35)
    image[rows, cols][: max(1, (v_bottom - v_top) // 5)] = (170, 30, 30)         # a red roof band: not asphalt
    distance[rows, cols] = fwd
    return image, distance


# ---- ground truth ----------------------------------------------------------------------------------------

def target_speed(scene: RoadScene, gap_m: float | None, lead_speed: float) -> float:
    curve = math.sqrt(LATERAL_ACCEL_MPS2 / max(abs(scene.curvature), 1e-6))
    speed = min(MAX_SPEED_MPS, curve)
    if gap_m is not None:
        speed = min(speed, max(0.0, lead_speed + (gap_m - STANDSTILL_GAP_M - TIME_GAP_S * lead_speed) / TIME_GAP_S))
    return speed


def ground_truth(scene: RoadScene, waypoints: int, dt_s: float, sim_dt_s: float = 0.05) -> np.ndarray:
    """(waypoints, 4): x, y (ego frame at the frame's time), heading, speed every dt_s of the rollout."""
    px = py = yaw = 0.0
    speed, lead = scene.speed_mps, scene.lead_m
    out, steps_per_point = [], int(round(dt_s / sim_dt_s))
    for step in range(1, waypoints * steps_per_point + 1):
        gap = None if lead is None else lead - px
        accel = np.clip((target_speed(scene, gap, scene.lead_speed_mps) - speed) / 1.0, *ACCEL_LIMITS_MPS2)
        speed = max(0.0, speed + accel * sim_dt_s)
        lookahead = max(4.0, 1.0 * speed)
        gx = px + lookahead * math.cos(yaw)                                       # lane point ahead (ego frame)
        gy = float(scene.centre_y(np.array(gx)))
        _, local_y = Pose2D(px, py, yaw).to_ego(gx, gy)                            # in the car's frame
        curvature = 2.0 * local_y / (lookahead * lookahead)
        yaw += speed * curvature * sim_dt_s
        px += speed * math.cos(yaw) * sim_dt_s
        py += speed * math.sin(yaw) * sim_dt_s
        if lead is not None:
            lead += scene.lead_speed_mps * sim_dt_s
        if step % steps_per_point == 0:
            out.append((px, py, yaw, speed))
    return np.array(out)


def constant_velocity(scene: RoadScene, waypoints: int, dt_s: float) -> np.ndarray:
    """The baseline: straight ahead at the current speed -> (waypoints, 2) x, y."""
    t = np.arange(1, waypoints + 1) * dt_s
    return np.column_stack([scene.speed_mps * t, np.zeros(waypoints)])


# ---- the road's curves ---------------------------------------------------------------------------------------

def draw_curves(rng: np.random.Generator, order: tuple[str, ...] = ("period", "phase", "amp")) -> tuple:
    """The curve waves -> (amplitudes, periods, phases), each (CURVE_WAVES,), drawn in `order` (a drive's order by
    default; the closed-loop world draws amp, period, phase: each seed keeps its road)."""
    drawn = {name: rng.uniform(*CURVE_RANGES[name], CURVE_WAVES) for name in order}
    return drawn["amp"], drawn["period"], drawn["phase"]


def wave_curvature(s, amps, periods_m, phases):
    """kappa (1/m) at arc length s (a float or an array) of the waves."""
    return sum(a * np.sin(2 * np.pi * s / p + ph) for a, p, ph in zip(amps, periods_m, phases))


# ---- a drive: scenes that evolve smoothly, frame by frame ---------------------------------------------------

@dataclass
class DriveFrame:
    seq: int
    scene: RoadScene
    images: list[np.ndarray]       # one per camera
    truth: np.ndarray              # (waypoints, 4): x, y, heading, speed
    yaw_rate_rps: float


CAMERA_YAWS_RAD = (0.0, 0.9, -0.9, 1.8, -1.8, math.pi)  # front, front-left, front-right, ... rear


def drive(seed: int, frames: int, cameras: int, height: int, width: int, waypoints: int, dt_s: float,
          rate_hz: float = 10.0):
    """Yields DriveFrame: one road, its curvature drifting (a sum of slow sinusoids), the ego's lane offset
    and heading error AR(1) processes, a lead vehicle that comes and goes, light and fog fixed per drive.
    Deterministic from the seed."""
    rng = np.random.default_rng(seed)
    first = random_scene(rng)
    amps, periods, phases = draw_curves(rng)
    distance, speed = 0.0, first.speed_mps
    offset, heading = first.offset_m, first.heading_rad
    lead, lead_speed = first.lead_m, first.lead_speed_mps
    lead_target = lead_speed
    for seq in range(frames):
        kappa = float(wave_curvature(distance, amps, periods, phases))
        scene = RoadScene(kappa, offset, heading, first.width_m, speed, lead, lead_speed, first.brightness,
                          first.fog_m, first.noise)
        truth = ground_truth(scene, waypoints, dt_s)
        images = [render(scene, height, width, CAMERA_YAWS_RAD[c % len(CAMERA_YAWS_RAD)], rng=rng)
                  for c in range(cameras)]
        yield DriveFrame(seq, scene, images, truth, yaw_rate_rps=float(speed * kappa))
        # advance one frame period along the rollout's first step
        step = ground_truth(scene, 1, 1.0 / rate_hz)[0]
        distance += step[0]
        # the ego's speed is not the driver's to the centimetre per second either (stationary std ~0.3 m/s), so
        # the drives show approaches a little too fast or too slow for the gap, as a closed loop makes them
        speed = max(0.0, float(step[3]) + float(rng.normal(0, 0.15)))
        # the ego wanders about the lane (stationary std 0.32 m and 0.03 rad: the first scene's spread), so the
        # drives show recoveries from where a closed loop puts the car, not only from a few centimetres
        offset = 0.95 * offset + float(rng.normal(0, 0.1))
        heading = 0.95 * heading + float(rng.normal(0, 0.0094))
        if lead is not None:
            lead += (lead_speed - speed) / rate_hz
            lead_speed, lead_target = lead_speed_step(rng, lead_speed, lead_target, rate_hz)
            if lead < 2.0 or lead > 60.0:    # kept close: the driver stops STANDSTILL_GAP_M behind a standing one
                lead = None
        elif rng.random() < 0.01:
            lead, lead_speed = float(rng.uniform(20.0, 45.0)), float(rng.uniform(2.0, 12.0))
            lead_target = lead_speed


LEAD_ACCEL_MPS2 = 2.5        # how fast a lead vehicle of a drive changes its speed
LEAD_CHANGE_PER_S = 0.3      # how often it picks a new speed (per second)


def lead_speed_step(rng: np.random.Generator, speed: float, target: float, rate_hz: float) -> tuple[float, float]:
    """One frame of the lead vehicle's speed: now and then a new target anywhere in 0..12 m/s (a stop included),
    reached at LEAD_ACCEL_MPS2, so the drives show leads that brake, as the closed-loop world's do."""
    if rng.random() < LEAD_CHANGE_PER_S / rate_hz:
        target = float(rng.uniform(0.0, 12.0))
    step = LEAD_ACCEL_MPS2 / rate_hz
    return float(speed + np.clip(target - speed, -step, step)), target
