"""Navigation -> the prompt's instruction and the turn indicator (ROS-free).

Instruction template: a Python format string over the fields {command}, {distance_m}, {goal_x}, {goal_y},
{target_x}, {target_y} (metres; goal and target in the ego frame, x forward, y left). A checkpoint names its
own in its spec (model/spec.py `instruction_template`); empty: DEFAULT_TEMPLATE, e.g. "turn left in 35 m".

Turn indicator: as Autoware's behavior_path_planner turn signal decider (behavior_path_planner_common/src/
turn_signal_decider.cpp, getIntersectionTurnSignalInfo) signals for an intersection lanelet whose
turn_direction is left / right once the ego is within a search distance of it: search time x speed + search
distance (its parameters turn_signal_search_time 3.0 s, turn_signal_intersection_search_distance 30.0 m).
Lane changes signal the same way here. "straight" never signals (Autoware: only while stopped).

Alpamayo 1.5's route text (`release_route_text`): the format of the authors' navigation samples (NVlabs/alpamayo1.5
@ f42e594 notebooks/nav_demo_samples.json: 20 clips, maneuvers TURN_LEFT / TURN_RIGHT, "Turn left in 11m" for
11.2 m, "Turn left in 4m" for 3.8 m: the distance rounded to whole metres, "m" without a space). Those samples
show turns only, so the text names the route's next left or right turn at any distance (navigate.py next_turn:
"Turn left in 594m" is among the samples), passing over straight intersections and lane changes; with no turn
ahead there is none (the prompt then has no route span, the authors' condition without navigation).
"""

from __future__ import annotations

import math

from ..errors import ConfigError
from ..types import Navigation

DEFAULT_TEMPLATE = "{command} in {distance_m:.0f} m"
TEMPLATE_FIELDS = ("command", "distance_m", "goal_x", "goal_y", "target_x", "target_y")
SEARCH_DISTANCE_M = 30.0   # Autoware: turn_signal_intersection_search_distance
SEARCH_TIME_S = 3.0        # Autoware: turn_signal_search_time
RELEASE_TURNS = {"turn left": "Turn left", "turn right": "Turn right"}
SIGNALS = {"turn left": "left", "change lane left": "left", "turn right": "right", "change lane right": "right"}


def instruction(template: str, nav: Navigation) -> str:
    """The instruction for `nav` from `template` (DEFAULT_TEMPLATE when empty); ConfigError for a bad template."""
    fields = dict(command=nav.command, distance_m=nav.distance_m, goal_x=nav.goal_ego[0], goal_y=nav.goal_ego[1],
                  target_x=nav.target_ego[0], target_y=nav.target_ego[1])
    try:
        return (template or DEFAULT_TEMPLATE).format(**fields)
    except (KeyError, IndexError, ValueError) as exc:
        raise ConfigError(f"instruction template {template!r}: {type(exc).__name__} {exc}; the fields are "
                          f"{', '.join('{' + f + '}' for f in TEMPLATE_FIELDS)}") from None


def check_template(template: str) -> str:
    """Raises ConfigError when `template` does not format with the navigation fields; -> the template."""
    instruction(template, Navigation.default())
    return template


def turn_indicator(nav: Navigation, within_m: float = SEARCH_DISTANCE_M, speed_mps: float = 0.0,
                   search_time_s: float = SEARCH_TIME_S) -> str:
    """"left" | "right" | "none": the side of a turn or lane change of the route within
    within_m + search_time_s x speed_mps ahead (0 while in it)."""
    side = SIGNALS.get(nav.command, "none") if nav.source == "route" else "none"
    return side if nav.distance_m <= within_m + search_time_s * max(0.0, speed_mps) else "none"


def release_route_text(command: str, distance_m: float) -> str | None:
    """Alpamayo 1.5's route text for a turn ahead ("Turn right in 30m"; navigate.py next_turn), or None: not a turn,
    or a distance that is not a finite number >= 0. Rounded half up (the samples show no tie)."""
    if command not in RELEASE_TURNS or not math.isfinite(distance_m) or distance_m < 0:
        return None
    return f"{RELEASE_TURNS[command]} in {math.floor(distance_m + 0.5)}m"
