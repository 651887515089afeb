"""Bench2Drive-like metrics of closed-loop drives (loop.Record).

Per route (CARLA leaderboard definitions, which Bench2Drive uses):
- route completion R = (progress along the route - distance driven outside the lane) / route length, in
  [0, 1] (the leaderboard subtracts the share of the route driven off the lanes from the completion);
- infraction penalty P = 0.60 ^ vehicle collisions x 0.70 ^ red lights run (the leaderboard's coefficients:
  pedestrian 0.50, vehicle 0.60, static 0.65, red light 0.70, stop sign 0.80); a lane departure carries no
  factor (it costs completion, as above); a drive ends at its first collision;
- driving score DS = 100 x R x P; success: the route completed with no collision, red light or lane departure
  (Bench2Drive's success rate).
Comfort (Bench2Drive's smoothness, tools/efficiency_smoothness_benchmark.py, with nuPlan's bounds): the
share of 2 s windows of 0.1 s samples in which the longitudinal acceleration stays in [-4.05, 2.40] m/s^2,
|lateral acceleration| < 4.89 m/s^2, |longitudinal jerk| < 4.13 m/s^3, |yaw rate| < 0.95 rad/s and
|yaw acceleration| < 1.93 rad/s^2 (finite differences here, no Savitzky-Golay filter); plus the mean
|longitudinal jerk|. Minimum time to collision: over the drive, gap / closing speed to the lead while the
car overlaps its lane position and closes on it (inf: never closing).
"""

from __future__ import annotations

import math

import numpy as np

from ..errors import ConfigError, expect

PENALTY = {"collision": 0.60, "red_light": 0.70}
BOUNDS = {"lon_accel": (-4.05, 2.40), "lat_accel": 4.89, "lon_jerk": 4.13, "yaw_rate": 0.95, "yaw_accel": 1.93}
WINDOW = 20     # 2 s of 0.1 s samples


def kinematics(rows: list) -> dict:
    """Per 0.1 s sample (rows: t, x, y, yaw, v, s, gap) -> lon/lat acceleration, jerk, yaw rate/acceleration."""
    a = np.array(rows, dtype=np.float64)
    if len(a) < 4:
        return {k: np.zeros(0) for k in ("lon_accel", "lat_accel", "lon_jerk", "yaw_rate", "yaw_accel")}
    t, v, yaw = a[:, 0], a[:, 4], np.unwrap(a[:, 3])
    lon = np.gradient(v, t)
    yaw_rate = np.gradient(yaw, t)
    return {"lon_accel": lon, "lat_accel": v * yaw_rate, "lon_jerk": np.gradient(lon, t), "yaw_rate": yaw_rate,
            "yaw_accel": np.gradient(yaw_rate, t)}


def smoothness(k: dict) -> float:
    """The share of 2 s windows within every comfort bound (1.0 for a drive shorter than a window)."""
    n = len(k["lon_accel"])
    ok = ((k["lon_accel"] >= BOUNDS["lon_accel"][0]) & (k["lon_accel"] <= BOUNDS["lon_accel"][1])
          & (np.abs(k["lat_accel"]) < BOUNDS["lat_accel"]) & (np.abs(k["lon_jerk"]) < BOUNDS["lon_jerk"])
          & (np.abs(k["yaw_rate"]) < BOUNDS["yaw_rate"]) & (np.abs(k["yaw_accel"]) < BOUNDS["yaw_accel"]))
    windows = [ok[i:i + WINDOW].all() for i in range(0, n - WINDOW + 1, WINDOW)]
    return float(np.mean(windows)) if windows else 1.0


def route_metrics(rec) -> dict:
    """One drive -> its completion, infractions, penalty, score, comfort, TTC."""
    length = rec.scenario.length_m
    completion = max(0.0, min(1.0, (rec.progress_m - rec.off_lane_m) / length))
    if rec.end == "completed":
        completion = max(0.0, 1.0 - rec.off_lane_m / length)
    penalty = math.prod(PENALTY[k] ** rec.events[k] for k in PENALTY)
    k = kinematics(rec.rows)
    infractions = dict(rec.events)
    return {"seed": rec.scenario.seed, "mode": rec.mode, "end": rec.end, "completion": completion,
            "penalty": penalty, "driving_score": 100.0 * completion * penalty,
            "success": rec.end == "completed" and not any(infractions.values()), "infractions": infractions,
            "route_deviation": rec.end == "route_deviation", "blocked": rec.end in ("blocked", "timeout"),
            "mean_abs_jerk": float(np.mean(np.abs(k["lon_jerk"]))) if len(k["lon_jerk"]) else 0.0,
            "smoothness": smoothness(k), "min_ttc_s": rec.min_ttc_s,
            "mean_plan_age_s": float(np.mean(rec.plan_ages_s)) if rec.plan_ages_s else None,
            "frames": rec.frames, "seconds": rec.rows[-1][0] if rec.rows else 0.0}


def aggregate(routes: list[dict]) -> dict:
    """Routes of one (profile, mode) -> the table's row: means over routes, infraction totals."""
    ttc = [r["min_ttc_s"] for r in routes]
    finite = [x for x in ttc if math.isfinite(x)]
    ages = [r["mean_plan_age_s"] for r in routes if r["mean_plan_age_s"] is not None]
    return {"routes": len(routes), "driving_score": float(np.mean([r["driving_score"] for r in routes])),
            "completion": float(np.mean([r["completion"] for r in routes])),
            "success_rate": float(np.mean([r["success"] for r in routes])),
            "collisions": sum(r["infractions"]["collision"] for r in routes),
            "red_lights": sum(r["infractions"]["red_light"] for r in routes),
            "lane_departures": sum(r["infractions"]["lane_departure"] for r in routes),
            "route_deviations": sum(r["route_deviation"] for r in routes),
            "blocked": sum(r["blocked"] for r in routes),
            "mean_abs_jerk": float(np.mean([r["mean_abs_jerk"] for r in routes])),
            "smoothness": float(np.mean([r["smoothness"] for r in routes])),
            "min_ttc_s": min(finite) if finite else math.inf,
            "median_min_ttc_s": float(np.median(finite)) if finite else math.inf,
            "mean_plan_age_s": float(np.mean(ages)) if ages else None}


BOOTSTRAP_RESAMPLES = 10_000


def paired_difference(scores: list[float], baseline: list[float], resamples: int = BOOTSTRAP_RESAMPLES,
                      seed: int = 0) -> dict:
    """Per-scenario driving scores of a row and its baseline on the same scenarios -> the mean difference and its
    95% interval by a paired bootstrap (scenarios resampled with replacement, `resamples` times, seeded), and the
    verdict the interval allows: 'better' (above 0), 'worse' (below 0) or 'as well' (0 inside)."""
    expect(len(scores) == len(baseline) >= 2, ConfigError,
           f"paired difference: {len(scores)} scores against {len(baseline)}: the same scenarios, at least 2")
    diff = np.asarray(scores, dtype=np.float64) - np.asarray(baseline, dtype=np.float64)   # (n,)
    expect(np.isfinite(diff).all(), ConfigError, "paired difference: a driving score is not finite")
    rng = np.random.default_rng(seed)
    means = diff[rng.integers(0, len(diff), size=(resamples, len(diff)))].mean(axis=1)   # (resamples,)
    low, high = np.percentile(means, [2.5, 97.5])
    verdict = "better" if low > 0 else "worse" if high < 0 else "as well"
    return {"mean": float(diff.mean()), "low": float(low), "high": float(high), "verdict": verdict,
            "scenarios": len(diff), "resamples": resamples}
