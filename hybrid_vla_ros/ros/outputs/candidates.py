"""The suffix as one trajectory generator among others (Autoware's generator-selector framework):
`~/output/trajectories` carries autoware_internal_planning_msgs/CandidateTrajectories beside the Trajectory.

One candidate per published trajectory (a model with several heads or passes gives one per head: pass them
all to `candidates_to_msg`), with the Trajectory's header (stamp and frame) and points. `generator_id` is
uuid5 of the `generator_name` parameter: the same at every start of the graph, so a selector (Autoware's
trajectory concatenator keeps the newest set per generator_id) sees one generator across restarts and
takeovers, and two generators of one car differ by their names. Published only where the Autoware message
packages are importable (a sourced Autoware install); elsewhere the start-up log says why.

The turn indicators: autoware_internal_msgs 1.14.0 added `autoware_vehicle_msgs/TurnIndicatorsCommand
turn_indicators_command` to CandidateTrajectory (msgs/README.md); 1.12.1 and before have no such field. The
field is found by its type among the imported class's own fields (`indicator_field`), never by a name guess:
under the newer version each candidate carries the command the suffix publishes on `~/output/turn_indicators`;
under the older one the candidates go out without it and the command goes out only on that topic.
"""

from __future__ import annotations

import uuid

from ...errors import ConfigError, expect
from ..messages import ns_to_stamp, trajectory_points

# The namespace of generator ids: fixed forever (changing it would change every generator's id).
GENERATOR_NAMESPACE = uuid.uuid5(uuid.NAMESPACE_URL, "urn:hybrid_vla_ros:trajectory_generator")
CANDIDATES_TYPE = "autoware_internal_planning_msgs/msg/CandidateTrajectories"
INDICATOR_TYPE = "autoware_vehicle_msgs/TurnIndicatorsCommand"   # as get_fields_and_field_types() names it


def generator_uuid(name: str) -> uuid.UUID:
    """The generator id of `name`: uuid5 in GENERATOR_NAMESPACE (no randomness: stable across restarts)."""
    expect(isinstance(name, str) and name.strip() != "", ConfigError,
           f"generator_name={name!r}: must not be empty (it names this generator to Autoware's selector)")
    return uuid.uuid5(GENERATOR_NAMESPACE, name)


def candidate_types():
    """-> (classes, reason): a dict of the message classes, or None with why they are not importable."""
    try:
        from autoware_internal_planning_msgs.msg import CandidateTrajectories, CandidateTrajectory, GeneratorInfo
        from autoware_planning_msgs.msg import TrajectoryPoint
    except ImportError as exc:
        return None, f"{exc.name} not importable: no ~/output/trajectories"
    return {"CandidateTrajectories": CandidateTrajectories, "CandidateTrajectory": CandidateTrajectory,
            "GeneratorInfo": GeneratorInfo, "TrajectoryPoint": TrajectoryPoint,
            "indicator_field": indicator_field(CandidateTrajectory)}, "importable"


def indicator_field(candidate_class) -> str | None:
    """The one field of `candidate_class` (a CandidateTrajectory message class) whose type is
    TurnIndicatorsCommand, read from the class's own fields: `turn_indicators_command` in the newer version;
    None where there is none (1.12.1 and before) or, ambiguously, more than one."""
    fields = candidate_class.get_fields_and_field_types()
    named = [name for name, kind in fields.items() if kind == INDICATOR_TYPE]
    return named[0] if len(named) == 1 else None


def fill_uuid(msg, generator_id: uuid.UUID):
    """unique_identifier_msgs/UUID <- the 16 bytes of generator_id."""
    msg.uuid = list(generator_id.bytes)
    return msg


def candidates_to_msg(stamp_ns: int, frame_id: str, candidates: list, generator_id: uuid.UUID, name: str, types,
                      z: float = 0.0, turn_indicators=None):
    """candidates: each an (N, 5) array of points (at height z), or a list of TrajectoryPoint messages already
    made (the Trajectory's own). -> CandidateTrajectories with one CandidateTrajectory each and one GeneratorInfo.
    turn_indicators: a TurnIndicatorsCommand for each candidate, in the field `types["indicator_field"]`
    names (the newer version's `turn_indicators_command`); with None there (the older version) it is left out."""
    msg = types["CandidateTrajectories"]()
    field = types["indicator_field"]
    for points in candidates:
        candidate = types["CandidateTrajectory"]()
        if turn_indicators is not None and field is not None:
            setattr(candidate, field, turn_indicators)
        candidate.header.frame_id = frame_id
        ns_to_stamp(stamp_ns, candidate.header.stamp)
        fill_uuid(candidate.generator_id, generator_id)
        is_messages = len(points) and isinstance(points[0], types["TrajectoryPoint"])
        candidate.points = list(points) if is_messages else trajectory_points(points, types["TrajectoryPoint"], z)
        msg.candidate_trajectories.append(candidate)
    info = types["GeneratorInfo"]()
    fill_uuid(info.generator_id, generator_id)
    info.generator_name.data = name
    msg.generator_info.append(info)
    return msg


class CandidateOutput:
    """The suffix node's `~/output/trajectories` publisher (created at configure, with the node's other
    configured entities), or nothing where the message packages are missing (`reason` says so)."""

    def __init__(self, node, name: str, depth: int = 10):
        self.name, self.generator_id = name, generator_uuid(name)
        self.types, self.reason = candidate_types()
        self.pub = node.configured_publisher(self.types["CandidateTrajectories"], "~/output/trajectories",
                                             depth) if self.types else None

    def describe(self) -> str:
        if self.pub is None:
            return self.reason
        return (f"CandidateTrajectories on ~/output/trajectories, generator '{self.name}' id {self.generator_id}, "
                f"{self.describe_version()}")

    def describe_version(self) -> str:
        field = self.types["indicator_field"] if self.types else None
        if field is not None:
            return f"each candidate carrying the turn indicators command in '{field}'"
        return ("no TurnIndicatorsCommand field in this CandidateTrajectory (the older version, 1.12.1 and before): "
                "the turn indicators command goes out only on ~/output/turn_indicators")

    def publish(self, trajectory_msg, points, stamp_ns: int, frame_id: str, z: float = 0.0,
                turn_indicators=None) -> None:
        """The candidate of a published Trajectory: its points when they are Autoware's TrajectoryPoints,
        else made from the (N, 5) points at height z (a nav_msgs/Path or autoware_auto output)."""
        if self.pub is None:
            return
        own = getattr(trajectory_msg, "points", None)
        same = own is not None and len(own) and isinstance(own[0], self.types["TrajectoryPoint"])
        self.pub.publish(candidates_to_msg(stamp_ns, frame_id, [own if same else points], self.generator_id,
                                           self.name, self.types, z, turn_indicators))
