"""`hybrid-vla bench --scenario faults`: the graph keeps driving through faults (docs/RELIABILITY.md).

Kills (kills.py): the graph runs as supervised processes (`hybrid-vla graph --processes`); a camera publishes
at a fixed rate; the suffix, the prefix and the scheduler are SIGKILLed in turn mid-drive. Per kill: whether
the node came back with no manual step, seconds from the kill to the first trajectory of a frame published
after it, and what became of every frame (accounting.py). Soak (soak.py): a long drive in one process and in
separate processes, RSS and open file descriptors of the whole process tree sampled each second, then a
burst faster than the graph.
"""

from __future__ import annotations

import os
import tempfile
from pathlib import Path

from ...report import pyplot
from ..drive import graph_config
from .accounting import account, frame_fate, held_by_killed, shed_by_dds
from .kills import run_kills, run_standby_kill
from .soak import run_soak, soak_summary

__all__ = ["account", "frame_fate", "held_by_killed", "plot_faults", "run_faults", "run_kills", "run_soak",
           "run_standby_kill", "shed_by_dds", "soak_summary"]


def isolate_dds() -> None:
    """A DDS domain of its own on loopback, for this process and the graph it starts."""
    os.environ["ROS_DOMAIN_ID"] = str(150 + os.getpid() % 80)
    os.environ.setdefault("ROS_AUTOMATIC_DISCOVERY_RANGE", "LOCALHOST")


def run_faults(preset: str = "tiny", rate_hz: float = 20.0, before_s: float = 4.0, recover_timeout_s: float = 90.0,
               soak_frames: int = 1500, soak_rate_hz: float = 30.0, burst: int = 200, progress=print) -> dict:
    isolate_dds()
    config = graph_config(preset, Path(tempfile.mkdtemp(prefix="hvla_faults_")))
    kills = run_kills(preset, config, rate_hz, before_s, recover_timeout_s, progress)
    standby = run_standby_kill(preset, config.parent, rate_hz, before_s, recover_timeout_s, progress)
    soak = {}
    for processes in (False, True):
        result = run_soak(preset, config, processes, soak_frames, soak_rate_hz, burst, progress)
        soak[result["mode"]] = result
    return {"scenario": "faults", "preset": preset, "rate_hz": rate_hz, **kills, "standby": standby,
            "soak": {"frames": min(s["frames"] for s in soak.values()),
                     "rss_growth_fraction": max(s["rss_growth_fraction"] for s in soak.values()),
                     "frames_unaccounted": sum(s["frames_unaccounted"] for s in soak.values()), "modes": soak}}


def plot_faults(report: dict, path: str) -> None:
    plt = pyplot()
    fig, (ax1, ax2) = plt.subplots(1, 2, figsize=(12, 4.5))
    kills = report["kills"]
    names = [k["node"].removeprefix("hybrid_vla_") for k in kills]
    ax1.bar(names, [k["seconds_to_first_trajectory"] or 0 for k in kills], color="tab:red")
    for i, k in enumerate(kills):
        ax1.text(i, (k["seconds_to_first_trajectory"] or 0), f"lost {k['lost_in_killed_process']}\n"
                 f"unaccounted {k['frames_unaccounted']}", ha="center", va="bottom", fontsize=8)
    ax1.set_ylabel("s from SIGKILL to the first trajectory")
    ax1.set_title(f"respawn under a {report['rate_hz']:g} Hz camera ({report['preset']})")
    for mode, soak in report["soak"]["modes"].items():
        n = [s[0] for s in soak["samples"]]
        ax2.plot(n, [s[1] / 2**20 for s in soak["samples"]], label=f"{mode} (growth {soak['rss_growth_fraction']:+.1%})")
    ax2.set_xlabel("frames")
    ax2.set_ylabel("RSS of the graph's processes (MiB)")
    ax2.set_title("soak")
    ax2.legend()
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
