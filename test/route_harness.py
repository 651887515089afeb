"""The graph serving a model that declares the frame context it needs (cameras' geometry, the ego pose and its
history, navigation), driven live: the Harness (ros_harness.py) on the model's own camera count, with our
intersection map (route/example_map.py), the rig's CameraInfo and /tf_static where the model needs cameras, the
LaneletRoute to the left latched on the prefix's route topic, and odometry on the route's approach lane stamped at
the wall clock (live_odometry.py). A frame's reference: the unsplit model on the frame as the prefix served it (its
context as the model saw it), the frames in order on a fresh model (ORION's memory runs in frame order)."""

import math

from hybrid_vla_ros.model.presets import get_preset

from live_odometry import LiveOdometry
from ros_harness import Harness, wait_until

LANE_Y, START_X, SPEED = -1.75, -90.0, 8.0   # the approach lane R1 (x -100 .. -50), eastbound at 8 m/s
HISTORY_NS = 2_500_000_000                   # the prefix's 4 history poses 0.5 s apart, with their 0.25 s skew


def lane_odometry(stamp_ns: int, origin_ns: int):
    """The ego on the approach lane at stamp_ns, START_X at origin_ns: an Odometry in map."""
    from nav_msgs.msg import Odometry
    from hybrid_vla_ros.ros import messages
    msg = Odometry()
    msg.header.frame_id = "map"
    messages.ns_to_stamp(stamp_ns, msg.header.stamp)
    msg.pose.pose.position.x = START_X + SPEED * (stamp_ns - origin_ns) / 1e9
    msg.pose.pose.position.y, msg.pose.pose.orientation.w = LANE_Y, 1.0
    msg.twist.twist.linear.x = SPEED
    return msg


def lane_pose(stamp_ns: int, origin_ns: int) -> tuple[float, float, float]:
    """(x, y, yaw) of lane_odometry at stamp_ns."""
    return START_X + SPEED * (stamp_ns - origin_ns) / 1e9, LANE_Y, 0.0


def route_overrides(preset: str, map_path, overrides: dict | None = None) -> dict:
    """Every node on `preset`; the prefix on its cameras, the map and a 10 m route lookahead; then `overrides`."""
    model = {"model.preset": preset}
    cameras = [f"/test/cam{i}/image" for i in range(get_preset(preset).num_cameras)]
    out = {"hybrid_vla_prefix": {**model, "camera_topics": cameras, "map_path": str(map_path),
                                 "route_lookahead_m": 10.0},
           "hybrid_vla_suffix": dict(model), "hybrid_vla_scheduler": dict(model)}
    for node, values in (overrides or {}).items():
        out.setdefault(node, {}).update(values)
    return out


class RouteDrive:
    """h: the Harness; live: its odometry; served: each Frame the prefix served, in order; stamps: those sent."""

    def __init__(self, preset: str, tmp_path, overrides: dict | None = None, activate_scheduler=False):
        from nav_msgs.msg import Odometry
        from hybrid_vla_ros.route.example_map import write_intersection_map
        from hybrid_vla_ros.ros.nodes.diagnostics import EndpointReports
        from hybrid_vla_ros.ros.topics import KINEMATIC_TOPIC
        self.ids = write_intersection_map(tmp_path / "intersection.osm")
        params = route_overrides(preset, tmp_path / "intersection.osm", overrides)
        self.h = Harness(params, activate_scheduler, cameras=params["hybrid_vla_prefix"]["camera_topics"])
        try:
            self.preset, self.stamps = preset, []
            self.odom = self.h.node.create_publisher(Odometry, KINEMATIC_TOPIC, 200)
            self.reports = EndpointReports(self.h.node)
            self.live = LiveOdometry(self, self.h.spin, lane_odometry, HISTORY_NS)
            self.served = self.h.served_frames()
        except BaseException:
            self.h.close()
            raise

    def start(self, timeout_s: float = 30.0) -> None:
        """The rig's geometry known to the prefix (a model that needs cameras), the route received, every reader of
        the cameras and the odometry matched."""
        from hybrid_vla_ros.ros.topics import TRAJECTORY_INFO_TOPIC, TRAJECTORY_TOPIC
        if "cameras" in self.h.spec.context:
            self._publish_rig(timeout_s)
        self._publish_route(timeout_s)
        assert wait_until(lambda: self.reports.matched("hybrid_vla_prefix", "subscription", *self.h.cameras) and
                          self.reports.matched("hybrid_vla_suffix", "publisher", TRAJECTORY_TOPIC,
                                               TRAJECTORY_INFO_TOPIC), self.live.spin, timeout_s), self.reports.values
        self.live.linked(timeout_s)

    def _publish_rig(self, timeout_s: float) -> None:
        from rclpy.qos import DurabilityPolicy, QoSProfile
        from sensor_msgs.msg import CameraInfo
        from tf2_msgs.msg import TFMessage
        from test_context_graph import rig_messages
        infos, tf = rig_messages(self.h.spec.image_width, self.h.spec.image_height)
        pubs = [self.h.node.create_publisher(CameraInfo, c.rsplit("/", 1)[0] + "/camera_info", 10)
                for c in self.h.cameras]
        self.h.node.create_publisher(TFMessage, "/tf_static",
                                     QoSProfile(depth=1, durability=DurabilityPolicy.TRANSIENT_LOCAL)).publish(tf)

        def geometry_known():   # CameraInfo is best effort: sent until the prefix has every camera's
            for pub, info in zip(pubs, infos):
                pub.publish(info)
            return all(c is not None for c in self.h.prefix.context_input.cameras())
        assert wait_until(geometry_known, self.live.spin, timeout_s)

    def _publish_route(self, timeout_s: float) -> None:
        from autoware_planning_msgs.msg import LaneletRoute
        from hybrid_vla_ros.route.example_map import intersection_route
        from hybrid_vla_ros.ros.inputs.route_input import LATCHED, route_to_msg
        from hybrid_vla_ros.ros.topics import REMAPS
        topic = REMAPS["hybrid_vla_prefix"].get("~/input/route", "/hybrid_vla_prefix/input/route")
        self.route_pub = self.h.node.create_publisher(LaneletRoute, topic, LATCHED)
        self.route_pub.publish(route_to_msg(intersection_route(self.ids, "left")))
        assert wait_until(lambda: self.h.prefix.route.routes_received == 1, self.live.spin, timeout_s)

    def send(self, seq: int, timeout_s: float = 30.0) -> int:
        """Frame seq's images stamped on the odometry's grid; its trajectory awaited. -> the stamp."""
        before = len(self.h.infos)
        self.stamps.append(self.live.frame_stamp(self.stamps[-1] if self.stamps else 0))
        self.h.publish_images(self.h.frame(seq).images, self.stamps[-1])
        assert wait_until(lambda: len(self.h.infos) > before, self.live.spin, timeout_s), \
            (f"no trajectory for frame {seq}", dict(self.h.prefix.context_input.counts), self.h.prefix.health.rejected)
        return self.stamps[-1]

    def references(self) -> dict:
        """camera stamp -> the unsplit model's plan for the frame served at it ((N, 5) ego frame at the stamp)."""
        from hybrid_vla_ros.engine.stages import reference_forward
        from hybrid_vla_ros.model.load import load_vla
        model = load_vla(preset=self.preset)
        return {frame.stamp_ns: reference_forward(model, frame)[1].points for frame in self.served}

    def close(self) -> None:
        self.h.close()


def plan_at_times(plan, pose: tuple, times_s):
    """The ego-frame plan (N, 5; x, y, yaw, speed, t) placed at the map pose (x, y, yaw) it was planned from,
    its positions at plan times times_s (from the ego at t = 0): (K, 2)."""
    import numpy as np
    x0, y0, yaw = pose
    c, s = math.cos(yaw), math.sin(yaw)
    knots = np.concatenate([[0.0], plan[:, 4]])
    xs = np.concatenate([[x0], x0 + c * plan[:, 0] - s * plan[:, 1]])
    ys = np.concatenate([[y0], y0 + s * plan[:, 0] + c * plan[:, 1]])
    return np.stack([np.interp(times_s, knots, xs), np.interp(times_s, knots, ys)], axis=1)
