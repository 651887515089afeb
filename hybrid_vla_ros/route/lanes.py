"""A lanelet2 map as plain data (ROS-free): each lanelet's centreline in the map frame, its Autoware
`turn_direction`, and its neighbours (successors, left, right) from lanelet2's routing graph.

Map frame. Autoware's maps carry `local_x` / `local_y` tags on every node: the map frame's metres (Autoware's
map projector "local"; MGRS maps write them too), the frame of the route's goal pose and of the odometry.
They are used whenever every point of the map has both. Otherwise the nodes' lat/lon are projected with
lanelet2's UtmProjector from an origin (lat, lon) that must be the one the map frame was made from (Autoware's
`map_origin`); a map loaded from lanelet2's binary format keeps the coordinates it was written with.

Centrelines are computed here from the two bounds (each resampled to the same number of points at equal arc
length fractions, then averaged), so that they follow the chosen coordinates; lanelet2's own centreline and
spatial index (built from the projected coordinates) are not used.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from ..errors import ConfigError, expect
from .geometry import arc_lengths, resample
from .lanelet2_raw import has_local_xy, raw_lanes

TURN_DIRECTIONS = ("left", "right", "straight")   # Autoware's lanelet attribute turn_direction (intersections)
CENTERLINE_STEP_M = 1.0                            # centreline points at most this far apart


@dataclass(frozen=True)
class Lane:
    """One lanelet. centerline: (N, 2) float64 map-frame x, y in the driving direction, N >= 2."""
    id: int
    centerline: np.ndarray
    turn_direction: str = ""        # one of TURN_DIRECTIONS, or "" when the lanelet has none
    successors: tuple = ()          # lanelet ids that follow it
    lefts: tuple = ()               # lanelets beside it on the left (lane change allowed or not)
    rights: tuple = ()

    @property
    def length(self) -> float:
        return float(arc_lengths(self.centerline)[-1])


@dataclass
class LaneMap:
    lanes: dict = field(default_factory=dict)   # lanelet id -> Lane
    frame: str = ""                             # how the map frame was made (local_x/local_y, projected, binary)


def _lanelet2():
    try:
        import lanelet2  # noqa: F401  (the python bindings register io, projection, routing)
        from lanelet2 import io, projection, routing, traffic_rules
    except ImportError as exc:
        raise ConfigError(f"lanelet2 is not importable ({exc}): pip install lanelet2 (requirements.txt), or "
                          f"the distro's ros-<distro>-lanelet2") from exc
    return io, projection, routing, traffic_rules


def load_map(path: str | Path, origin: tuple[float, float] = (0.0, 0.0)) -> LaneMap:
    """A lanelet2 map file (.osm; .bin: lanelet2's binary format) -> LaneMap. origin: (lat, lon) of the map
    frame, used only for an .osm whose nodes lack local_x / local_y."""
    path = Path(path)
    expect(path.is_file(), ConfigError, f"map_path '{path}': no such file")
    io, projection, _, _ = _lanelet2()
    try:
        if path.suffix == ".bin":
            return from_lanelet2(io.load(str(path)), "lanelet2 binary")
        ll_map = io.load(str(path), projection.MercatorProjector(io.Origin(0.0, 0.0)))  # never fails; unused
        if has_local_xy(ll_map):
            return from_lanelet2(ll_map, "local_x/local_y")
        ll_map = io.load(str(path), projection.UtmProjector(io.Origin(*origin)))
    except RuntimeError as exc:   # lanelet2's ParseError and friends: one line per primitive, the first few told
        lines = str(exc).splitlines()
        raise ConfigError(f"map_path '{path}': lanelet2 cannot load it with origin {tuple(origin)} (the map "
                          f"origin parameters): {' '.join(lines[:4])} ({len(lines)} lines)") from None
    return from_lanelet2(ll_map, f"UTM projected from origin {tuple(origin)}")


def from_lanelet2(ll_map, frame: str) -> LaneMap:
    """A loaded lanelet2 LaneletMap -> LaneMap (lanelet2_raw.py reads it; from_raw builds the lanes)."""
    return from_raw(raw_lanes(ll_map), frame)


def _centerline(left: np.ndarray, right: np.ndarray) -> np.ndarray:
    """(N, 2) the middle of a lanelet's bounds (L, 2) and (R, 2), points at most CENTERLINE_STEP_M apart."""
    longest = max(arc_lengths(left)[-1], arc_lengths(right)[-1])
    n = max(2, len(left), len(right), int(math.ceil(longest / CENTERLINE_STEP_M - 1e-6)) + 1)
    return 0.5 * (resample(left, n) + resample(right, n))                            # (n, 2)


def _bound(lane: dict, side: str) -> np.ndarray:
    """(K, 2) float64 one bound of a raw lanelet; ConfigError unless it has >= 2 points, all finite."""
    points = np.asarray(lane[side], dtype=np.float64).reshape(-1, 2)
    expect(len(points) >= 2 and bool(np.isfinite(points).all()), ConfigError,
           f"lanelet {lane['id']}: its {side} bound needs at least 2 points, all finite (has {len(points)}"
           f"{'' if np.isfinite(points).all() else ', some not finite'})")
    return points


def from_raw(raw: dict, frame: str) -> LaneMap:
    """lanelet2_raw.raw_lanes' lists -> LaneMap (frame: how the points were made, unless local_x/local_y)."""
    lanes = {}
    for lane in raw["lanes"]:
        turn = lane["turn"] if lane["turn"] in TURN_DIRECTIONS else ""
        lanes[lane["id"]] = Lane(lane["id"], _centerline(_bound(lane, "left"), _bound(lane, "right")), turn,
                                 tuple(lane["successors"]), tuple(lane["lefts"]), tuple(lane["rights"]))
    return LaneMap(lanes, "local_x/local_y" if raw["local"] else frame)
