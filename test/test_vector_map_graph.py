"""The map as Autoware sends it: a real autoware_map_msgs/LaneletMapBin, published latched by a map server in
its own process (vector_map_publisher.py) before the graph starts, reaches the prefix and the suffix over DDS
on /map/vector_map and replaces their `map_path` map; a route over its lanelets navigates the prefix's frames.
A malformed one after it is refused, counted, and the nodes keep the map they have and keep serving."""

import subprocess
import sys
from pathlib import Path

import pytest

from hybrid_vla_ros.route.example_map import intersection_route, write_intersection_map

pytest.importorskip("autoware_planning_msgs.msg", reason="the real Autoware messages (scripts/setup.sh builds them)")
pytest.importorskip("autoware_map_msgs.msg", reason="the real Autoware messages (scripts/setup.sh builds them)")

HERE = Path(__file__).parent


def send(server: subprocess.Popen, path: Path, count: int) -> None:
    """Have the map server publish the file's bytes; returns once it says it did."""
    server.stdin.write(f"{path}\n")
    server.stdin.flush()
    line = server.stdout.readline().strip()
    assert line == f"published {count}", f"{line!r}; the server's stderr: {server.stderr.read()[-2000:]}"


@pytest.mark.slow
def test_the_route_runs_on_the_vector_map_autoware_latches_not_on_map_path(domain, tmp_path):
    from autoware_planning_msgs.msg import LaneletRoute
    from diagnostic_msgs.msg import DiagnosticArray
    from nav_msgs.msg import Odometry
    from hybrid_vla_ros.ros.inputs.route_input import LATCHED, route_to_msg
    from hybrid_vla_ros.ros.topics import KINEMATIC_TOPIC, REMAPS, ROUTE_TOPIC, VECTOR_MAP_TOPIC
    from ros_harness import Harness, wait_until
    from test_route_graph import navigation_diagnostic, odometry
    file_ids = write_intersection_map(tmp_path / "file.osm")         # map_path: the same roads, other ids
    ids = write_intersection_map(tmp_path / "sent.bin")              # what the map server sends
    assert not set(ids.values()) & set(file_ids.values())
    (tmp_path / "bad.bin").write_bytes(b"not a boost archive")
    assert REMAPS["hybrid_vla_prefix"]["~/input/vector_map"] == REMAPS["hybrid_vla_suffix"]["~/input/vector_map"]
    server = subprocess.Popen([sys.executable, str(HERE / "vector_map_publisher.py"), VECTOR_MAP_TOPIC],
                              stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    h = None
    try:
        send(server, tmp_path / "sent.bin", 1)                       # once, before the graph exists: latched
        h = Harness({name: {"map_path": str(tmp_path / "file.osm"), "route_lookahead_m": 10.0}
                     for name in ("hybrid_vla_prefix", "hybrid_vla_suffix")})
        routes = [h.prefix.route, h.suffix.signals.route]
        assert wait_until(lambda: all(r.map_source.startswith("~/input/vector_map") for r in routes), h.spin, 30), \
            [r.map_source for r in routes]
        assert all(set(r.lane_map.lanes) == set(ids.values()) for r in routes)
        served, statuses = h.served_frames(), []
        h.node.create_subscription(DiagnosticArray, "/diagnostics", lambda m: statuses.extend(m.status), 50)
        odom = h.node.create_publisher(Odometry, KINEMATIC_TOPIC, 10)
        h.node.create_publisher(LaneletRoute, ROUTE_TOPIC, LATCHED).publish(
            route_to_msg(intersection_route(ids, "left")))             # a route over the sent map's lanelets
        assert wait_until(lambda: h.prefix.route.routes_received == 1, h.spin, 10)

        def frame_at(seq):
            stamp_ns = h.frame(seq).stamp_ns
            odom.publish(odometry(stamp_ns, -40.0, -1.75, 0.0))
            assert wait_until(lambda: h.prefix.route.poses.gap_ns(stamp_ns) == 0, h.spin, 10)
            h.send_frame(seq)
            return served[-1]

        first = frame_at(0)
        assert first.instruction == "turn left in 40 m" and first.navigation.source == "route"
        send(server, tmp_path / "bad.bin", 2)                        # replaces the latched one
        assert wait_until(lambda: all(r.counts["vector_map_undecodable"] == 1 for r in routes), h.spin, 30)
        assert all(r.map_source.startswith("~/input/vector_map") and set(r.lane_map.lanes) == set(ids.values())
                   for r in routes)
        after = frame_at(1)                                          # still serving, on the map it had
        assert after.instruction == "turn left in 40 m" and h.prefix.route.counts["route"] == 2
        statuses.clear()
        assert wait_until(lambda: navigation_diagnostic(h, statuses) is not None, h.spin, 5)
        level, values = navigation_diagnostic(h, statuses)
        assert (level, values["vector_map_undecodable"], values["route"]) == (0, "1", "2"), values
        assert values["map"] == "~/input/vector_map (10 lanelets)"
    finally:
        if h is not None:
            h.close()
        server.stdin.close()
        server.wait(timeout=20)
