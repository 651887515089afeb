"""The route as the model's navigation input (ROS-free): a lanelet2 map and Autoware's LaneletRoute as plain
data -> the next maneuver, the goal and a target point in the ego frame (Navigation, types.py) -> the prompt's
instruction and the turn indicator. The ROS side is ros/inputs/route_input.py."""

from ..types import NAV_COMMANDS, Navigation
from .lanes import Lane, LaneMap, load_map
from .map_bytes import load_map_bytes
from .navigate import Route, navigate, next_turn, why_default
from .text import DEFAULT_TEMPLATE, check_template, instruction, release_route_text, turn_indicator

__all__ = ["NAV_COMMANDS", "Navigation", "Lane", "LaneMap", "load_map", "load_map_bytes", "Route", "navigate",
           "next_turn", "why_default", "DEFAULT_TEMPLATE", "check_template", "instruction", "release_route_text",
           "turn_indicator"]
