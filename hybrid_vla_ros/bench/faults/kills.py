"""Kills of `bench --scenario faults`: the graph runs as supervised processes (`hybrid-vla graph --processes`);
a camera publishes at a fixed rate; the suffix, the prefix and the scheduler are SIGKILLed in turn mid-drive
(run_kills), then the active suffix of a graph with a warm standby (run_standby_kill). Per kill: whether the
node came back with no manual step, seconds from the kill to the first trajectory of a frame published after
it, and what became of every frame (bench/faults/accounting.py).
"""

from __future__ import annotations

import os
import signal
import time
from pathlib import Path

from ...errors import ConfigError
from ..drive import Camera, GraphProcess, Ledger, graph_config
from .accounting import account

KILLS = ("hybrid_vla_suffix", "hybrid_vla_prefix", "hybrid_vla_scheduler")
START_TIMEOUT_S = 120.0
RESPAWN_UP_S = 8.0  # a respawned suffix is up (and standing by) within this here
QUIET_S = 2.0  # > two diagnostics periods of the bench graph (0.5 s): the counts they carry are current


def wait_for_graph(camera: Camera, rate_hz: float) -> None:
    camera.drive(START_TIMEOUT_S, rate_hz, until=lambda: bool(camera.ledger.delivered))
    if not camera.ledger.delivered:
        raise ConfigError(f"the graph produced no trajectory within {START_TIMEOUT_S:g} s")


def first_delivery_after(ledger: Ledger, t: float) -> float | None:
    times = [ledger.delivered[s] for s, t_pub in ledger.published.items() if t_pub > t and s in ledger.delivered]
    return min(times) if times else None


def kill_and_recover(graph: GraphProcess, camera: Camera, node: str, rate_hz: float, timeout_s: float) -> dict:
    """SIGKILL the node's process, drive on until it is back and a new frame has come through."""
    pid = graph.node_pid(node)
    if pid is None:
        raise ConfigError(f"no process runs {node}")
    t_kill = time.monotonic()
    os.kill(pid, signal.SIGKILL)

    def back() -> bool:
        new = graph.node_pid(node)
        return new is not None and new != pid and first_delivery_after(camera.ledger, t_kill) is not None
    camera.drive(timeout_s, rate_hz, until=back)
    if node == "hybrid_vla_scheduler":
        camera.drive(3.0, rate_hz)  # the new scheduler resumes; the stages never stopped
    first = first_delivery_after(camera.ledger, t_kill)
    new_pid = graph.node_pid(node)
    return {"node": node, "pid_killed": pid, "pid_after": new_pid, "t_kill": t_kill,
            "recovered": bool(new_pid and new_pid != pid and first is not None),
            "seconds_to_first_trajectory": None if first is None else round(first - t_kill, 3),
            "t_back": first}


def run_kills(preset: str, config: Path, rate_hz: float, before_s: float, timeout_s: float, progress) -> dict:
    graph = GraphProcess(config, processes=True, env=dict(os.environ))
    camera = Camera(preset)
    try:
        progress("kills: starting the graph (supervised processes)")
        wait_for_graph(camera, rate_hz)
        camera.drive(before_s, rate_hz)
        kills = []
        for node in KILLS:
            progress(f"kills: SIGKILL {node}")
            kills.append(kill_and_recover(graph, camera, node, rate_hz, timeout_s))
            camera.drive(before_s, rate_hz)
        end = time.monotonic()
        camera.spin(3.0)  # frames in flight finish
        exit_code = graph.stop()
    finally:
        camera.close()
        graph.stop()
    account(camera.ledger, kills, end)
    return {"kills": kills, "graph_exit_code": exit_code, "partitions_before": sorted(
        {p for t, p in camera.ledger.partitions if t < kills[0]["t_kill"]})}


def run_standby_kill(preset: str, directory: Path, rate_hz: float, before_s: float, timeout_s: float,
                     progress) -> dict:
    """The suffix with a warm standby (ros/nodes/standby.py): SIGKILL the active suffix, the standby takes
    over; its time to the first trajectory beside respawn's, every frame accounted for, none published twice."""
    config = graph_config(preset, directory, standby=True)
    graph = GraphProcess(config, processes=True, env=dict(os.environ))
    camera = Camera(preset)
    try:
        progress("standby: starting the graph with a warm standby suffix")
        wait_for_graph(camera, rate_hz)
        camera.spin(QUIET_S)   # the prefix's image count (its diagnostics) catches up: the baseline
        base = (len(camera.ledger.published), camera.prefix_images)
        camera.drive(before_s, rate_hz)
        progress("standby: SIGKILL hybrid_vla_suffix (the active one)")
        kill = kill_and_recover(graph, camera, "hybrid_vla_suffix", rate_hz, timeout_s)
        camera.drive(before_s + RESPAWN_UP_S, rate_hz)   # the respawned primary comes up: it must stand by
        end = time.monotonic()
        camera.spin(3.0)
        exit_code = graph.stop()
    finally:
        camera.close()
        graph.stop()
    account(camera.ledger, [kill], end)
    # Camera frames the prefix never received (best-effort images shed by DDS while a respawned process
    # loads on these 2 cores): nothing a node could report. account() counted those its per-camera windows
    # prove; the rest as the soak counts them, less the frames already counted shed.
    received = (camera.prefix_images - base[1]) // camera.spec.num_cameras
    shed = min(kill["frames_unaccounted"], max(0, len(camera.ledger.published) - base[0] - received
                                               - kill["frames_shed_by_dds"]))
    kill.update(frames_shed_by_dds=kill["frames_shed_by_dds"] + shed,
                frames_unaccounted=kill["frames_unaccounted"] - shed)
    return {**kill, "published_twice": camera.ledger.published_twice, "graph_exit_code": exit_code}
