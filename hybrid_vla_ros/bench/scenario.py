"""Dynamic-scheduling benchmarks: a load step on the suffix's cores, and a sweep over every static p.

The competing load is one tiny child process per suffix core, pinned by its first instruction and then
spinning (what Autoware's own CPU work does to the suffix), started and stopped by the benchmark itself. Each
frame records whether its suffix ran while the load was on (from the load's own on/off times, not from when
the frame's result was collected).
"""

from __future__ import annotations

import statistics
import subprocess
import sys
import time

import numpy as np

from ..engine.scheduling.costs import CostModel, CostPolicy
from ..engine.cpu import core_plan
from ..engine.scheduling.partition import Zone, prefix_bytes_by_partition
from ..engine.pipeline.cross_frame import Pipeline, PipelineConfig
from ..engine.placement import Placement
from ..engine.scheduling.policies import StageSample
from ..engine.stages import PrefixStage, SuffixStage
from ..errors import ConfigError, expect
from ..model.inputs import synthetic_frame
from ..model.vla import VLAModel
from ..plan.run import plan_here
from .prior_check import plan_across_sweep, prior_vs_sweep
from ..report import percentiles, pyplot


# Pinned before anything else runs: no site import (-S), no package import, then a busy loop.
MIN_LOADED_FRAMES = 10  # the load must stay on long enough for the scheduler to react and settle
SPIN_CODE = "import os; os.sched_setaffinity(0, {{{core}}})\nwhile True: pass"


class CompetingLoad:
    """One spinning child process per given core, each pinned by its first instruction, until stopped.
    `spans` holds the (on, off) perf_counter times of each period the load was on."""

    def __init__(self, cores: list[int]):
        self.cores = cores
        self.procs: list[subprocess.Popen] = []
        self.spans: list[list[float | None]] = []

    @property
    def on(self) -> bool:
        return bool(self.procs)

    def start(self) -> None:
        self.procs = [subprocess.Popen([sys.executable, "-S", "-c", SPIN_CODE.format(core=c)]) for c in self.cores]
        self.spans.append([time.perf_counter(), None])

    def stop(self) -> None:
        if not self.procs:
            return
        for proc in self.procs:
            proc.kill()
        for proc in self.procs:
            proc.wait(5)
        self.procs = []
        self.spans[-1][1] = time.perf_counter()

    def covered(self, start: float, end: float) -> bool:
        """Was the load on during the whole of [start, end]?"""
        return any(on <= start and (off is None or off >= end) for on, off in self.spans)


def run_static(model, placement, partition, frames, prefix_cores, suffix_cores, warmup=2) -> list[float]:
    """Periods (ms) of a static partition after `warmup` frames."""
    feed = iter([synthetic_frame(model.spec, s) for s in range(frames + warmup)])
    pipe = Pipeline(PrefixStage(model, partition, placement), SuffixStage(model, partition, placement),
                    PipelineConfig(prefix_cores=prefix_cores, suffix_cores=suffix_cores),
                    source=lambda: next(feed, None)).start()
    ends = [r.suffix_end for r in pipe.finish()][warmup:]
    return [(b - a) * 1e3 for a, b in zip(ends, ends[1:])]


def run_scheduled(model, placement, zone, frames, prefix_cores, suffix_cores, policy, warmup=2) -> list[float]:
    """Periods (ms) of the pipeline driven by `policy` (already calibrated), after `warmup` frames."""
    feed = iter([synthetic_frame(model.spec, s) for s in range(frames + warmup)])
    pipe = Pipeline(PrefixStage(model, policy.partition, placement, zone),
                    SuffixStage(model, policy.partition, placement, zone),
                    PipelineConfig(prefix_cores=prefix_cores, suffix_cores=suffix_cores),
                    source=lambda: next(feed, None)).start()
    ends = []
    while len(ends) < frames + warmup and (result := pipe.get(timeout=120)) is not None:
        ends.append(result.suffix_end)
        new_p = policy.update(StageSample(result.partition, (result.prefix_end - result.prefix_start) * 1e3,
                                          (result.suffix_end - result.suffix_start) * 1e3, pipe.backlog(),
                                          result.suffix_end))
        if new_p != pipe.prefix.partition:
            pipe.set_partition(new_p)
    pipe.finish()
    ends = ends[warmup:]
    return [(b - a) * 1e3 for a, b in zip(ends, ends[1:])]


def sweep(model, placement, zone, frames, prefix_cores, suffix_cores, load_cores=None, policy=None,
          before_pass=None) -> dict:
    """Every static p of the zone (and, with a policy, the scheduler measured the same way): period p50 and
    its spread (p25..p75). Two passes, ascending then descending, each `frames` frames, pooled per entry: a
    slow spell of this shared machine then lands on different p in the two passes instead of on one p twice;
    the scheduler runs first in the first pass and last in the second. before_pass(): called before each pass
    (the planner's timing, interleaved with the sweep)."""
    load = CompetingLoad(load_cores) if load_cores else None
    if load:
        load.start()
    try:
        ps = list(range(zone[0], zone[1] + 1))
        sched = ["scheduler"] if policy is not None else []
        periods: dict = {p: [] for p in ps + sched}
        for one_pass in (sched + ps, ps[::-1] + sched):
            if before_pass:
                before_pass()
            for p in one_pass:
                periods[p] += run_scheduled(model, placement, zone, frames, prefix_cores, suffix_cores, policy) \
                    if p == "scheduler" else run_static(model, placement, p, frames, prefix_cores, suffix_cores)
        out = {}
        for p in ps + sched:
            q = np.percentile(periods[p], [25, 50, 75])
            out[p] = {"p50": float(q[1]), "p25": float(q[0]), "p75": float(q[2]), "frames": len(periods[p])}
        return out
    finally:
        if load:
            load.stop()


def check_load_step(frames: int, step_on: int, step_off: int | None) -> None:
    expect(0 < step_on < frames, ConfigError,
           f"load step at frame {step_on} with {frames} frames: the step must come after frame 0 and before the "
           f"end (nothing would be measured); raise --frames or lower --step-on")
    expect(step_off is None or step_on + MIN_LOADED_FRAMES <= step_off <= frames, ConfigError,
           f"load from frame {step_on} to {step_off} of {frames}: keep it on for at least {MIN_LOADED_FRAMES} "
           f"frames, and off no later than the last frame")


def drive_with_load_step(pipe, policy, load, frames: int, step_on: int, step_off: int | None) -> list[dict]:
    """Feed every finished frame to the policy, switch the load at the step frames. -> timeline."""
    timeline, last_end = [], None
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
                         "prefix_ms": prefix_ms, "suffix_ms": suffix_ms,
                         "loaded": load.covered(result.suffix_start, result.suffix_end)})
    return timeline


def run_load_step(model: VLAModel, placement: Placement, frames: int = 80, step_on: int = 25, step_off: int | None = 55,
                  zone: tuple[int, int] | None = None, budget_bytes: int | None = None, sweep_frames: int = 12,
                  progress=None) -> dict:
    check_load_step(frames, step_on, step_off)
    progress = progress or (lambda text: None)
    progress("planning this machine to seed the cost model (hybrid-vla plan)")
    prefix_cores, suffix_cores, devices = core_plan(placement)
    zone = zone or (0, model.num_blocks)
    zone = Zone.around(zone[0], model.num_blocks, zone)
    prediction = plan_here(model, placement)
    policy = CostPolicy(CostModel.from_plan(prediction), zone.lo, zone.hi, partition=zone.lo, budget_bytes=budget_bytes,
                        prefix_bytes=prefix_bytes_by_partition(model) if budget_bytes else None)
    policy.partition = start_p = policy.best()
    feed = iter([synthetic_frame(model.spec, s) for s in range(frames)])
    pipe = Pipeline(PrefixStage(model, start_p, placement, zone), SuffixStage(model, start_p, placement, zone),
                    PipelineConfig(prefix_cores=prefix_cores, suffix_cores=suffix_cores),
                    source=lambda: next(feed, None)).start()
    load = CompetingLoad(suffix_cores)
    progress(f"{frames} frames from p={start_p}, load on the suffix cores from frame {step_on} to {step_off}")
    try:
        timeline = drive_with_load_step(pipe, policy, load, frames, step_on, step_off)
    finally:
        load.stop()
        pipe.finish()
    progress(f"static sweep over p in [{zone.lo}, {zone.hi}], idle and loaded, 2 x {sweep_frames} frames each; "
             f"the planner timed again before each idle pass")
    beside_sweep: list[dict] = []
    sweeps = {"idle": sweep(model, placement, zone, sweep_frames, prefix_cores, suffix_cores, policy=policy,
                            before_pass=lambda: beside_sweep.append(plan_here(model, placement))),
              "loaded": sweep(model, placement, zone, sweep_frames, prefix_cores, suffix_cores, suffix_cores, policy)}
    report = {"scenario": "load-step", "preset": model.spec.name, "num_blocks": model.num_blocks, "zone": list(zone),
              "frames": frames, "step_on_frame": step_on, "step_off_frame": step_off,
              "load": f"one spinning process per core of {suffix_cores}, pinned by its first instruction",
              "devices": devices, "placement": placement.describe(), "start_partition": start_p,
              "moves": policy.moves, "sweep_frames_per_partition": 2 * sweep_frames,
              "sweep_method": "two passes over the zone (ascending, then descending), periods pooled per p; the "
                              "scheduler (the policy calibrated by the load-step run) measured the same way, first "
                              "in the first pass and last in the second"}
    compared = compare_with_sweep(timeline, sweeps, step_on)
    return {**report, **compared, "prior": prior_vs_sweep(prediction, start_p, compared),
            "plan_across_sweep": plan_across_sweep(beside_sweep, compared), "timeline": timeline}


def compare_with_sweep(timeline: list[dict], sweeps: dict, step_on: int) -> dict:
    """The scheduler's steady periods idle and under load (measured in the sweep, like every static p)
    against the best static partition of each; recovery and settling from the load-step timeline."""
    sched = {k: v.pop("scheduler")["p50"] for k, v in sweeps.items()}
    best = {k: min(v.values(), key=lambda x: x["p50"])["p50"] for k, v in sweeps.items()}
    loaded = [t for t in timeline if t["loaded"]]
    recover = frames_to_recover(loaded, 1.1 * best["loaded"])
    idle_live = [t["period_ms"] for t in timeline[5:step_on] if t["period_ms"] and not t["loaded"]]
    loaded_live = [t["period_ms"] for t in loaded[5:] if t["period_ms"]]
    return {
        "scheduler_live_period_ms": {"idle": statistics.median(idle_live) if idle_live else None,
                                     "loaded": statistics.median(loaded_live) if loaded_live else None},
        "frames_to_recover": recover, "frames_to_settle": frames_to_settle(timeline),
        "recover_definition": "frames run under load until the rolling median of 3 periods is within 10% "
                              "of the best static partition's period under the same load",
        "scheduler_period_ms": sched,
        "static_sweep_period_ms": {k: {p: x["p50"] for p, x in v.items()} for k, v in sweeps.items()},
        "static_sweep_spread_ms": {k: {p: [x["p25"], x["p75"]] for p, x in v.items()} for k, v in sweeps.items()},
        "best_static": {k: min(v, key=lambda p: v[p]["p50"]) for k, v in sweeps.items()},
        "worst_static_period_ms": {k: max(x["p50"] for x in v.values()) for k, v in sweeps.items()},
        "scheduler_vs_best_static": {k: sched[k] / best[k] if sched[k] else None for k in best},
        "period_ms": percentiles([t["period_ms"] for t in timeline if t["period_ms"]]),
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
