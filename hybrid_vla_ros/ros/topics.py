"""Topic names, remaps and QoS of the graph, in one place: used by the nodes, bringup, the demo and the
launch files. Node-relative names (`~/input/...`, `~/output/...`) follow Autoware; the graph-level names
below are what bringup and the launch files remap them to."""

from __future__ import annotations

from rclpy.qos import DurabilityPolicy, QoSProfile

NODES = ("hybrid_vla_prefix", "hybrid_vla_suffix", "hybrid_vla_scheduler")

BOUNDARY_TOPIC = "/hybrid_vla/boundary_state"
# Action-token models: each packed step's next tokens, suffix -> prefix (the prefix needs them for its next step).
ACTION_TOKENS_TOPIC = "/hybrid_vla/action_tokens"
PARTITION_TOPIC = "/hybrid_vla/partition_point"
SUFFIX_ROLE_TOPIC = "/hybrid_vla/suffix_role"   # warm standby: the active suffix's heartbeat (ros/nodes/standby.py)
STANDBY_NODE = "hybrid_vla_suffix_standby"      # the standby suffix's node name (the suffix's parameters)
# The package's own names: `hybrid-vla graph` and the launch files' defaults. Nothing of Autoware reads them, so
# the graph can run beside a running stack without feeding its planning chain (docs/INTERFACES.md, "Beside
# Autoware"). autoware_launch's `/planning/trajectory` is the planning_validator's *output* (autoware_launch
# tier4_universe_launch/tier4_planning_launch/launch/planning.launch.xml): publishing there would bypass the
# validator, so no default of this package is that topic.
TRAJECTORY_TOPIC = "/planning/hybrid_vla/trajectory"
LAUNCH_TRAJECTORY_TOPIC = TRAJECTORY_TOPIC          # hybrid_vla.launch.{xml,py} `output/trajectory`
# CandidateTrajectories (autoware_internal_planning_msgs): `hybrid-vla graph`'s name, and the launch files'
# default, beside the diffusion planner's /planning/generator/diffusion_planner/candidate_trajectories; it
# feeds nothing until remapped.
CANDIDATES_TOPIC = "/planning/hybrid_vla/candidate_trajectories"
LAUNCH_CANDIDATES_TOPIC = "/planning/generator/hybrid_vla/candidate_trajectories"
# Turn indicators (autoware_vehicle_msgs/TurnIndicatorsCommand): the package's own name beside a running stack
# (Autoware's command topic has its own publisher there).
TURN_INDICATORS_TOPIC = "/planning/hybrid_vla/turn_indicators_cmd"
# Inputs, Autoware's names: the route (autoware_planning_msgs/LaneletRoute, the mission planner's output) and
# the acceleration (geometry_msgs/AccelWithCovarianceStamped), as the diffusion planner's launch remaps them.
ROUTE_TOPIC = "/planning/mission_planning/route"
ACCELERATION_TOPIC = "/localization/acceleration"
# The diffusion planner's seat (launch/hybrid_vla_diffusion_seat.launch.xml): the topics its include in
# autoware_launch wires (tier4_universe_launch/tier4_planning_launch/launch/learning_based_planning/
# diffusion_planner.launch.xml, autoware_launch 662752e): the candidates go to autoware_trajectory_processor's
# `input_trajectories`, which publishes /planning/trajectory_generator/trajectory, the validator's input.
SEAT_CANDIDATES_TOPIC = "/planning/generator/diffusion_planner/candidate_trajectories"
SEAT_TURN_INDICATORS_TOPIC = "/planning/turn_indicators_cmd"
VECTOR_MAP_TOPIC = "/map/vector_map"
KINEMATIC_TOPIC = "/localization/kinematic_state"
TRAJECTORY_INFO_TOPIC = "/hybrid_vla_suffix/debug/trajectory_info"   # per frame: partition, suffix_ms, ...
PREFIX_INFO_TOPIC = "/hybrid_vla_prefix/debug/frame_info"             # per frame: partition, prefix_ms, ...
# Action-token models: per packed step, each side's time (joined by step in the scheduler)
PREFIX_STEP_TOPIC = "/hybrid_vla_prefix/debug/step_info"
SUFFIX_STEP_TOPIC = "/hybrid_vla_suffix/debug/step_info"

REMAPS = {
    "hybrid_vla_prefix": {"~/output/boundary_state": BOUNDARY_TOPIC, "~/input/partition_point": PARTITION_TOPIC,
                          "~/input/kinematic_state": KINEMATIC_TOPIC, "~/input/action_tokens": ACTION_TOKENS_TOPIC,
                          "~/input/route": ROUTE_TOPIC, "~/input/acceleration": ACCELERATION_TOPIC,
                          "~/input/vector_map": VECTOR_MAP_TOPIC},
    "hybrid_vla_suffix": {"~/input/boundary_state": BOUNDARY_TOPIC, "~/output/trajectory": TRAJECTORY_TOPIC,
                          "~/output/trajectories": CANDIDATES_TOPIC,
                          "~/input/kinematic_state": KINEMATIC_TOPIC, "~/output/action_tokens": ACTION_TOKENS_TOPIC,
                          "~/input/route": ROUTE_TOPIC, "~/input/vector_map": VECTOR_MAP_TOPIC,
                          "~/output/turn_indicators": TURN_INDICATORS_TOPIC},
    "hybrid_vla_scheduler": {"~/output/partition_point": PARTITION_TOPIC, "~/input/prefix_info": PREFIX_INFO_TOPIC,
                             "~/input/trajectory_info": TRAJECTORY_INFO_TOPIC,
                             "~/input/prefix_step_info": PREFIX_STEP_TOPIC, "~/input/suffix_step_info": SUFFIX_STEP_TOPIC},
}

# The standby suffix (ros/nodes/standby.py) takes the suffix's topics, and its debug topics are the suffix's:
# consumers (the scheduler, the benches, Autoware's tools) see one suffix, whichever is active.
STANDBY_REMAPS = {**REMAPS["hybrid_vla_suffix"], "~/debug/trajectory_info": TRAJECTORY_INFO_TOPIC,
                  "~/debug/step_info": SUFFIX_STEP_TOPIC,
                  "~/debug/dropped_frames": "/hybrid_vla_suffix/debug/dropped_frames"}

# Boundary: reliable, keep last 10, transient local: a suffix that starts after the prefix still gets the
# latest states (stale ones are then rejected and counted, never silently lost).
BOUNDARY_QOS = QoSProfile(depth=10, durability=DurabilityPolicy.TRANSIENT_LOCAL)
# Action tokens: reliable, volatile (a token answers one step; a late joiner has no use for old ones).
TOKENS_QOS = QoSProfile(depth=50)
# Partition point: the current value for late joiners.
PARTITION_QOS = QoSProfile(depth=1, durability=DurabilityPolicy.TRANSIENT_LOCAL)
# Lost frames (~/debug/dropped_frames): kept for a reader that matches late (a node's writer and a reader match
# separately: a frame lost just after start-up or a respawn was reported to nobody, and a frame nothing accounts
# for looked lost silently), and deep enough for the largest burst: a suffix's takeover reports at once up to
# two queues of frames (64 each: those that do not fit, then the stalest refused as too old), the prefix's
# shutdown its waiting frames. At 50, a reader busy for such a burst kept the newest 50 and lost the rest
# (issue 50: 7 frames of the warm-standby kill test). ~200 bytes a report: 1000 of them are ~200 KB a writer.
LOST_DEPTH = 1000
LOST_QOS = QoSProfile(depth=LOST_DEPTH, durability=DurabilityPolicy.TRANSIENT_LOCAL)
