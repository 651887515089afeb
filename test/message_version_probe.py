"""Run the suffix with whichever autoware_internal_planning_msgs this interpreter imports (the venv's 1.12.1,
or the newer one from an overlay: test_message_versions.py sets the environment) and print, as JSON lines,
what its CandidateTrajectories and TurnIndicatorsCommand outputs carried. A subscriber in this process reads
them over DDS (loopback), so each message crossed the real type support of that version.

    python message_version_probe.py FRAMES [MAP_DIR]

With MAP_DIR: the suffix in the map frame on our intersection map (hybrid_vla_ros/route/example_map.py), a
LaneletRoute turning left there, and each frame's odometry 20 m before the junction.
"""

import json
import sys
from pathlib import Path

from hybrid_vla_ros.ros.outputs.candidates import indicator_field
from hybrid_vla_ros.ros.topics import CANDIDATES_TOPIC, KINEMATIC_TOPIC, REMAPS, TURN_INDICATORS_TOPIC
from ros_harness import Harness, wait_until
from test_route_graph import odometry, route_msg


def with_route(h: Harness, ids) -> None:
    """The route (latched) and, for every frame the probe sends, odometry 20 m before the left turn."""
    from autoware_planning_msgs.msg import LaneletRoute
    from nav_msgs.msg import Odometry
    from hybrid_vla_ros.route.example_map import intersection_route
    from hybrid_vla_ros.ros.inputs.route_input import LATCHED
    routes = h.node.create_publisher(LaneletRoute, REMAPS["hybrid_vla_suffix"]["~/input/route"], LATCHED)
    routes.publish(route_msg(intersection_route(ids, "left")))
    assert wait_until(lambda: h.suffix.signals.route.routes_received == 1, h.spin, 20)
    odom = h.node.create_publisher(Odometry, KINEMATIC_TOPIC, 50)
    assert wait_until(lambda: odom.get_subscription_count() >= 1, h.spin, 20)
    h.settle(0.5)
    for seq in range(h.frames):
        odom.publish(odometry(h.frame(seq).stamp_ns, -20.0, -1.75, 0.0))
    assert wait_until(lambda: h.suffix.present.current_pose() is not None, h.spin, 20)


def main(frames: int, map_dir: str | None) -> None:
    from autoware_internal_planning_msgs.msg import CandidateTrajectories, CandidateTrajectory
    from autoware_vehicle_msgs.msg import TurnIndicatorsCommand
    suffix = {"output_type": "auto"}
    if map_dir:
        from hybrid_vla_ros.route.example_map import write_intersection_map
        ids = write_intersection_map(Path(map_dir) / "intersection.osm")
        suffix.update(frame_id="map", map_path=str(Path(map_dir) / "intersection.osm"))
    h = Harness({"hybrid_vla_suffix": suffix})
    h.frames = frames
    candidates, signals = [], []
    h.node.create_subscription(CandidateTrajectories, CANDIDATES_TOPIC, candidates.append, 10)
    h.node.create_subscription(TurnIndicatorsCommand, TURN_INDICATORS_TOPIC, signals.append, 10)
    try:
        assert wait_until(lambda: h.suffix.candidates.pub.get_subscription_count() >= 1
                          and h.suffix.signals.pub.get_subscription_count() >= 1, h.spin, 30)
        if map_dir:
            with_route(h, ids)
        for seq in range(frames):
            h.send_frame(seq)
        assert wait_until(lambda: len(candidates) >= frames and len(signals) >= frames, h.spin, 60), \
            (len(candidates), len(signals))
        described = h.suffix.candidates.describe_version()
    finally:
        h.close()
    field = indicator_field(CandidateTrajectory)   # found by type, as the suffix finds it
    print(json.dumps({"fields": CandidateTrajectory.get_fields_and_field_types(), "indicator_field": field,
                      "described": described}))
    for message in candidates:
        for c in message.candidate_trajectories:
            stamp = c.header.stamp.sec * 10**9 + c.header.stamp.nanosec
            turn = getattr(c, field) if field else None
            print(json.dumps({"kind": "candidate", "stamp_ns": stamp, "points": len(c.points),
                              "turn": None if turn is None else
                              [turn.stamp.sec * 10**9 + turn.stamp.nanosec, turn.command]}))
    for s in signals:
        print(json.dumps({"kind": "signal", "stamp_ns": s.stamp.sec * 10**9 + s.stamp.nanosec, "command": s.command}))


if __name__ == "__main__":
    main(int(sys.argv[1]), sys.argv[2] if len(sys.argv) > 2 else None)
