"""Dynamic-scheduling benchmarks: a load step on the suffix's cores, and a sweep over every static p.

The competing load is a child process spinning on the suffix's cores (what Autoware's own CPU work does to
the suffix), started and stopped by the benchmark itself.
"""

from __future__ import annotations

import multiprocessing as mp
import os
import statistics

import numpy as np

from ..engine.costs import CostPolicy
from ..engine.cpu import core_plan
from ..engine.scheduler import StageSample
from ..engine.pipeline import Pipeline, PipelineConfig
from ..engine.placement import Placement
from ..engine.stages import PrefixStage, SuffixStage, partition_report
from ..model.inputs import synthetic_frame
from ..model.vla import VLAModel
from .profile import seed_cost_model
from .report import percentiles, pyplot


def _spin(cores: list[int]) -> None:
    os.sched_setaffinity(0, set(cores))
    while True:
        pass


class CompetingLoad:
    """A child process burning the given cores until stopped."""

    def __init__(self, cores: list[int]):
        self.cores = cores
        self.proc: mp.Process | None = None

    def start(self) -> None:
        self.proc = mp.get_context("spawn").Process(target=_spin, args=(self.cores,), daemon=True)
        self.proc.start()

    def stop(self) -> None:
        if self.proc is not None:
            self.proc.terminate()
            self.proc.join(5)
            self.proc = None


def run_static(model, placement, partition, frames, prefix_cores, suffix_cores, warmup=2) -> float:
    feed = iter([synthetic_frame(model.spec, s) for s in range(frames + warmup)])
    pipe = Pipeline(PrefixStage(model, partition, placement), SuffixStage(model, partition, placement),
                    PipelineConfig(prefix_cores=prefix_cores, suffix_cores=suffix_cores),
                    source=lambda: next(feed, None)).start()
    ends = [r.suffix_end for r in pipe.finish()][warmup:]
    return statistics.median([(b - a) * 1e3 for a, b in zip(ends, ends[1:])])


def sweep(model, placement, zone, frames, prefix_cores, suffix_cores, load_cores=None) -> dict[int, float]:
    load = CompetingLoad(load_cores) if load_cores else None
    if load:
        load.start()
    try:
        return {p: run_static(model, placement, p, frames, prefix_cores, suffix_cores) for p in range(zone[0], zone[1] + 1)}
    finally:
        if load:
            load.stop()


def run_load_step(model: VLAModel, placement: Placement, frames: int = 80, step_on: int = 25, step_off: int | None = 55,
                  zone: tuple[int, int] | None = None, budget_bytes: int | None = None, sweep_frames: int = 8) -> dict:
    prefix_cores, suffix_cores, devices = core_plan(placement)
    L = model.num_blocks
    zone = zone or (0, L)
    costs = seed_cost_model(model, placement, prefix_cores, suffix_cores)
    prefix_bytes = [partition_report(model, p)["prefix_bytes"] for p in range(L + 1)] if budget_bytes else None
    policy = CostPolicy(costs, zone[0], zone[1], partition=zone[0], prefix_bytes=prefix_bytes,
                        budget_bytes=budget_bytes)
    policy.partition = policy.best()
    start_p = policy.partition
    prefix = PrefixStage(model, start_p, placement, zone)
    suffix = SuffixStage(model, start_p, placement, zone)
    feed = iter([synthetic_frame(model.spec, s) for s in range(frames)])
    pipe = Pipeline(prefix, suffix, PipelineConfig(prefix_cores=prefix_cores, suffix_cores=suffix_cores),
                    source=lambda: next(feed, None)).start()
    load = CompetingLoad(suffix_cores)
    timeline, last_end = [], None
    try:
        for index in range(frames):
            if index == step_on:
                load.start()
            if step_off is not None and index == step_off:
                load.stop()
            result = pipe.get(timeout=120)
            if result is None:
                break
            prefix_ms = (result.prefix_end - result.prefix_start) * 1e3
            suffix_ms = (result.suffix_end - result.suffix_start) * 1e3
            new_p = policy.update(StageSample(result.partition, prefix_ms, suffix_ms, backlog=pipe.backlog(),
                                              at_s=result.suffix_end))
            if new_p != pipe.prefix.partition:
                pipe.set_partition(new_p)
            period = (result.suffix_end - last_end) * 1e3 if last_end else None
            last_end = result.suffix_end
            timeline.append({"frame": index, "seq": result.seq, "partition": result.partition, "period_ms": period,
                             "prefix_ms": prefix_ms, "suffix_ms": suffix_ms, "loaded": load.proc is not None})
    finally:
        load.stop()
        pipe.finish()
    loaded = [t for t in timeline if t["loaded"]]
    settle = frames_to_settle(timeline)
    static_idle = sweep(model, placement, zone, sweep_frames, prefix_cores, suffix_cores)
    static_loaded = sweep(model, placement, zone, sweep_frames, prefix_cores, suffix_cores, load_cores=suffix_cores)
    recover = frames_to_recover(loaded, 1.1 * min(static_loaded.values()))
    unloaded_steady = [t["period_ms"] for t in timeline[5:step_on] if t["period_ms"]]
    loaded_steady = [t["period_ms"] for t in loaded[(recover or 0) + 2:] if t["period_ms"]]
    sched_idle = statistics.median(unloaded_steady) if unloaded_steady else None
    sched_loaded = statistics.median(loaded_steady) if loaded_steady else None
    best_idle, best_loaded = min(static_idle.values()), min(static_loaded.values())
    return {
        "scenario": "load-step", "preset": model.spec.name, "num_blocks": L, "zone": list(zone), "frames": frames,
        "step_on_frame": step_on, "step_off_frame": step_off, "load": f"child process spinning on cores {suffix_cores}",
        "devices": devices, "placement": placement.describe(), "start_partition": start_p,
        "moves": policy.moves, "frames_to_recover": recover, "frames_to_settle": settle,
        "recover_definition": "frames after the load step until the rolling median of 3 periods is within 10% "
                              "of the best static partition's period under the same load",
        "scheduler_period_ms": {"idle": sched_idle, "loaded": sched_loaded},
        "static_sweep_period_ms": {"idle": static_idle, "loaded": static_loaded},
        "best_static": {"idle": min(static_idle, key=static_idle.get), "loaded": min(static_loaded, key=static_loaded.get)},
        "worst_static_period_ms": {"idle": max(static_idle.values()), "loaded": max(static_loaded.values())},
        "scheduler_vs_best_static": {"idle": sched_idle / best_idle if sched_idle else None,
                                     "loaded": sched_loaded / best_loaded if sched_loaded else None},
        "period_ms": percentiles([t["period_ms"] for t in timeline if t["period_ms"]]),
        "timeline": timeline,
    }


def frames_to_recover(loaded: list[dict], target_ms: float) -> int | None:
    """Frames after the load step until the rolling median of 3 periods reaches target_ms."""
    periods = [t["period_ms"] for t in loaded]
    for i in range(len(periods)):
        window = [p for p in periods[max(0, i - 2):i + 1] if p]
        if len(window) == 3 and statistics.median(window) <= target_ms:
            return i
    return None


def frames_to_settle(timeline: list[dict]) -> int | None:
    """Frames after the load step until the partition reaches the value it keeps while loaded."""
    loaded = [t for t in timeline if t["loaded"]]
    if not loaded:
        return None
    final = loaded[-1]["partition"]
    for i in range(len(loaded)):
        if all(t["partition"] == final for t in loaded[i:]):
            return i
    return None


def plot_load_step(report: dict, path) -> None:
    plt = pyplot()
    t = report["timeline"]
    frames = [x["frame"] for x in t]
    fig, axes = plt.subplots(3, 1, figsize=(10, 8))
    for ax in axes[:2]:
        loaded = [x["frame"] for x in t if x["loaded"]]
        if loaded:
            ax.axvspan(min(loaded), max(loaded), color="tab:red", alpha=0.12, label="competing load on suffix cores")
    axes[0].step(frames, [x["partition"] for x in t], where="post", color="tab:purple")
    axes[0].set_ylabel("partition p")
    axes[0].legend(loc="upper left", fontsize=8)
    axes[0].set_title(f"{report['preset']}: load step at frame {report['step_on_frame']}: period recovered in "
                      f"{report['frames_to_recover']} frames, partition settled in {report['frames_to_settle']}",
                      fontsize=9)
    axes[1].plot(frames, [x["period_ms"] or np.nan for x in t], ".-")
    axes[1].set_ylabel("period (ms)")
    axes[1].set_xlabel("frame")
    for key, color in (("idle", "tab:green"), ("loaded", "tab:red")):
        sweep_ = report["static_sweep_period_ms"][key]
        axes[2].plot(list(map(int, sweep_)), list(sweep_.values()), "o-", color=color, label=f"static p, {key}")
        sched = report["scheduler_period_ms"][key]
        if sched:
            axes[2].axhline(sched, color=color, linestyle="--", label=f"scheduler, {key}")
    axes[2].set_xlabel("static partition p")
    axes[2].set_ylabel("period p50 (ms)")
    axes[2].legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
