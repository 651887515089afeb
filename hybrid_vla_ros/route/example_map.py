"""A small lanelet2 map with an intersection, written with lanelet2's own API (for tests, demos and docs).

Map frame: x east, y north, metres; right-hand traffic, one eastbound road into a junction at x = 0:

    approach  x -100 .. -50: R1 (right lane, y -3.5 .. 0), L1 (left lane, y 0 .. 3.5); dashed line between
              x  -50 ..   0: R2, L2 (successors of R1, L1)
    junction  from R2's end: S  straight (to x = 20; turn_direction straight)
                             TL left, a quarter circle into the northbound lane x 10 .. 13.5 (turn_direction left)
                             TR right, a quarter circle into the southbound lane x 3.25 .. 6.75 (turn_direction right)
    exits     ES east (x 20 .. 120), EL north (y 10 .. 110), ER south (y -6.75 .. -106.75): 100 m each

Lanelets carry Autoware's tags (type lanelet, subtype road, location urban, one_way yes); nodes carry
local_x / local_y (with `local_xy`), as Autoware's maps do; lat/lon from a UTM projection at `origin`.
"""

from __future__ import annotations

import math
from pathlib import Path

from ..types import Pose2D
from .lanes import _lanelet2
from .navigate import Route

ORIGIN = (35.0, 139.0)   # (lat, lon) of the map frame's (0, 0)
LANE_W = 3.5
EXIT_M = 100.0


def _arc(centre, radius, start_deg, end_deg, fixed, point):
    """Points on a circle around centre from start_deg to end_deg (math angles), every ~1 m; the ends are the
    given shared points `fixed` (first, last)."""
    n = max(2, int(abs(math.radians(end_deg - start_deg)) * radius) + 1)
    inner = [point(centre[0] + radius * math.cos(math.radians(a)), centre[1] + radius * math.sin(math.radians(a)))
             for a in (start_deg + (end_deg - start_deg) * i / n for i in range(1, n))]
    return [fixed[0], *inner, fixed[1]]


def _build(core, local_xy: bool):
    """-> (LaneletMap, name -> lanelet id)."""
    def point(x, y):
        p = core.Point3d(core.getId(), x, y, 0.0)
        if local_xy:
            p.attributes["local_x"], p.attributes["local_y"] = f"{x:.6f}", f"{y:.6f}"
        return p

    def line(points, subtype="solid"):
        return core.LineString3d(core.getId(), points, {"type": "line_thin", "subtype": subtype})

    def lanelet(left, right, turn=""):
        attrs = {"type": "lanelet", "subtype": "road", "location": "urban", "one_way": "yes"}
        if turn:
            attrs["turn_direction"] = turn
        return core.Lanelet(core.getId(), left, right, attrs)

    grid = {(x, y): point(x, y) for x in (-100.0, -50.0, 0.0) for y in (-LANE_W, 0.0, LANE_W)}
    a0, b0 = grid[(0.0, 0.0)], grid[(0.0, -LANE_W)]                # R2's end: where the junction starts
    lanes = {}
    for name, x0, x1 in (("1", -100.0, -50.0), ("2", -50.0, 0.0)):
        middle = line([grid[(x0, 0.0)], grid[(x1, 0.0)]], "dashed")
        lanes["R" + name] = lanelet(middle, line([grid[(x0, -LANE_W)], grid[(x1, -LANE_W)]]))
        lanes["L" + name] = lanelet(line([grid[(x0, LANE_W)], grid[(x1, LANE_W)]]), middle)
    s_end = (point(20.0, 0.0), point(20.0, -LANE_W))
    lanes["S"] = lanelet(line([a0, s_end[0]]), line([b0, s_end[1]]), "straight")
    lanes["ES"] = lanelet(line([s_end[0], point(20.0 + EXIT_M, 0.0)]), line([s_end[1], point(20.0 + EXIT_M, -LANE_W)]))
    l_end = (point(10.0, 10.0), point(10.0 + LANE_W, 10.0))         # northbound lane x 10 .. 13.5
    lanes["TL"] = lanelet(line(_arc((0.0, 10.0), 10.0, -90, 0, (a0, l_end[0]), point)),
                          line(_arc((0.0, 10.0), 10.0 + LANE_W, -90, 0, (b0, l_end[1]), point)), "left")
    lanes["EL"] = lanelet(line([l_end[0], point(10.0, 10.0 + EXIT_M)]), line([l_end[1], point(13.5, 10.0 + EXIT_M)]))
    r_end = (point(6.75, -6.75), point(3.25, -6.75))                # southbound lane x 3.25 .. 6.75
    lanes["TR"] = lanelet(line(_arc((0.0, -6.75), 6.75, 90, 0, (a0, r_end[0]), point)),
                          line(_arc((0.0, -6.75), 3.25, 90, 0, (b0, r_end[1]), point)), "right")
    lanes["ER"] = lanelet(line([r_end[0], point(6.75, -6.75 - EXIT_M)]),
                          line([r_end[1], point(3.25, -6.75 - EXIT_M)]))
    ll_map = core.LaneletMap()
    for ll in lanes.values():
        ll_map.add(ll)
    return ll_map, {name: ll.id for name, ll in lanes.items()}


def write_intersection_map(path: str | Path, local_xy: bool = True, origin: tuple = ORIGIN) -> dict:
    """Write the map to `path` (.osm, or .bin: lanelet2's binary format) -> lanelet name -> id."""
    import lanelet2.core as core
    io, projection, _, _ = _lanelet2()
    ll_map, ids = _build(core, local_xy)
    io.write(str(path), ll_map, projection.UtmProjector(io.Origin(*origin)))
    return ids


EXITS = {"left": ("TL", "EL"), "right": ("TR", "ER"), "straight": ("S", "ES")}


def intersection_route(ids: dict, turn: str, goal_m: float = 80.0, start_lane: str = "R") -> Route:
    """A route from the approach's first segment (preferred lane R or L) through the junction (`turn`: left,
    right, straight) to a goal `goal_m` into the exit road; from L it changes to R on the way (before R2)."""
    junction, exit_road = EXITS[turn]
    segments = ((ids[start_lane + "1"], (ids["R1"], ids["L1"])), (ids["R2"], (ids["R2"], ids["L2"])),
                (ids[junction], (ids[junction],)), (ids[exit_road], (ids[exit_road],)))
    goal = {"left": Pose2D(11.75, 10.0 + goal_m, math.pi / 2), "right": Pose2D(5.0, -6.75 - goal_m, -math.pi / 2),
            "straight": Pose2D(20.0 + goal_m, -LANE_W / 2, 0.0)}[turn]
    return Route(segments, goal)
