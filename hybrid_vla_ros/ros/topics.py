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
TRAJECTORY_TOPIC = "/planning/hybrid_vla/trajectory"
# The launch files' default output: where Autoware's end-to-end planners publish (autoware_launch remaps the
# end-to-end planner's output there); `hybrid-vla graph` keeps the package's own name beside a running stack.
LAUNCH_TRAJECTORY_TOPIC = "/planning/trajectory"
# CandidateTrajectories (Autoware's generator-selector framework): `hybrid-vla graph`'s name, and the launch
# files' default beside the diffusion planner's /planning/generator/diffusion_planner/candidate_trajectories.
# The selector of autoware_launch's e2e planning reads /planning/generator/candidate_trajectories
# (docs/INTERFACES.md, "One generator among others").
CANDIDATES_TOPIC = "/planning/hybrid_vla/candidate_trajectories"
LAUNCH_CANDIDATES_TOPIC = "/planning/generator/hybrid_vla/candidate_trajectories"
KINEMATIC_TOPIC = "/localization/kinematic_state"
TRAJECTORY_INFO_TOPIC = "/hybrid_vla_suffix/debug/trajectory_info"   # per frame: partition, suffix_ms, ...
PREFIX_INFO_TOPIC = "/hybrid_vla_prefix/debug/frame_info"             # per frame: partition, prefix_ms, ...
# Action-token models: per packed step, each side's time (joined by step in the scheduler)
PREFIX_STEP_TOPIC = "/hybrid_vla_prefix/debug/step_info"
SUFFIX_STEP_TOPIC = "/hybrid_vla_suffix/debug/step_info"

REMAPS = {
    "hybrid_vla_prefix": {"~/output/boundary_state": BOUNDARY_TOPIC, "~/input/partition_point": PARTITION_TOPIC,
                          "~/input/kinematic_state": KINEMATIC_TOPIC, "~/input/action_tokens": ACTION_TOKENS_TOPIC},
    "hybrid_vla_suffix": {"~/input/boundary_state": BOUNDARY_TOPIC, "~/output/trajectory": TRAJECTORY_TOPIC,
                          "~/output/trajectories": CANDIDATES_TOPIC,
                          "~/input/kinematic_state": KINEMATIC_TOPIC, "~/output/action_tokens": ACTION_TOKENS_TOPIC},
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
