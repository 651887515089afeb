"""The route as navigation input, ROS-free (hybrid_vla_ros/route/): a lanelet2 map of our own with an intersection
(route/example_map.py, written with lanelet2's API), routes through it left, right and straight, and the command,
distances, goal and target point the ego gets along them."""

import dataclasses
import math

import numpy as np
import pytest

from hybrid_vla_ros.errors import ConfigError
from hybrid_vla_ros.route import (DEFAULT_TEMPLATE, Lane, LaneMap, Navigation, Route, instruction, load_map,
                                  load_map_bytes, navigate, turn_indicator, why_default)
from hybrid_vla_ros.route.example_map import ORIGIN, intersection_route, write_intersection_map
from hybrid_vla_ros.types import Pose2D

EAST = 0.0
ON_R = -1.75   # the right approach lane's centreline (y)


@pytest.fixture(scope="module")
def junction(tmp_path_factory):
    """-> (LaneMap, lanelet name -> id) of the intersection map written as Autoware writes maps (local_x/local_y)."""
    path = tmp_path_factory.mktemp("map") / "intersection.osm"
    ids = write_intersection_map(path)
    return load_map(path), ids


def test_a_map_with_local_xy_tags_is_read_in_them_and_one_without_is_projected_from_its_origin(tmp_path):
    tagged_ids = write_intersection_map(tmp_path / "tagged.osm", local_xy=True)
    plain_ids = write_intersection_map(tmp_path / "plain.osm", local_xy=False)
    tagged, plain = load_map(tmp_path / "tagged.osm"), load_map(tmp_path / "plain.osm", origin=ORIGIN)
    assert tagged.frame == "local_x/local_y" and plain.frame.startswith("UTM projected")
    assert set(tagged_ids) == set(plain_ids) and len(tagged.lanes) == 10
    for name in tagged_ids:
        a, b = tagged.lanes[tagged_ids[name]].centerline, plain.lanes[plain_ids[name]].centerline
        assert a.shape == b.shape and np.abs(a - b).max() < 1e-3, name
    np.testing.assert_allclose(tagged.lanes[tagged_ids["R1"]].centerline[[0, -1]], [[-100, ON_R], [-50, ON_R]])
    with pytest.raises(ConfigError, match="origin"):   # lat/lon near 139 deg E: not in UTM zone 31 around (0, 0)
        load_map(tmp_path / "plain.osm", origin=(0.0, 0.0))
    with pytest.raises(ConfigError, match="no such file"):
        load_map(tmp_path / "missing.osm")


def test_the_map_has_the_junction_s_topology_and_autoware_turn_directions(junction):
    lanes, ids = junction
    lane = {name: lanes.lanes[i] for name, i in ids.items()}
    assert set(lane["R2"].successors) == {ids["S"], ids["TL"], ids["TR"]}
    assert lane["R1"].successors == (ids["R2"],) and lane["R1"].lefts == (ids["L1"],)
    assert lane["L1"].rights == (ids["R1"],)
    assert (lane["TL"].turn_direction, lane["TR"].turn_direction, lane["S"].turn_direction) == \
        ("left", "right", "straight")
    assert lane["ES"].turn_direction == "" and lane["TL"].successors == (ids["EL"],)
    assert lane["TL"].length == pytest.approx(11.75 * math.pi / 2, abs=0.1)   # the quarter circle's centreline


def test_the_binary_map_lanelet2_writes_decodes_from_bytes_like_autowares_vector_map(tmp_path):
    """autoware_map_msgs/LaneletMapBin.data is the boost archive lanelet2's .bin writer makes (map + id counter)."""
    ids = write_intersection_map(tmp_path / "intersection.bin")
    lanes = load_map_bytes((tmp_path / "intersection.bin").read_bytes())
    assert len(lanes.lanes) == 10 and lanes.lanes[ids["TL"]].turn_direction == "left"
    nav = navigate(lanes, intersection_route(ids, "left"), Pose2D(-40.0, ON_R, EAST))
    assert (nav.command, round(nav.distance_m, 2)) == ("turn left", 40.0)
    with pytest.raises(ConfigError):
        load_map_bytes(b"not a boost archive")


@pytest.mark.parametrize("turn,command", [("left", "turn left"), ("right", "turn right"), ("straight", "go straight")])
def test_the_command_changes_where_the_route_turns(junction, turn, command):
    lanes, ids = junction
    route = intersection_route(ids, turn)
    far = navigate(lanes, route, Pose2D(-90.0, ON_R, EAST))           # the junction beyond the 50 m horizon
    assert (far.command, far.distance_m) == ("follow lane", pytest.approx(90.0, abs=0.01))
    for x in (-40.0, -10.0, -0.5):                                   # approaching: the turn, its distance
        nav = navigate(lanes, route, Pose2D(x, ON_R, EAST))
        assert (nav.command, nav.source) == (command, "route")
        assert nav.distance_m == pytest.approx(-x, abs=0.01)
    in_junction = lanes.lanes[ids[{"left": "TL", "right": "TR", "straight": "S"}[turn]]].centerline
    inside = Pose2D(*in_junction[len(in_junction) // 2], EAST)
    assert navigate(lanes, route, inside).command == command          # in it: the same command, 0 m away
    assert navigate(lanes, route, inside).distance_m == 0.0
    exit_start = lanes.lanes[ids[{"left": "EL", "right": "ER", "straight": "ES"}[turn]]].centerline[2]
    after = navigate(lanes, route, Pose2D(*exit_start, EAST))
    assert after.command == "follow lane" and after.distance_m == pytest.approx(78.0, abs=0.05)  # to the goal


def test_near_the_goal_the_command_is_arrive_with_the_distance_to_it(junction):
    lanes, ids = junction
    nav = navigate(lanes, intersection_route(ids, "left", goal_m=80.0), Pose2D(11.75, 60.0, math.pi / 2))
    assert (nav.command, nav.distance_m) == ("arrive", pytest.approx(30.0, abs=0.01))
    assert nav.goal_ego == pytest.approx((30.0, 0.0), abs=1e-6)


def test_a_preferred_lane_beside_the_ego_s_is_a_lane_change_due_by_the_end_of_the_ego_s_lanelet(junction):
    lanes, ids = junction
    right = navigate(lanes, intersection_route(ids, "left", start_lane="L"), Pose2D(-90.0, 1.75, EAST))
    assert (right.command, right.distance_m) == ("change lane right", pytest.approx(40.0, abs=0.01))
    to_left = Route(((ids["R1"], (ids["R1"], ids["L1"])), (ids["L2"], (ids["R2"], ids["L2"]))), Pose2D(-10.0, 1.75, 0))
    left = navigate(lanes, to_left, Pose2D(-70.0, ON_R, EAST))
    assert (left.command, left.distance_m) == ("change lane left", pytest.approx(20.0, abs=0.01))
    done = navigate(lanes, intersection_route(ids, "left", start_lane="L"), Pose2D(-40.0, ON_R, EAST))
    assert done.command == "turn left"                                # changed: the turn comes next


def test_without_a_turn_direction_a_centreline_turning_over_30_degrees_is_a_turn():
    """Plain data: an L-shaped road of three lanelets, no turn_direction tags."""
    arc = np.array([[10 * math.sin(a), 10 - 10 * math.cos(a)] for a in np.linspace(0, math.pi / 2, 20)])
    lanes = LaneMap({1: Lane(1, np.array([[-30.0, 0.0], [0.0, 0.0]]), successors=(2,)),
                     2: Lane(2, arc, successors=(3,)), 3: Lane(3, np.array([[10.0, 10.0], [10.0, 60.0]]))})
    route = Route(((1, (1,)), (2, (2,)), (3, (3,))), Pose2D(10.0, 50.0, math.pi / 2))
    nav = navigate(lanes, route, Pose2D(-20.0, 0.0, EAST))
    assert (nav.command, nav.distance_m) == ("turn left", pytest.approx(20.0, abs=0.01))
    mirrored = LaneMap({k: dataclasses.replace(v, centerline=v.centerline * [1, -1]) for k, v in lanes.lanes.items()})
    goal = Pose2D(10.0, -50.0, -math.pi / 2)
    assert navigate(mirrored, Route(route.segments, goal), Pose2D(-20.0, 0.0, EAST)).command == "turn right"


def test_goal_and_target_point_are_in_the_ego_frame(junction):
    lanes, ids = junction
    route = intersection_route(ids, "left")                           # goal (11.75, 90)
    nav = navigate(lanes, route, Pose2D(-40.0, ON_R, EAST), lookahead_m=10.0)
    assert nav.goal_ego == pytest.approx((51.75, 91.75)) and nav.target_ego == pytest.approx((10.0, 0.0), abs=1e-6)
    north = navigate(lanes, route, Pose2D(11.75, 30.0, math.pi / 2), lookahead_m=10.0)
    assert north.goal_ego == pytest.approx((60.0, 0.0), abs=1e-6) and north.target_ego == pytest.approx((10.0, 0.0))
    into_turn = navigate(lanes, route, Pose2D(-10.0, ON_R, EAST), lookahead_m=25.0)  # 10 m straight, 15 m of arc
    a = 15.0 / 11.75
    expected = (11.75 * math.sin(a) + 10.0, 10.0 - 11.75 * math.cos(a) - ON_R)
    assert into_turn.target_ego == pytest.approx(expected, abs=0.2)
    rotated = navigate(lanes, route, Pose2D(-40.0, ON_R, math.radians(10)), lookahead_m=10.0)
    c, s = math.cos(math.radians(10)), math.sin(math.radians(10))
    assert rotated.target_ego == pytest.approx((10 * c, -10 * s), abs=1e-6)   # the same point, seen turned left
    end = navigate(lanes, route, Pose2D(11.75, 85.0, math.pi / 2), lookahead_m=10.0)
    assert end.target_ego == pytest.approx((5.0, 0.0), abs=1e-6)      # never past the goal


def test_no_map_no_route_no_pose_or_off_the_route_is_the_stated_default(junction):
    lanes, ids = junction
    route, pose = intersection_route(ids, "left"), Pose2D(-40.0, ON_R, EAST)
    assert Navigation.default() == Navigation("follow lane", 0.0, (0.0, 0.0), (0.0, 0.0), "default")
    assert navigate(None, route, pose) == Navigation.default() and why_default(None, route, pose) == "no_map"
    assert navigate(lanes, None, pose) == Navigation.default() and why_default(lanes, None, pose) == "no_route"
    assert navigate(lanes, Route((), pose), pose).source == "default"
    assert navigate(lanes, route, None).source == "default" and why_default(lanes, route, None) == "no_pose"
    assert navigate(lanes, route, Pose2D(-40.0, 30.0, EAST)) == Navigation.default()   # 30 m beside the road
    assert why_default(lanes, route, pose) is None


def test_the_instruction_formats_the_navigation_with_the_checkpoint_s_template(junction):
    from hybrid_vla_ros.model.presets import get_preset
    lanes, ids = junction
    nav = navigate(lanes, intersection_route(ids, "left"), Pose2D(-35.2, ON_R, EAST))
    assert DEFAULT_TEMPLATE == "{command} in {distance_m:.0f} m"
    assert instruction("", nav) == instruction(DEFAULT_TEMPLATE, nav) == "turn left in 35 m"
    assert instruction("{command}; goal {goal_x:.0f} {goal_y:.0f}; target {target_x:.0f} {target_y:.0f}", nav) == \
        "turn left; goal 47 92; target 10 0"
    with pytest.raises(ConfigError, match="fields are"):
        instruction("{speed}", nav)
    spec = get_preset("tiny")
    assert spec.instruction_template == ""                            # presets: the default template
    assert dataclasses.replace(spec, instruction_template="go: {command}").instruction_template == "go: {command}"
    with pytest.raises(ConfigError):
        dataclasses.replace(spec, instruction_template="{lane_id}")


def test_the_turn_indicator_shows_a_turn_or_lane_change_within_the_search_distance():
    def nav(command, distance_m, source="route"):
        return Navigation(command, distance_m, source=source)
    assert turn_indicator(nav("turn left", 29.0)) == "left" and turn_indicator(nav("turn left", 0.0)) == "left"
    assert turn_indicator(nav("turn left", 40.0)) == "none"
    assert turn_indicator(nav("turn left", 40.0), speed_mps=5.0) == "left"   # 30 m + 3 s x 5 m/s (Autoware's)
    assert turn_indicator(nav("change lane right", 10.0)) == "right" and turn_indicator(nav("turn right", 5.0)) == "right"
    assert turn_indicator(nav("turn right", 15.0), within_m=10.0) == "none"
    assert turn_indicator(nav("go straight", 5.0)) == "none" and turn_indicator(nav("arrive", 5.0)) == "none"
    assert turn_indicator(nav("turn left", 5.0, source="default")) == "none"


def test_the_vector_map_decoded_in_its_child_process_is_the_map_lanelet2_loads_in_this_one(tmp_path):
    ids = write_intersection_map(tmp_path / "intersection.bin")
    here, there = load_map(tmp_path / "intersection.bin"), load_map_bytes((tmp_path / "intersection.bin").read_bytes())
    assert set(there.lanes) == set(here.lanes) == set(ids.values()) and there.frame == "local_x/local_y"
    for i, lane in here.lanes.items():
        other = there.lanes[i]
        assert (other.turn_direction, other.successors, other.lefts, other.rights) == \
            (lane.turn_direction, lane.successors, lane.lefts, lane.rights)
        np.testing.assert_array_equal(other.centerline, lane.centerline)


def test_a_corrupt_count_in_the_vector_map_is_refused_within_the_decoder_s_memory_cap(tmp_path):
    """A boost archive begins with the length of its signature ("serialization::archive", 8 bytes): 4 GiB
    there makes lanelet2 allocate 4 GiB at once; the decoder's cap (route/map_bytes.py) refuses it."""
    write_intersection_map(tmp_path / "intersection.bin")
    data = (tmp_path / "intersection.bin").read_bytes()
    assert data[:8] == (22).to_bytes(8, "little") and data[8:30] == b"serialization::archive"
    with pytest.raises(ConfigError, match="asks for more than .* MiB"):
        load_map_bytes((4 << 30).to_bytes(8, "little") + data[8:])
    with pytest.raises(ConfigError, match="input stream error"):
        load_map_bytes(data[: len(data) // 2])
    with pytest.raises(ConfigError, match="no data"):
        load_map_bytes(b"")


def test_a_vector_map_with_a_non_finite_point_is_refused_saying_which_lanelet(tmp_path):
    import lanelet2.core as core
    from lanelet2 import io

    def point(x, y, local_y=None):
        p = core.Point3d(core.getId(), x, y, 0.0)
        p.attributes["local_x"], p.attributes["local_y"] = f"{x}", local_y or f"{y}"
        return p
    left = core.LineString3d(core.getId(), [point(0.0, 1.75), point(10.0, 1.75, "nan")])
    right = core.LineString3d(core.getId(), [point(0.0, -1.75), point(10.0, -1.75)])
    lanelet = core.Lanelet(core.getId(), left, right, {"type": "lanelet", "subtype": "road"})
    ll_map = core.LaneletMap()
    ll_map.add(lanelet)
    io.write(str(tmp_path / "nan.bin"), ll_map, io.Origin(0.0, 0.0))   # a .bin keeps the points as they are
    with pytest.raises(ConfigError, match=f"lanelet {lanelet.id}: its left bound .* some not finite"):
        load_map_bytes((tmp_path / "nan.bin").read_bytes())
