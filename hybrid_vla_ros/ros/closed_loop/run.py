"""The graph in the loop: the three nodes in one process (use_sim_time, the world's /clock) and the world node
beside them, until the drive ends -> the drive's metrics (sim/metrics.py route_metrics) and what the
world saw of the graph (plans received and refused, frames served)."""

from __future__ import annotations

import time

from ... import stop
from ...errors import ConfigError, expect
from ...sim.loop import DT_S
from ...sim.metrics import route_metrics
from ..launch_support.bringup import InProcessGraph
from ..launch_support.session import ros_context
from .world_node import WorldNode


def sim_time_params(params: dict) -> dict:
    """The graph's parameters with use_sim_time on every node (the world's /clock is their time)."""
    return {node: {**values, "use_sim_time": True} for node, values in params.items()}


def drive_in_loop(params: dict, spec, seed: int = 0, time_scale: float = 1.0, max_time_s: float | None = None,
                  timeout_s: float = 600.0, first_plan_s: float = 120.0, latency_s: float = 0.0) -> dict:
    """One closed-loop drive of scenario `seed` through the graph (one process) -> route_metrics + the world's
    counts. timeout_s: wall-clock bound of the drive, first_plan_s: of the warm start (ConfigError either way).
    A suffix publishing in a world frame with output_retime gives placed plans (world_node.py); latency_s: the
    profile latency the world holds each plan to at least."""
    with ros_context() as context:
        graph = InProcessGraph(sim_time_params(params), context=context)
        try:
            prefix, suffix = params["hybrid_vla_prefix"], params["hybrid_vla_suffix"]
            placed = suffix.get("frame_id", "base_link") != "base_link"
            expect(not placed or suffix.get("output_retime", False), ConfigError,
                   "closed loop in the graph: a world-frame output must be re-timed (output_retime): the world "
                   "follows a map-frame plan as placed, with its own times")
            world = WorldNode(spec, list(prefix["camera_topics"]), seed, time_scale,
                              suffix.get("output_type", "auto"), max_time_s, context=context, placed=placed,
                              latency_s=latency_s)
            graph.executor.add_node(world)
            start = time.monotonic()
            while not world.done and time.monotonic() - start < timeout_s:
                stop.check()   # Ctrl-C / SIGTERM ends the drive at the next spin
                graph.spin_once(0.005)
                expect(world.drive.started or time.monotonic() - start < first_plan_s, ConfigError,
                       f"closed loop in the graph: no plan for frame 0 within {first_plan_s:.0f} s (the graph's "
                       f"diagnostics say why: a node not configured, frames refused)")
            expect(world.done, ConfigError, f"closed loop in the graph: the drive did not end within {timeout_s} s "
                                            f"(world time {world.drive.t:.1f} s, {world.plans_received} plans)")
            out = route_metrics(world.drive.result())
            out.update(plans_received=world.plans_received, plans_refused=world.plans_refused,
                       wall_s=time.monotonic() - start, time_scale=time_scale,
                       world_lag_s=world.lag_steps * DT_S)
            graph.executor.remove_node(world)
            world.destroy_node()
            return out
        finally:
            graph.shutdown()
