"""Polyline helpers in the map frame (ROS-free, numpy): projection, arc length, points ahead (the ego frame:
types.Pose2D.to_ego)."""

from __future__ import annotations

import math

import numpy as np


def arc_lengths(line: np.ndarray) -> np.ndarray:
    """(N, 2) polyline -> (N,) arc length at each vertex, from 0."""
    return np.concatenate([[0.0], np.cumsum(np.hypot(*np.diff(line, axis=0).T))])


def resample(line: np.ndarray, n: int) -> np.ndarray:
    """(M, 2) polyline -> (n, 2) points at equal fractions of its arc length."""
    s = arc_lengths(line)                                        # (M,)
    t = np.linspace(0.0, s[-1], n)                               # (n,)
    return np.stack([np.interp(t, s, line[:, 0]), np.interp(t, s, line[:, 1])], axis=1)


def project(line: np.ndarray, xy) -> tuple[float, float]:
    """The point of the (N, 2) polyline nearest `xy` -> (its arc length from the start, its distance)."""
    p = np.asarray(xy, dtype=np.float64)                         # (2,)
    a, ab = line[:-1], np.diff(line, axis=0)                     # (N-1, 2) each
    length2 = (ab ** 2).sum(axis=1)                              # (N-1,)
    t = np.clip(((p - a) * ab).sum(axis=1) / np.maximum(length2, 1e-12), 0.0, 1.0)
    dist = np.hypot(*(a + t[:, None] * ab - p).T)                # (N-1,)
    i = int(np.argmin(dist))
    return float(arc_lengths(line)[i] + t[i] * math.sqrt(length2[i])), float(dist[i])


def cut(line: np.ndarray, s0: float, s1: float) -> np.ndarray:
    """The part of the (N, 2) polyline between arc lengths s0 <= s1 -> (K, 2), K >= 2."""
    s = arc_lengths(line)
    s0, s1 = float(np.clip(s0, 0.0, s[-1])), float(np.clip(s1, 0.0, s[-1]))
    inner = line[(s > s0) & (s < s1)]
    return np.vstack([point_at(line, s0), inner, point_at(line, max(s0, s1))])


def point_at(line: np.ndarray, s: float) -> np.ndarray:
    """(2,) the point at arc length s of the (N, 2) polyline (clamped to its ends)."""
    arc = arc_lengths(line)
    return np.array([np.interp(s, arc, line[:, 0]), np.interp(s, arc, line[:, 1])])


def heading_change(line: np.ndarray) -> float:
    """Radians the (N, 2) polyline turns from its first segment to its last (left positive, in (-pi, pi])."""
    first, last = line[1] - line[0], line[-1] - line[-2]
    return math.remainder(math.atan2(last[1], last[0]) - math.atan2(first[1], first[0]), 2.0 * math.pi)
