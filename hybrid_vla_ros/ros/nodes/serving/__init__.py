"""How the one prefix node and the one suffix node serve each kind of model (issue 51's one serving path).
`model.kind` names the kind (the HVLM header's, engine/handover/message.py KINDS); `side_class` finds its two sides,
imported when a node configures (a waypoint graph never imports a release's code):

waypoints.py  one boundary state per frame through the handover (chunked frames: ros/chunk_flow.py)
tokens.py     ActionFlow's packed decode steps, answered with tokens
alpamayo/     a released Alpamayo: a conversation of crossings per frame

What every kind shares lives here too: answers.py (the prefix's input for the suffix's answers) and output.py (the
suffix's output of a finished trajectory). The nodes keep parameters, lifecycle, health, diagnostics and the
partition topic. A side (side.py) is built with the node (`Side(node)`, at configure) and offers:
  node_inputs  (class) True: the node subscribes the cameras and kinematic state and prepares each frame (prefix),
               or subscribes the boundary topic and runs the worker (suffix), handing each to `submit` / `handle`;
               False: the side has inputs of its own (an Alpamayo release's four-frame windows, its topics)
  stage        partition, set_partition (None on a suffix without one)
  worker       its StageWorker (diagnostics report its queue); a suffix with node_inputs has the node's, and
               gives `queue` (its capacity), `qos` (the boundary subscription's), on_message(data, received) (the
               executor's thread) and handle(item) (the worker's)
  checks()     its diagnostic checks; time_limits() (prefix); describe() for the start-up log;
  activated()  once the node is active; close() at cleanup
"""

from __future__ import annotations

from importlib import import_module

from ....errors import ConfigError, expect

SIDES = {"waypoints": ".waypoints", "tokens": ".tokens", "alpamayo": ".alpamayo"}


def side_class(model, side: str) -> type:
    """The class serving `side` ("prefix" | "suffix") of `model`'s kind."""
    kind = getattr(model, "kind", None)
    expect(kind in SIDES, ConfigError, f"model kind {kind!r}: the graph serves {sorted(SIDES)}")
    return getattr(import_module(SIDES[kind], __package__), "Prefix" if side == "prefix" else "Suffix")
