"""What deployment does to a driving system beside its compute time, after Bench2Drive-Robust's three kinds
(Zhang et al. 2026, github.com/Thinklab-SJTU/Bench2Drive-Robust: cached burst frame drops, GPS localisation
noise, compute-to-control latency through a FIFO action buffer), as options of the world. All off by default:
the world the tables before them drove.

- Burst frame drops: at each camera tick a burst starts with probability `burst_probability`; for its
  `burst_frames` ticks the camera delivers the last picture it delivered before (cached: the stamp, and the ego's
  speed and yaw rate from odometry, are the tick's; the picture is not), as their camera-stream failure does.
- Localisation noise: the pose the system believes, at each camera tick, is the car's true pose plus Gaussian
  noise (`localisation_noise_m` per axis, `localisation_noise_rad` in heading): the pose a frame is placed at
  (re-timing) and the pose a plan is applied from. The controller then tracks that plan with the true pose.
- Control delay: the controller's commands (steer, acceleration) reach the car `control_delay_s` later, through a
  FIFO of that many world steps (their action buffer), filled with the first command at the start.

Every draw is seeded by (scenario seed, camera tick, kind): a drive is deterministic, and two modes of one scenario
meet the same drops and the same noise at the same ticks.
"""

from __future__ import annotations

import dataclasses
from collections import deque
from dataclasses import dataclass

import numpy as np

from ..errors import ConfigError, expect


@dataclass(frozen=True)
class Perturbations:
    burst_probability: float = 0.0
    burst_frames: int = 5
    localisation_noise_m: float = 0.0
    localisation_noise_rad: float = 0.0
    control_delay_s: float = 0.0

    def __post_init__(self):
        expect(0.0 <= self.burst_probability <= 1.0, ConfigError,
               f"burst_probability={self.burst_probability}: expected 0..1 (a burst's start, per camera frame)")
        expect(isinstance(self.burst_frames, int) and self.burst_frames >= 1, ConfigError,
               f"burst_frames={self.burst_frames!r}: expected >= 1 camera frames")
        for name in ("localisation_noise_m", "localisation_noise_rad", "control_delay_s"):
            value = getattr(self, name)
            expect(np.isfinite(value) and 0.0 <= value <= (2.0 if name == "control_delay_s" else 10.0), ConfigError,
                   f"{name}={value}: expected 0..{2.0 if name == 'control_delay_s' else 10.0}")

    @property
    def active(self) -> bool:
        return bool(self.burst_probability or self.localisation_noise_m or self.localisation_noise_rad
                    or self.control_delay_s)

    def describe(self) -> str:
        if not self.active:
            return "none"
        return (f"bursts {self.burst_probability:g}/frame x {self.burst_frames} frames, localisation noise "
                f"{self.localisation_noise_m:g} m / {self.localisation_noise_rad:g} rad, control delay "
                f"{self.control_delay_s * 1e3:g} ms")


def _rng(seed: int, tick: int, kind: int) -> np.random.Generator:
    return np.random.default_rng([seed, tick, kind])


class CameraStream:
    """What the camera delivers at each tick: the world's view, or during a burst the tick's view showing the last
    picture delivered (sim/policy.View.shown)."""

    def __init__(self, p: Perturbations, seed: int):
        self.p, self.seed = p, seed
        self.burst_left, self.last, self.dropped = 0, None, 0   # last: the (scene, tick) of the last picture

    def deliver(self, tick: int, view):
        if self.burst_left == 0 and tick and self.p.burst_probability and \
                _rng(self.seed, tick, 1).random() < self.p.burst_probability:
            self.burst_left = self.p.burst_frames
        if self.burst_left and self.last is not None:
            self.burst_left -= 1
            self.dropped += 1
            return dataclasses.replace(view, shown=self.last)
        self.burst_left = 0
        self.last = view.picture
        return view


def believed_pose(p: Perturbations, seed: int, tick: int, x: float, y: float, yaw: float) -> tuple:
    """The pose the system believes at a camera tick: the true one plus that tick's localisation noise."""
    if not (p.localisation_noise_m or p.localisation_noise_rad):
        return x, y, yaw
    dx, dy, dyaw = _rng(seed, tick, 2).normal(size=3)
    return x + p.localisation_noise_m * dx, y + p.localisation_noise_m * dy, yaw + p.localisation_noise_rad * dyaw


class ActionBuffer:
    """The controller's commands reach the car `steps` world steps later (FIFO; steps 0: at once)."""

    def __init__(self, steps: int):
        self.steps, self.queue = steps, deque()

    def through(self, command: tuple) -> tuple:
        if not self.steps:
            return command
        if not self.queue:
            self.queue.extend([command] * self.steps)
        self.queue.append(command)
        return self.queue.popleft()
