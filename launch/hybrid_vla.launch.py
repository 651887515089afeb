"""ros2 launch hybrid_vla_ros hybrid_vla.launch.py [single_process:=true] [prefix_param_file:=...] ...

Separate processes (default): one process per node, the suffix pinned through its numa_node / cores
parameters. single_process:=true: all three nodes in one process (zero-copy boundary handover).
Topics follow Autoware conventions and are remappable through the launch arguments below.
"""

from launch import LaunchDescription
from launch.actions import DeclareLaunchArgument
from launch.conditions import IfCondition, UnlessCondition
from launch.substitutions import LaunchConfiguration, PathJoinSubstitution
from launch_ros.actions import LifecycleNode, Node
from launch_ros.substitutions import FindPackageShare

PACKAGE = "hybrid_vla_ros"
BOUNDARY_TOPIC = "/hybrid_vla/boundary_state"
PARTITION_TOPIC = "/hybrid_vla/partition_point"


def generate_launch_description():
    config = PathJoinSubstitution([FindPackageShare(PACKAGE), "config"])
    args = [
        DeclareLaunchArgument("single_process", default_value="false",
                              description="all three nodes in one process (zero-copy handover)"),
        DeclareLaunchArgument("prefix_param_file",
                              default_value=PathJoinSubstitution([config, "hybrid_vla_prefix.param.yaml"])),
        DeclareLaunchArgument("suffix_param_file",
                              default_value=PathJoinSubstitution([config, "hybrid_vla_suffix.param.yaml"])),
        DeclareLaunchArgument("scheduler_param_file",
                              default_value=PathJoinSubstitution([config, "hybrid_vla_scheduler.param.yaml"])),
        DeclareLaunchArgument("input/kinematic_state", default_value="/localization/kinematic_state"),
        DeclareLaunchArgument("output/trajectory", default_value="/planning/hybrid_vla/trajectory"),
    ]
    single = LaunchConfiguration("single_process")
    prefix = Node(package=PACKAGE, executable="hybrid_vla_prefix", name="hybrid_vla_prefix", output="screen",
                  parameters=[LaunchConfiguration("prefix_param_file")],
                  remappings=[("~/input/kinematic_state", LaunchConfiguration("input/kinematic_state")),
                              ("~/output/boundary_state", BOUNDARY_TOPIC),
                              ("~/input/partition_point", PARTITION_TOPIC)],
                  condition=UnlessCondition(single))
    suffix = Node(package=PACKAGE, executable="hybrid_vla_suffix", name="hybrid_vla_suffix", output="screen",
                  parameters=[LaunchConfiguration("suffix_param_file")],
                  remappings=[("~/input/boundary_state", BOUNDARY_TOPIC),
                              ("~/output/trajectory", LaunchConfiguration("output/trajectory"))],
                  condition=UnlessCondition(single))
    scheduler = LifecycleNode(package=PACKAGE, executable="hybrid_vla_scheduler", name="hybrid_vla_scheduler",
                              namespace="", output="screen",
                              parameters=[LaunchConfiguration("scheduler_param_file")],
                              remappings=[("~/output/partition_point", PARTITION_TOPIC)],
                              condition=UnlessCondition(single))
    graph = Node(package=PACKAGE, executable="hybrid_vla_graph", name="hybrid_vla_graph", output="screen",
                 arguments=["--prefix-params", LaunchConfiguration("prefix_param_file"),
                            "--suffix-params", LaunchConfiguration("suffix_param_file"),
                            "--scheduler-params", LaunchConfiguration("scheduler_param_file")],
                 condition=IfCondition(single))
    return LaunchDescription(args + [prefix, suffix, scheduler, graph])
