"""The route as a node's navigation input: ~/input/route (autoware_planning_msgs/LaneletRoute, latched: reliable,
transient local, depth 1, as Autoware's mission planner publishes it) + the lanelet2 map (`map_path`, or
~/input/vector_map: autoware_map_msgs/LaneletMapBin where that package is importable and the binary decodes)
-> each frame's Navigation at the ego pose matched to its stamp (route/navigate.py) and, while a route
navigates, its instruction (the checkpoint's instruction_template, route/text.py).

Without the Autoware message packages there is no subscription: every frame gets the default navigation
(said once in the log). Frames navigated by default are counted by why: no_map, no_route, no_pose (no odometry
within POSE_MATCH_S of the frame's stamp) and off_route (the ego further than route/navigate.py's off_route_m
from every route lanelet); the `navigation` diagnostic shows them.
"""

from __future__ import annotations

import math
import threading
from collections import Counter

from rclpy.qos import DurabilityPolicy, HistoryPolicy, QoSProfile, ReliabilityPolicy

from ...engine.pipeline.camera_sync import StampedHistory
from ...errors import HybridVLAError
from ...route import (Navigation, Route, check_template, instruction, load_map, load_map_bytes, navigate, next_turn,
                      why_default)
from ...types import Pose2D
from .. import messages

LATCHED = QoSProfile(depth=1, history=HistoryPolicy.KEEP_LAST, reliability=ReliabilityPolicy.RELIABLE,
                     durability=DurabilityPolicy.TRANSIENT_LOCAL)
POSE_MATCH_S = 1.0   # a frame's pose: the odometry nearest its stamp, if within this (interpolated within the skew)
REASONS = ("route", "no_map", "no_route", "no_pose", "off_route")


def autoware_route_types():
    """-> (LaneletRoute class or None, LaneletMapBin class or None, why not where None)."""
    try:
        from autoware_planning_msgs.msg import LaneletRoute
    except ImportError as exc:
        return None, None, f"{exc.name} not importable: no ~/input/route, default navigation for every frame"
    try:
        from autoware_map_msgs.msg import LaneletMapBin
    except ImportError as exc:
        return LaneletRoute, None, f"{exc.name} not importable: no ~/input/vector_map (map_path only)"
    return LaneletRoute, LaneletMapBin, "importable"


def route_from_msg(msg) -> Route:
    """autoware_planning_msgs/LaneletRoute -> Route: each segment's preferred lanelet and primitives, the goal."""
    segments = tuple((int(seg.preferred_primitive.id), tuple(int(p.id) for p in seg.primitives))
                     for seg in msg.segments)
    p, q = msg.goal_pose.position, msg.goal_pose.orientation
    yaw = math.atan2(2.0 * (q.w * q.z + q.x * q.y), 1.0 - 2.0 * (q.y * q.y + q.z * q.z))
    return Route(segments, Pose2D(float(p.x), float(p.y), yaw))


def route_to_msg(route: Route):
    """Route -> autoware_planning_msgs/LaneletRoute, as Autoware's mission planner fills it (frame map)."""
    from autoware_planning_msgs.msg import LaneletPrimitive, LaneletRoute, LaneletSegment
    msg = LaneletRoute()
    msg.header.frame_id = "map"
    for preferred, primitives in route.segments:
        segment = LaneletSegment(preferred_primitive=LaneletPrimitive(id=preferred, primitive_type="lane"))
        segment.primitives = [LaneletPrimitive(id=i, primitive_type="lane") for i in primitives]
        msg.segments.append(segment)
    goal = msg.goal_pose
    goal.position.x, goal.position.y = route.goal.x, route.goal.y
    goal.orientation.z, goal.orientation.w = math.sin(route.goal.yaw / 2), math.cos(route.goal.yaw / 2)
    return msg


class RouteInput:
    """Made by a node in configure (its subscriptions live until cleanup). params: the node's parameter table
    (map_path, map_origin_lat_deg, map_origin_lon_deg, route_lookahead_m, sync_skew_ms, instruction).
    own_odometry: subscribe ~/input/kinematic_state here (a node that reads it itself calls add_odometry)."""

    def __init__(self, node, params, template: str = "", own_odometry: bool = False):
        self.node, self.params, self.template = node, params, check_template(template)
        self.lock = threading.Lock()
        self.counts: Counter = Counter()
        self.route: Route | None = None
        self.routes_received = 0
        self.last = Navigation.default()
        self.last_instruction = ""
        self.poses = StampedHistory(between=Pose2D.between)     # map-frame poses by stamp
        path = params["map_path"]
        origin = (params["map_origin_lat_deg"], params["map_origin_lon_deg"])
        self.lane_map = load_map(path, origin) if path else None   # ConfigError: configure fails, saying why
        self.map_source = f"{path} ({self.lane_map.frame})" if path else ""
        route_type, map_type, self.why = autoware_route_types()
        self.route_topic = route_type is not None
        if route_type is not None:
            node.configured_subscription(route_type, "~/input/route", self._on_route, LATCHED)
        if map_type is not None:
            node.configured_subscription(map_type, "~/input/vector_map", self._on_vector_map, LATCHED)
        if own_odometry:
            from nav_msgs.msg import Odometry
            node.configured_subscription(Odometry, "~/input/kinematic_state", self.add_odometry, 10)
        node.get_logger().info(f"navigation: map {self.map_source or 'none (map_path empty)'}; route input "
                               f"{'~/input/route' if route_type is not None else 'none'} ({self.why})")

    # ---- inputs ----------------------------------------------------------------------------------------
    def _on_route(self, msg) -> None:
        self.route = route_from_msg(msg)
        self.routes_received += 1
        self.node.get_logger().info(f"navigation: route of {len(self.route.segments)} segments, goal "
                                    f"({self.route.goal.x:.1f}, {self.route.goal.y:.1f})")

    def _on_vector_map(self, msg) -> None:
        """Autoware's map replaces map_path's where its binary decodes (route/map_bytes.py load_map_bytes)."""
        try:
            self.lane_map = load_map_bytes(bytes(msg.data))
            self.map_source = f"~/input/vector_map ({len(self.lane_map.lanes)} lanelets)"
        except (HybridVLAError, RuntimeError, ValueError) as exc:
            with self.lock:
                self.counts["vector_map_undecodable"] += 1
            self.node.get_logger().warning(f"navigation: ~/input/vector_map does not decode ({exc}); "
                                           f"keeping {self.map_source or 'no map'}")

    def add_odometry(self, msg) -> None:
        self.poses.add(messages.stamp_to_ns(msg.header.stamp), messages.odometry_to_pose(msg))

    # ---- per frame -------------------------------------------------------------------------------------
    def pose_at(self, stamp_ns: int) -> Pose2D | None:
        """The ego pose for a frame: matched within the camera skew (interpolated), else the nearest within
        POSE_MATCH_S; None when there is none."""
        pose, _ = self.poses.match(stamp_ns, int(self.params["sync_skew_ms"] * 1e6))
        gap = self.poses.gap_ns(stamp_ns)
        return pose if gap is not None and gap <= POSE_MATCH_S * 1e9 else None

    def navigation(self, pose: Pose2D | None) -> Navigation:
        """The navigation at `pose` (map frame), counted by reason (REASONS)."""
        lane_map, route = self.lane_map, self.route
        reason = why_default(lane_map, route, pose)
        nav = Navigation.default() if reason else navigate(lane_map, route, pose, self.params["route_lookahead_m"])
        reason = reason or ("route" if nav.source == "route" else "off_route")
        with self.lock:
            self.counts[reason] += 1
            self.last = nav
        return nav

    def turn_ahead(self, pose: Pose2D | None) -> tuple[str, float] | None:
        """The route's next left or right turn at `pose` and its distance (route/navigate.py next_turn), for a
        prompt that names it (Alpamayo 1.5); None without one."""
        return next_turn(self.lane_map, self.route, pose)

    def apply(self, frame) -> None:
        """frame.navigation at the frame's pose; frame.instruction from the template while a route navigates
        (else it keeps the `instruction` parameter's)."""
        frame.navigation = nav = self.navigation(self.pose_at(frame.stamp_ns))
        if nav.source == "route":
            frame.instruction = instruction(self.template, nav)
        self.last_instruction = frame.instruction

    @property
    def no_route(self) -> int:
        return self.counts["no_route"]

    @property
    def off_route(self) -> int:
        return self.counts["off_route"]

    def check(self) -> tuple[str, int, str, dict]:
        """The `navigation` diagnostic: WARN while a map waits for a route (or a route for a map), or the last
        frame was off the route."""
        with self.lock:
            counts, last = dict(self.counts), self.last
        values = {"map": self.map_source or "none", "route_input": self.why, "routes_received": str(self.routes_received),
                  "route_segments": str(len(self.route.segments) if self.route else 0), "command": last.command,
                  "distance_m": f"{last.distance_m:.1f}", "source": last.source, "instruction": self.last_instruction,
                  **{reason: str(counts.get(reason, 0)) for reason in REASONS},
                  "vector_map_undecodable": str(counts.get("vector_map_undecodable", 0))}
        if self.lane_map is None and self.route is None:
            return "navigation", 0, "no map, no route: default navigation (the instruction parameter)", values
        if self.lane_map is None or self.route is None:
            waiting = "no route on ~/input/route yet" if self.route_topic else f"no route: {self.why}"
            return "navigation", 1, "no map for the route" if self.lane_map is None else waiting, values
        if last.source != "route" and counts:
            return "navigation", 1, "the last frame had no navigation (off the route or no pose)", values
        return "navigation", 0, f"{last.command} in {last.distance_m:.0f} m", values
