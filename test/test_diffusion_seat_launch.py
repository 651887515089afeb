"""launch/hybrid_vla_diffusion_seat.launch.xml, the diffusion planner's seat, through the real launch front end
(an installed launch_ros, else the unmodified copy in ../shared/vendor/ros2_launch): parsed and its actions
evaluated as `ros2 launch` would (arguments, conditions, namespaces, substitutions), without starting a
process. Seconds.

Upstream, read for the expectations below (autoware_launch HEAD 662752e, 2026-08-21):
tier4_universe_launch/tier4_planning_launch/launch/learning_based_planning/diffusion_planner.launch.xml includes
autoware_diffusion_planner's launch file with the arguments in INCLUDE_ARGUMENTS (names and values), pushes the
namespaces trajectory_generator/neural_network_based_planner (under planning.launch.xml's `planning`), and feeds
autoware_trajectory_processor's `input_trajectories` from
/planning/generator/diffusion_planner/candidate_trajectories; tier4_planning_launch/launch/planning.launch.xml
gives the planning validator /planning/trajectory_generator/trajectory in and /planning/trajectory out."""

import importlib.util
import shutil
import sys
from pathlib import Path

import pytest
import yaml

ROOT = Path(__file__).resolve().parents[1]
VENDOR = [ROOT.parent / "shared" / "vendor" / "ros2_launch", Path("/work/shared/vendor/ros2_launch")]
SEAT = "hybrid_vla_diffusion_seat.launch.xml"

# The arguments autoware_launch's include of the diffusion planner passes, with the values it passes (the
# defaults here); autoware_launch 662752e, tier4_universe_launch/tier4_planning_launch/launch/
# learning_based_planning/diffusion_planner.launch.xml. data_path and diffusion_planner_param_path are
# `$(var ...)` of the including file there: accepted here, unused, default empty.
INCLUDE_ARGUMENTS = {
    "data_path": "",
    "diffusion_planner_param_path": "",
    "input_odometry": "/localization/kinematic_state",
    "input_acceleration": "/localization/acceleration",
    "input_route": "/planning/mission_planning/route",
    "input_traffic_signals": "/perception/traffic_light_recognition/traffic_signals",
    "input_tracked_objects": "/perception/object_recognition/tracking/objects",
    "input_vector_map": "/map/vector_map",
    "input_turn_indicators": "/vehicle/status/turn_indicators_status",
    "debug/output_traffic_signal": "/planning/scenario_planning/lane_driving/behavior_planning/debug/traffic_signal",
    "output_trajectories": "/planning/generator/diffusion_planner/candidate_trajectories",
    "output_turn_indicators": "/planning/turn_indicators_cmd",
}
# The graph's own arguments
OWN_ARGUMENTS = {"output_trajectory", "output_processing_time", "hybrid_vla_prefix_param_path", "hybrid_vla_suffix_param_path",
                 "hybrid_vla_scheduler_param_path", "map_path", "lanelet2_map_file", "lanelet2_map_path", "use_sim_time", "single_process",
                 "prefix_cores", "suffix_cores"}
# autoware_launch 662752e autoware_launch/config/system/processing_time_checker/processing_time_checker.param.yaml
PROCESSING_TIME = "/planning/trajectory_generator/neural_network_based_planner/diffusion_planner_node/debug/processing_time_ms"
PROCESSOR_INPUT = "/planning/generator/diffusion_planner/candidate_trajectories"   # its input_trajectories there
VALIDATOR_OUTPUT = "/planning/trajectory"
PUSHED_NAMESPACE = "/planning/trajectory_generator/neural_network_based_planner"
NODES = ("hybrid_vla_prefix", "hybrid_vla_suffix", "hybrid_vla_scheduler")


@pytest.fixture
def launch_env(tmp_path, monkeypatch):
    """The launch packages importable and an install prefix holding this package's share/ (launch, config,
    package.xml, the ament index marker), as `colcon build` lays it out. -> the seat's installed path."""
    specs = [importlib.util.find_spec(name) for name in ("launch_ros", "launch_xml")]
    vendored = any(v.resolve() in Path(s.origin).resolve().parents for s in specs if s and s.origin for v in VENDOR)
    if vendored or not all(specs):   # the vendored launch (another test may have put it on the path): its ament
        vendor = next((v for v in VENDOR if (v / "site").is_dir()), None)
        if vendor is None:
            pytest.skip("neither an installed launch_ros nor ../shared/vendor/ros2_launch is available here")
        monkeypatch.syspath_prepend(str(vendor / "site"))
        monkeypatch.setenv("AMENT_PREFIX_PATH", f"{vendor / 'ament'}:{tmp_path / 'install'}")
    else:
        monkeypatch.setenv("AMENT_PREFIX_PATH", f"{tmp_path / 'install'}:" + __import__("os").environ.get(
            "AMENT_PREFIX_PATH", ""))
    share = tmp_path / "install" / "share" / "hybrid_vla_ros"
    shutil.copytree(ROOT / "launch", share / "launch")
    shutil.copytree(ROOT / "config", share / "config")
    shutil.copy(ROOT / "package.xml", share / "package.xml")
    index = tmp_path / "install" / "share" / "ament_index" / "resource_index" / "packages"
    index.mkdir(parents=True)
    (index / "hybrid_vla_ros").write_text("")
    return share / "launch" / SEAT


def evaluate(path: Path, arguments: dict, parent: dict | None = None, namespace: str | None = None):
    """The seat included as autoware_launch includes the diffusion planner: from a parent whose launch
    configurations are `parent`, under a pushed `namespace`, with `arguments`. Every action is visited as
    `ros2 launch` does, except that nodes are only expanded (name, namespace, parameters, remaps, arguments),
    never started. -> ({node name or executable: node}, the launch context)."""
    from launch import LaunchContext
    from launch.actions import IncludeLaunchDescription, SetLaunchConfiguration
    from launch.launch_description_sources import AnyLaunchDescriptionSource
    from launch.utilities import perform_substitutions
    from launch_ros.actions import Node, PushRosNamespace

    context = LaunchContext()
    entities = [SetLaunchConfiguration(k, v) for k, v in (parent or {}).items()]
    if namespace:
        entities.append(PushRosNamespace(namespace))
    entities.append(IncludeLaunchDescription(AnyLaunchDescriptionSource(str(path)),
                                             launch_arguments=list(arguments.items())))
    nodes = {}

    def walk(items):
        for entity in items:
            condition = getattr(entity, "condition", None)
            if condition is not None and not condition.evaluate(context):
                continue
            if isinstance(entity, Node):
                entity._perform_substitutions(context)
                named = entity.is_node_name_fully_specified()
                nodes[entity.node_name.rsplit("/", 1)[-1] if named
                      else perform_substitutions(context, entity.node_executable)] = entity
                continue
            walk(entity.visit(context) or [])

    walk(entities)
    return nodes, context


def remaps(node) -> dict:
    return dict(node.expanded_remapping_rules or [])


def parameters(node) -> tuple[list[str], dict]:
    """(the parameter files given, in order; the values given by name), as the node process would get them."""
    files, values = [], {}
    for argument, is_file in node._Node__expanded_parameter_arguments or []:
        if not is_file:
            name, _, value = argument.partition(":=")
            values[name] = yaml.safe_load(value)
            continue
        data = yaml.safe_load(Path(argument).read_text()) or {}
        if Path(argument).name.startswith("launch_params_"):   # launch_ros's file of the <param name=...>s
            for section in data.values():
                values.update(section["ros__parameters"])
        else:
            files.append(argument)
    return files, values


def graph_arguments(node, context) -> dict:
    """hybrid_vla_graph's command line as its argparse (ros/launch_support/bringup.py graph_main) reads it:
    {'params': {short: file}, 'set': {node: {param: YAML value}}, 'remap': {node: {from: to}}}."""
    from launch.utilities import perform_substitutions
    argv = [perform_substitutions(context, a) for a in node._Node__arguments]
    out = {"params": {}, "set": {}, "remap": {}}
    for flag, value in zip(argv[::2], argv[1::2]):
        if flag.endswith("-params"):
            out["params"][flag[2:].removesuffix("-params")] = value
        elif flag == "--set":
            target, _, raw = value.partition("=")
            assert raw, f"--set {value}: the graph refuses an empty value"
            name, _, param = target.partition(".")
            out["set"].setdefault(name, {})[param] = yaml.safe_load(raw)
        elif flag == "--remap":
            name, _, rule = value.partition(":")
            src, _, dst = rule.partition(":=")
            out["remap"].setdefault(name, {})[src] = dst
        else:
            raise AssertionError(f"unexpected graph argument {flag} {value}")
    return out


def test_the_seat_declares_the_diffusion_planner_includes_arguments_with_its_values_as_defaults(launch_env):
    from xml.etree import ElementTree
    root = ElementTree.parse(launch_env).getroot()
    declared = {a.get("name"): a.get("default") for a in root.iter("arg")}
    assert set(INCLUDE_ARGUMENTS) <= set(declared), set(INCLUDE_ARGUMENTS) - set(declared)
    assert {k: declared[k] for k in INCLUDE_ARGUMENTS} == INCLUDE_ARGUMENTS
    assert set(declared) == set(INCLUDE_ARGUMENTS) | OWN_ARGUMENTS   # nothing else to learn
    # the include as autoware_launch writes it (every argument given) is accepted: evaluated below
    nodes, context = evaluate(launch_env, dict(INCLUDE_ARGUMENTS, data_path="/data",
                                               diffusion_planner_param_path="/x/diffusion_planner.param.yaml"))
    assert set(nodes) == set(NODES)


def expected_remaps(args: dict) -> dict:
    return {
        "hybrid_vla_prefix": {"~/output/boundary_state": "/hybrid_vla/boundary_state",
                              "~/input/partition_point": "/hybrid_vla/partition_point",
                              "~/input/action_tokens": "/hybrid_vla/action_tokens",
                              "~/input/kinematic_state": args["input_odometry"],
                              "~/input/acceleration": args["input_acceleration"],
                              "~/input/route": args["input_route"],
                              "~/input/vector_map": args["input_vector_map"]},
        "hybrid_vla_suffix": {"~/input/boundary_state": "/hybrid_vla/boundary_state",
                              "~/output/action_tokens": "/hybrid_vla/action_tokens",
                              "~/input/kinematic_state": args["input_odometry"],
                              "~/input/route": args["input_route"],
                              "~/input/vector_map": args["input_vector_map"],
                              "~/output/trajectories": args["output_trajectories"],
                              "~/output/turn_indicators": args["output_turn_indicators"],
                              "~/output/trajectory": args["output_trajectory"],
                              # autoware_launch 662752e autoware_launch/config/system/processing_time_checker/
                              # processing_time_checker.param.yaml lists the diffusion planner's under this name
                              "~/debug/processing_time_ms": args["output_processing_time"]},
        "hybrid_vla_scheduler": {"~/output/partition_point": "/hybrid_vla/partition_point",
                                 "~/input/prefix_info": "/hybrid_vla_prefix/debug/frame_info",
                                 "~/input/trajectory_info": "/hybrid_vla_suffix/debug/trajectory_info",
                                 "~/input/prefix_step_info": "/hybrid_vla_prefix/debug/step_info",
                                 "~/input/suffix_step_info": "/hybrid_vla_suffix/debug/step_info"},
    }


def test_defaults_feed_the_trajectory_processor_never_the_validators_output(launch_env):
    from hybrid_vla_ros.ros.topics import (BOUNDARY_TOPIC, PARTITION_TOPIC, REMAPS, SEAT_CANDIDATES_TOPIC,
                                          SEAT_TURN_INDICATORS_TOPIC, TRAJECTORY_TOPIC)
    nodes, _ = evaluate(launch_env, {}, namespace=PUSHED_NAMESPACE)
    assert set(nodes) == set(NODES)
    defaults = dict(INCLUDE_ARGUMENTS, output_trajectory=TRAJECTORY_TOPIC, output_processing_time=PROCESSING_TIME)
    for name, node in nodes.items():
        assert node.expanded_node_namespace == "/", name   # the pushed namespace does not move the graph
        assert remaps(node) == expected_remaps(defaults)[name], name
        assert VALIDATOR_OUTPUT not in remaps(node).values(), name
    suffix = remaps(nodes["hybrid_vla_suffix"])
    assert suffix["~/output/trajectories"] == PROCESSOR_INPUT == SEAT_CANDIDATES_TOPIC
    assert suffix["~/output/trajectory"] == "/planning/hybrid_vla/trajectory"
    assert suffix["~/output/turn_indicators"] == SEAT_TURN_INDICATORS_TOPIC == "/planning/turn_indicators_cmd"
    # the graph's own topics are the graph's (ros/topics.py), as in hybrid_vla.launch.xml
    assert suffix["~/input/boundary_state"] == BOUNDARY_TOPIC == REMAPS["hybrid_vla_prefix"]["~/output/boundary_state"]
    assert remaps(nodes["hybrid_vla_scheduler"]) == REMAPS["hybrid_vla_scheduler"]
    assert remaps(nodes["hybrid_vla_prefix"])["~/input/partition_point"] == PARTITION_TOPIC


def test_parameter_files_cores_time_and_map_reach_each_node(launch_env, tmp_path):
    share = launch_env.parents[1]
    nodes, _ = evaluate(launch_env, {})
    for name, node in nodes.items():
        files, values = parameters(node)
        assert files == [str(share / "config" / f"{name}.param.yaml")], name
        assert values["use_sim_time"] is False
        if name != "hybrid_vla_scheduler":
            assert values["cores"] == [-1] and values["map_path"] == "", name   # no map_path in the parent
        else:
            assert "map_path" not in values and "cores" not in values

    mine = {n: tmp_path / f"my_{n}.param.yaml" for n in NODES}
    for n, path in mine.items():
        shutil.copy(share / "config" / f"{n}.param.yaml", path)
    given = {f"{n}_param_path": str(p) for n, p in mine.items()}
    nodes, _ = evaluate(launch_env, {**given, "lanelet2_map_path": "/maps/town/lanelet2_map.osm",
                                     "prefix_cores": "[0,1]", "suffix_cores": "[2,3]"},
                        parent={"use_sim_time": "true"})
    for name, node in nodes.items():
        files, values = parameters(node)
        assert files == [str(mine[name])], name
        assert values["use_sim_time"] is True, name   # the including file's use_sim_time
        if name != "hybrid_vla_scheduler":
            assert values["map_path"] == "/maps/town/lanelet2_map.osm"
    assert parameters(nodes["hybrid_vla_prefix"])[1]["cores"] == [0, 1]
    assert parameters(nodes["hybrid_vla_suffix"])[1]["cores"] == [2, 3]


def test_the_map_path_comes_from_autoware_launchs_map_path_and_lanelet2_map_file(launch_env):
    """Where the including launch declares map_path (autoware_launch's autoware.launch.xml and the simulators'
    entry files do) the nodes get $(var map_path)/$(var lanelet2_map_file), what tier4_map_component.launch.xml
    gives the lanelet2 map loader; lanelet2_map_path given wins."""
    nodes, _ = evaluate(launch_env, {}, parent={"map_path": "/maps/town"})
    assert parameters(nodes["hybrid_vla_suffix"])[1]["map_path"] == "/maps/town/lanelet2_map.osm"
    nodes, _ = evaluate(launch_env, {}, parent={"map_path": "/maps/town", "lanelet2_map_file": "town.osm"})
    assert parameters(nodes["hybrid_vla_prefix"])[1]["map_path"] == "/maps/town/town.osm"
    nodes, _ = evaluate(launch_env, {"lanelet2_map_path": "/elsewhere/m.osm"}, parent={"map_path": "/maps/town"})
    assert parameters(nodes["hybrid_vla_suffix"])[1]["map_path"] == "/elsewhere/m.osm"


def test_overridden_arguments_are_wired(launch_env):
    given = {"input_odometry": "/t/odom", "input_acceleration": "/t/accel", "input_route": "/t/route",
             "input_vector_map": "/t/map", "output_trajectories": "/t/candidates",
             "output_turn_indicators": "/t/turn_indicators", "output_trajectory": "/t/trajectory",
             "output_processing_time": "/t/processing_time_ms"}
    nodes, _ = evaluate(launch_env, given, namespace=PUSHED_NAMESPACE)
    expected = expected_remaps(dict(INCLUDE_ARGUMENTS, **given))
    for name, node in nodes.items():
        assert remaps(node) == expected[name], name


@pytest.mark.parametrize("map_path", ["", "/maps/town/lanelet2_map.osm"], ids=["no-map", "map"])
def test_single_process_gets_the_same_wiring_on_the_graphs_command_line(launch_env, map_path):
    given = {"single_process": "true", "output_trajectories": "/t/candidates", "input_route": "/t/route",
             "lanelet2_map_path": map_path, "use_sim_time": "true"}
    nodes, context = evaluate(launch_env, given, namespace=PUSHED_NAMESPACE)
    assert set(nodes) == {"hybrid_vla_graph"}
    graph = nodes["hybrid_vla_graph"]
    assert graph.expanded_node_namespace == "/"
    argv = graph_arguments(graph, context)
    share = launch_env.parents[1]
    assert argv["params"] == {s: str(share / "config" / f"hybrid_vla_{s}.param.yaml")
                              for s in ("prefix", "suffix", "scheduler")}
    args = dict(INCLUDE_ARGUMENTS, **given, output_trajectory="/planning/hybrid_vla/trajectory",
                output_processing_time=PROCESSING_TIME)
    expected = expected_remaps(args)
    for name in ("hybrid_vla_prefix", "hybrid_vla_suffix"):   # the Autoware-facing ones (the graph's own: topics.py)
        autoware_facing = {k: v for k, v in expected[name].items() if not v.startswith("/hybrid_vla")}
        assert argv["remap"][name] == autoware_facing, name
        assert argv["set"][name]["map_path"] == map_path
        assert argv["set"][name]["cores"] == [-1]
    assert all(argv["set"][n]["use_sim_time"] is True for n in NODES)
    assert VALIDATOR_OUTPUT not in [v for rules in argv["remap"].values() for v in rules.values()]


def test_setup_installs_every_launch_file():
    source = (ROOT / "setup.py").read_text()
    assert 'glob("launch/*.py") + glob("launch/*.xml")' in source
    assert (ROOT / "launch" / SEAT).is_file()


if __name__ == "__main__":
    sys.exit(pytest.main([__file__, "-q"]))
