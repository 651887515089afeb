"""The route's next maneuver at the ego pose (ROS-free): Autoware's LaneletRoute as plain data + the lanelet2
map (route/lanes.py) -> Navigation (types.py): command and distance, the goal and a target point in the ego frame.

Walk. The ego is located on the route: the nearest lanelet of any segment's primitives (ties: the later
segment), within off_route_m of its centreline. From there the route's lanelets ahead are the ego's lanelet,
then each later segment's preferred lanelet, the last one cut at the goal. The first maneuver ahead is:
- a lanelet with Autoware's `turn_direction` (intersection lanelets: left / right / straight; Autoware's
  behavior_path_planner turn_signal_decider reads the same attribute) -> turn left / turn right / go straight,
  at the distance to that lanelet's start (0 while on it);
- a next lanelet that is not a successor but beside one (or follows one beside the current one): a lane change
  -> change lane left / right, at the distance to the end of the current lanelet (where it must be done);
- else a lanelet whose centreline turns more than TURN_FALLBACK_DEG -> turn left / turn right.
A maneuver further than horizon_m reads "follow lane" (distance: to that maneuver). None before the goal:
"arrive" when the goal is within horizon_m, else "follow lane" (distance: to the goal).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from ..types import Navigation, Pose2D
from .geometry import cut, heading_change, point_at, project, arc_lengths
from .lanes import LaneMap

TURN_FALLBACK_DEG = 30.0   # a lanelet without turn_direction whose centreline turns more than this is a turn
TURNS = {"left": "turn left", "right": "turn right", "straight": "go straight"}


@dataclass(frozen=True)
class Route:
    """A LaneletRoute as plain data. segments: per route segment, in driving order, (preferred lanelet id,
    every primitive's lanelet id); goal: the goal pose in the map frame."""
    segments: tuple
    goal: Pose2D

    @property
    def preferred(self) -> tuple:
        return tuple(preferred for preferred, _ in self.segments)


@dataclass(frozen=True)
class Leg:
    """One lanelet of the route ahead, from arc length s0 to s1 of its centreline; start_m: the route distance
    from the ego to s0."""
    lane_id: int
    s0: float
    s1: float
    start_m: float

    @property
    def end_m(self) -> float:
        return self.start_m + self.s1 - self.s0


def locate(lane_map: LaneMap, route: Route, pose: Pose2D, off_route_m: float):
    """-> (segment index, lanelet id, arc length of the ego on it), or None (no route lanelet within off_route_m)."""
    best = None
    for k, (preferred, primitives) in enumerate(route.segments):
        for lane_id in dict.fromkeys((preferred, *primitives)):
            lane = lane_map.lanes.get(lane_id)
            if lane is None:
                continue
            s, dist = project(lane.centerline, (pose.x, pose.y))
            key = (round(dist, 2), -k, lane_id != preferred)
            if best is None or key < best[0]:
                best = (key, k, lane_id, s)
    if best is None or best[0][0] > off_route_m:
        return None
    return best[1], best[2], best[3]


def legs_ahead(lane_map: LaneMap, route: Route, here) -> list[Leg]:
    """The route's lanelets from the ego (`here` from locate) to the goal, in order."""
    k, lane_id, s = here
    ids = [lane_id] + [p for p in route.preferred[k + 1:] if p in lane_map.lanes]
    legs, start_m = [], 0.0
    for i, lid in enumerate(ids):
        lane = lane_map.lanes[lid]
        s0 = s if i == 0 else 0.0
        s1 = project(lane.centerline, (route.goal.x, route.goal.y))[0] if i == len(ids) - 1 else lane.length
        legs.append(Leg(lid, s0, max(s0, s1), start_m))
        start_m = legs[-1].end_m
    return legs


def _lateral(lane_map: LaneMap, a: int, b: int) -> str:
    """"left" / "right" when lanelet b lies beside a, follows one beside a, or is beside one following a; else ""."""
    lanes = lane_map.lanes
    lane = lanes[a]
    for side in ("lefts", "rights"):
        beside = getattr(lane, side)
        follows_beside = [n for x in beside if x in lanes for n in lanes[x].successors]
        beside_next = [n for x in lane.successors if x in lanes for n in getattr(lanes[x], side)]
        if b in beside or b in follows_beside or b in beside_next:
            return side[:-1]
    return ""


def next_maneuver(lane_map: LaneMap, legs: list[Leg]):
    """-> (command, distance_m) of the first maneuver along the legs, or None."""
    for i, leg in enumerate(legs):
        lane = lane_map.lanes[leg.lane_id]
        if lane.turn_direction:
            return TURNS[lane.turn_direction], leg.start_m
        turn = math.degrees(heading_change(lane.centerline))
        if abs(turn) > TURN_FALLBACK_DEG:
            return ("turn left" if turn > 0 else "turn right"), leg.start_m
        if i + 1 < len(legs) and legs[i + 1].lane_id not in lane.successors:
            side = _lateral(lane_map, leg.lane_id, legs[i + 1].lane_id)
            if side:
                return f"change lane {side}", leg.end_m
    return None


def route_line(lane_map: LaneMap, legs: list[Leg]) -> np.ndarray:
    """(M, 2) the route's centreline from the ego to the goal."""
    parts = [cut(lane_map.lanes[leg.lane_id].centerline, leg.s0, leg.s1) for leg in legs]
    return np.vstack(parts)


def navigate(lane_map: LaneMap | None, route: Route | None, pose: Pose2D | None, lookahead_m: float = 10.0,
             horizon_m: float = 50.0, off_route_m: float = 5.0) -> Navigation:
    """The navigation at `pose` (map frame); Navigation.default() without a map, a route or a pose, or with the
    ego further than off_route_m from every route lanelet (the caller tells these apart: `why_default`)."""
    if why_default(lane_map, route, pose) is not None:
        return Navigation.default()
    here = locate(lane_map, route, pose, off_route_m)
    if here is None:
        return Navigation.default()
    legs = legs_ahead(lane_map, route, here)
    line = route_line(lane_map, legs)                                  # (M, 2)
    total = float(arc_lengths(line)[-1])
    maneuver = next_maneuver(lane_map, legs)
    if maneuver is None:
        command, distance = ("arrive" if total <= horizon_m else "follow lane"), total
    else:
        command, distance = maneuver if maneuver[1] <= horizon_m else ("follow lane", maneuver[1])
    goal = pose.to_ego(route.goal.x, route.goal.y)
    target = pose.to_ego(*point_at(line, min(lookahead_m, total)))
    return Navigation(command, float(distance), tuple(map(float, goal)), tuple(map(float, target)), "route")


def why_default(lane_map: LaneMap | None, route: Route | None, pose: Pose2D | None) -> str | None:
    """Why navigate() can only give the default ("no_map", "no_route", "no_pose"), or None."""
    if lane_map is None:
        return "no_map"
    if route is None or not route.segments:
        return "no_route"
    return "no_pose" if pose is None else None


def next_turn(lane_map: LaneMap | None, route: Route | None, pose: Pose2D | None,
              off_route_m: float = 5.0) -> tuple[str, float] | None:
    """The first left or right turn of the route ahead of the ego, at any distance: (turn left | turn right, the
    distance to its lanelet's start). Only intersection lanelets tagged turn_direction left / right count (a
    straight one, a lane change, a bend and the turn the ego is already in are passed over); None without one, or
    without a map, a route, a pose, or with the ego off the route. Alpamayo 1.5's navigation text names this turn
    (route/text.py release_route_text)."""
    if why_default(lane_map, route, pose) is not None:
        return None
    here = locate(lane_map, route, pose, off_route_m)
    if here is None:
        return None
    for leg in legs_ahead(lane_map, route, here):
        direction = lane_map.lanes[leg.lane_id].turn_direction
        if direction in ("left", "right") and leg.start_m > 0.0:
            return TURNS[direction], leg.start_m
    return None
