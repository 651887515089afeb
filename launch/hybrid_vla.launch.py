"""ros2 launch hybrid_vla_ros hybrid_vla.launch.py [single_process:=true] [prefix_param_file:=...] ...

Separate processes (default): one process per node. single_process:=true: the three nodes in one process
(zero-copy boundary handover). Every node is a lifecycle node and brings itself to active (`autostart`, a
parameter: no lifecycle event handlers needed, so this works the same on Humble, Jazzy and Kilted);
`ros2 lifecycle` works on each. A node process that dies (crash, OOM, SIGKILL) is started again after
RESPAWN_DELAY_S (plain values, not substitutions: Humble's launch takes only those); the others keep
running (docs/RELIABILITY.md). Prefix and suffix are pinned to disjoint core sets by default (their
`cores: [-1]`), or to `prefix_cores` / `suffix_cores`. Topic names and remaps come from
hybrid_vla_ros.ros.topics, the module the nodes and `hybrid-vla graph` use too. warm_standby:=true (separate
processes): a second suffix process, `hybrid_vla_suffix_standby`, weights loaded, that takes over within a
second when the active suffix goes silent (docs/RELIABILITY.md, *Warm standby*).
"""

from launch import LaunchDescription
from launch.actions import DeclareLaunchArgument
from launch.conditions import IfCondition, UnlessCondition
from launch.substitutions import LaunchConfiguration, PathJoinSubstitution, PythonExpression
from launch_ros.actions import LifecycleNode, Node
from launch_ros.substitutions import FindPackageShare

from hybrid_vla_ros.ros.topics import (ACCELERATION_TOPIC, KINEMATIC_TOPIC, LAUNCH_CANDIDATES_TOPIC,
                                      LAUNCH_TRAJECTORY_TOPIC, NODES, REMAPS, ROUTE_TOPIC, STANDBY_NODE,
                                      STANDBY_REMAPS, TURN_INDICATORS_TOPIC)

PACKAGE = "hybrid_vla_ros"
RESPAWN_DELAY_S = 1.0
ARGUMENTS = {
    "single_process": ("false", "all three nodes in one process (zero-copy handover)"),
    "input/kinematic_state": (KINEMATIC_TOPIC, "odometry the prefix reads (nav_msgs/Odometry)"),
    "input/route": (ROUTE_TOPIC, "the route prefix and suffix read (autoware_planning_msgs/LaneletRoute)"),
    "input/acceleration": (ACCELERATION_TOPIC, "acceleration the prefix reads "
                           "(geometry_msgs/AccelWithCovarianceStamped)"),
    "output/trajectory": (LAUNCH_TRAJECTORY_TOPIC, "where the suffix publishes the trajectory (the package's own "
                          "name: /planning/trajectory is the planning validator's output)"),
    "output/trajectories": (LAUNCH_CANDIDATES_TOPIC, "where the suffix publishes its CandidateTrajectories (in "
                            "the diffusion planner's seat: hybrid_vla_diffusion_seat.launch.xml)"),
    "output/turn_indicators": (TURN_INDICATORS_TOPIC, "where the suffix publishes its TurnIndicatorsCommand"),
    "use_sim_time": ("false", "use /clock (a bag played with --clock)"),
    "warm_standby": ("false", "a second suffix process that takes over within a second (separate processes only)"),
    "prefix_cores": ("[-1]", "cores of the prefix worker; [-1]: its half of a default split"),
    "suffix_cores": ("[-1]", "cores of the suffix worker; [-1]: its half of a default split"),
}


# The Autoware-facing topics: a launch argument each, named after the node-relative topic it remaps.
LAUNCH_TOPICS = ("input/kinematic_state", "input/route", "input/acceleration", "output/trajectory",
                 "output/trajectories", "output/turn_indicators")


def remaps(node: str) -> list[tuple]:
    """The graph's remaps, with the Autoware-facing topics taken from the launch arguments."""
    rules = dict(STANDBY_REMAPS if node == STANDBY_NODE else REMAPS[node])
    for topic in LAUNCH_TOPICS:
        if f"~/{topic}" in rules:
            rules[f"~/{topic}"] = LaunchConfiguration(topic)
    return list(rules.items())


def overrides(node: str) -> dict:
    values = {"use_sim_time": LaunchConfiguration("use_sim_time")}
    short = node.removeprefix("hybrid_vla_")
    if short in ("prefix", "suffix", "suffix_standby"):
        values["cores"] = LaunchConfiguration(f"{short.removesuffix('_standby')}_cores")
    if short in ("suffix", "suffix_standby"):
        values["warm_standby"] = LaunchConfiguration("warm_standby")
    return values


def generate_launch_description():
    config = PathJoinSubstitution([FindPackageShare(PACKAGE), "config"])
    args = [DeclareLaunchArgument(name, default_value=default, description=text)
            for name, (default, text) in ARGUMENTS.items()]
    args += [DeclareLaunchArgument(f"{node.removeprefix('hybrid_vla_')}_param_file",
                                   default_value=PathJoinSubstitution([config, f"{node}.param.yaml"]))
             for node in NODES]
    single = LaunchConfiguration("single_process")
    nodes = [LifecycleNode(package=PACKAGE, executable=node, name=node, namespace="", output="screen",
                           parameters=[LaunchConfiguration(f"{node.removeprefix('hybrid_vla_')}_param_file"),
                                       overrides(node)],
                           remappings=remaps(node), condition=UnlessCondition(single),
                           respawn=True, respawn_delay=RESPAWN_DELAY_S)
             for node in NODES]
    standby_wanted = PythonExpression(["'", LaunchConfiguration("warm_standby"), "' == 'true' and '", single,
                                       "' != 'true'"])
    nodes.append(LifecycleNode(package=PACKAGE, executable="hybrid_vla_suffix", name=STANDBY_NODE, namespace="",
                               output="screen", parameters=[LaunchConfiguration("suffix_param_file"),
                                                            overrides(STANDBY_NODE)],
                               remappings=remaps(STANDBY_NODE), condition=IfCondition(standby_wanted),
                               respawn=True, respawn_delay=RESPAWN_DELAY_S))
    graph_args = []
    for node in NODES:
        short = node.removeprefix("hybrid_vla_")
        graph_args += [f"--{short}-params", LaunchConfiguration(f"{short}_param_file")]
        graph_args += ["--set", [f"{node}.use_sim_time=", LaunchConfiguration("use_sim_time")]]
        if short in ("prefix", "suffix"):
            graph_args += ["--set", [f"{node}.cores=", LaunchConfiguration(f"{short}_cores")]]
        graph_args += [item for src, dst in remaps(node) for item in ("--remap", [f"{node}:{src}:=", dst])]
    # No `name`: a launch-given node name would be a process-wide rename; the three nodes keep their own.
    graph = Node(package=PACKAGE, executable="hybrid_vla_graph", output="screen", arguments=graph_args,
                 condition=IfCondition(single), respawn=True, respawn_delay=RESPAWN_DELAY_S)
    return LaunchDescription(args + nodes + [graph])
