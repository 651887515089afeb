"""The suffix's turn indicators: autoware_vehicle_msgs/TurnIndicatorsCommand on `~/output/turn_indicators`
(Autoware's planning output `/planning/turn_indicators_cmd`), one per published trajectory, stamped with it.

The command comes from the route's next maneuver seen from the ego's newest pose (ros/inputs/route_input.py,
hybrid_vla_ros/route/): ENABLE_LEFT / ENABLE_RIGHT before a turn or lane change within the route's signal
distance, else DISABLE (Autoware's interface: NO_COMMAND is never sent as a topic). The newer
CandidateTrajectory (1.14.0) carries the same command in `turn_indicators_command`; the older (1.12.1) has no
such field and gets none (ros/outputs/candidates.py). Published only where autoware_vehicle_msgs is importable;
elsewhere the start-up log says why.
"""

from __future__ import annotations

from ...route import turn_indicator
from ...types import Pose2D
from ..messages import ns_to_stamp
from ..inputs.route_input import RouteInput

TURN_INDICATORS_QOS_DEPTH = 1   # Autoware's interface: reliable, depth 1 (the newest command is the command)


def indicator_type():
    """-> (TurnIndicatorsCommand class or None, why)."""
    try:
        from autoware_vehicle_msgs.msg import TurnIndicatorsCommand
    except ImportError as exc:
        return None, f"{exc.name} not importable: no ~/output/turn_indicators"
    return TurnIndicatorsCommand, "importable"


class TurnSignalOutput:
    """The suffix's route input (~/input/route on the map of `map_path`) and its turn indicators."""

    def __init__(self, node):
        self.node = node
        self.route = RouteInput(node, node.params)   # its subscriptions live with the node's configured ones
        self.cls, self.reason = indicator_type()
        self.pub = node.configured_publisher(self.cls, "~/output/turn_indicators", TURN_INDICATORS_QOS_DEPTH) \
            if self.cls is not None else None
        self.sent = {"left": 0, "right": 0, "none": 0}

    def describe(self) -> str:
        if self.cls is None:
            return self.reason
        return "TurnIndicatorsCommand on ~/output/turn_indicators from the route's next maneuver at the ego's pose"

    def command(self, stamp_ns: int, pose: Pose2D | None, speed_mps: float = 0.0):
        """The command for a trajectory stamped `stamp_ns` with the ego at `pose` (map frame; None: unknown,
        e.g. frame_id base_link -> DISABLE) moving at speed_mps (the search distance grows with it, as
        Autoware's turn signal decider's); None where the message type is missing."""
        if self.cls is None:
            return None
        side = turn_indicator(self.route.navigation(pose), speed_mps=speed_mps) if pose is not None else "none"
        msg = self.cls(command={"left": self.cls.ENABLE_LEFT, "right": self.cls.ENABLE_RIGHT}.get(
            side, self.cls.DISABLE))
        ns_to_stamp(stamp_ns, msg.stamp)
        self.sent[side] += 1
        return msg

    def publish(self, msg) -> None:
        if self.pub is not None and msg is not None:
            self.pub.publish(msg)

    def checks(self) -> list:
        """The route's `navigation` diagnostic and the indicators sent (by side)."""
        return [self.route.check(),
                ("turn_indicators", 0, self.describe(), {f"sent_{k}": str(v) for k, v in self.sent.items()})]
