"""Training a delay-aware model (spec.delay_aware; issue 54): a plan takes effect a delay d after its frame was
captured, and a consumer applies it from the pose the car has then. So the model is told d (its prompt's
instruction, tokenize/tokens.delay_text) and learns the ground-truth driver's plan from where that driver is at d,
its times from then: training-time real-time chunking's idea (condition on the delay; Physical Intelligence's
RTC conditions on the committed plan prefix) in its simplest form. Each training sample draws d uniformly in
[0, max_delay_s] (its own generator: the batches are the plain recipe's).
"""

from __future__ import annotations

import numpy as np

from ..errors import ConfigError, expect

PATH_DT_S = 0.1   # the fine ground-truth path a delayed target is read from


def path_points(horizon_s: float, max_delay_s: float) -> int:
    """Points of the fine path that cover a delayed horizon."""
    return int(np.ceil((horizon_s + max_delay_s) / PATH_DT_S)) + 1


def delayed_truth(path: np.ndarray, speed_mps: float, delay_s: float, waypoints: int, dt_s: float) -> np.ndarray:
    """path (M, 4): the ground-truth rollout x, y, heading, speed every PATH_DT_S from the frame (ego frame of the
    frame) -> (waypoints, 4): the rollout at delay + dt, ..., delay + N dt, in the ego frame of its pose at `delay`,
    headings relative to it (the target of a plan that takes effect `delay` after its frame)."""
    rows = np.vstack([[0.0, 0.0, 0.0, speed_mps], path])                            # (M + 1, 4) from t = 0
    t = PATH_DT_S * np.arange(len(rows))
    at = delay_s + dt_s * np.arange(1, waypoints + 1)
    expect(at[-1] <= t[-1] + 1e-9, ConfigError, f"delay {delay_s:.2f} s: its horizon {at[-1]:.2f} s lies beyond the "
                                               f"path's {t[-1]:.2f} s (road_samples' max_delay_s)")
    x0, y0, yaw0 = (np.interp(delay_s, t, rows[:, k]) for k in range(3))
    x, y, yaw, speed = (np.interp(at, t, rows[:, k]) for k in range(4))
    c, s = np.cos(yaw0), np.sin(yaw0)
    dx, dy = x - x0, y - y0
    return np.column_stack([c * dx + s * dy, -s * dx + c * dy, yaw - yaw0, speed])


def delayed_batch(samples: list, index, rng: np.random.Generator, max_delay_s: float, waypoints: int,
                  dt_s: float) -> tuple[list, np.ndarray]:
    """The batch's frames, each told a delay drawn in [0, max_delay_s], and their delayed targets (B, N, 4)."""
    import dataclasses
    delays = rng.uniform(0.0, max_delay_s, size=len(index))
    frames = [dataclasses.replace(samples[i].frame, expected_delay_s=float(d)) for i, d in zip(index, delays)]
    truths = np.stack([delayed_truth(samples[i].path, samples[i].frame.ego.speed_mps, d, waypoints, dt_s)
                       for i, d in zip(index, delays)])
    return frames, truths
