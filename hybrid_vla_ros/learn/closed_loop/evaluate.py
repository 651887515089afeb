"""Closed-loop evaluation: held-out scenarios (seeds below 1000, the training drives' base) x timing profiles x
modes -> per route metrics, one aggregated row per (profile, mode), the table, a bird's-eye plot.

`instant` (latency 0) is run once, whatever the profiles: the reference no system reaches.
"""

from __future__ import annotations

import math

import numpy as np

from ... import stop
from ...errors import ConfigError, expect
from ...sim.loop import CAMERA_PERIOD_S, Drive
from ...sim.metrics import aggregate, paired_difference, route_metrics
from ...sim.perturb import Perturbations
from ...sim.timing import (MODES, PROFILES, StageMs, instant, measured, minddrive_paper, mode_timings, orion_paper,
                           orion_planned)
from ...sim.world import random_scenario

HELD_OUT_BELOW = 1000   # learn/train.py TRAIN_SEED_BASE: training drives use seeds from 1000 on
NOTE = ("world in simulated time: each plan takes effect at its mode's latency after the first stage takes its "
        "frame (the model's own compute is off the clock; for a profile other than `measured` the small model is "
        "given that hardware's latency: time scale = profile latency / measured latency); camera 10 Hz, world "
        "step 20 ms")


def stage_times(profile: str, policy, seeds: list[int]) -> StageMs:
    if profile == "orion-paper":
        return orion_paper()
    if profile == "minddrive-paper":
        return minddrive_paper()
    if profile == "orion-planned":
        return orion_planned()
    expect(hasattr(policy, "frame"), ConfigError, "timing 'measured' needs the model (a ModelPolicy)")
    drive = Drive(random_scenario(seeds[0]), policy, instant(CAMERA_PERIOD_S))
    drive.snapshot(0)
    frame = policy.frame(drive.snapshots[0][2])
    return measured(policy.model, [frame] * 4)


def timings(profiles: list[str], policy, seeds: list[int]) -> tuple[dict, dict]:
    """-> ({(profile, mode): ModeTiming}, {profile: stage ms as a dict})"""
    out, stages = {("-", "instant"): instant(CAMERA_PERIOD_S)}, {}
    for profile in profiles:
        expect(profile in PROFILES, ConfigError, f"--timing '{profile}': one of {', '.join(PROFILES)}")
        st = stage_times(profile, policy, seeds)
        stages[profile] = vars(st)
        for mode, timing in mode_timings(st).items():
            out[(profile, mode)] = timing
    return out, stages


def evaluate(policy, scenarios: int = 20, seed: int = 0, profiles: tuple[str, ...] = PROFILES, lights: bool = False,
             progress=print, keep_paths_of: int | None = None, modes: tuple[str, ...] | None = None,
             perturb: Perturbations = Perturbations()) -> dict:
    """Runs every (profile, mode) on scenarios seed .. seed + scenarios - 1 with `policy` in a world with `perturb`
    (sim/perturb.py). modes: those run (default all; instant, native and native_retimed always). keep_paths_of: the seed whose drives' paths are
    kept for the plot (default: the first with a lead vehicle)."""
    seeds = list(range(seed, seed + scenarios))
    expect(scenarios >= 1 and seed >= 0 and seeds[-1] < HELD_OUT_BELOW, ConfigError,
           f"closed-loop scenarios {seeds[0]}..{seeds[-1]}: held-out seeds must lie in 0..{HELD_OUT_BELOW - 1}")
    plans, stages = timings(list(profiles), policy, seeds)
    if modes:
        unknown = sorted(set(modes) - set(MODES) - {"instant"})
        expect(not unknown, ConfigError, f"modes {unknown}: each one of {', '.join(MODES)}")
        keep = {"instant", "native", "native_retimed", *modes}   # the baselines a row is compared with stay
        plans = {key: t for key, t in plans.items() if key[1] in keep}
    if keep_paths_of is None:
        keep_paths_of = next((s for s in seeds if random_scenario(s, lights=lights).lead), seeds[0])
    routes, paths, slots = {key: [] for key in plans}, {}, {key: [0, 0] for key in plans}
    for s in seeds:
        scenario = random_scenario(s, lights=lights)
        for key, timing in plans.items():
            stop.check()                                   # Ctrl-C / SIGTERM: stop between drives
            before = kv_slots(policy)
            rec = Drive(scenario, policy, timing, perturb).run()
            routes[key].append(route_metrics(rec))
            slots[key] = [total + now - was for total, now, was in zip(slots[key], kv_slots(policy), before)]
            if s == keep_paths_of:
                paths["/".join(key)] = [(r[1], r[2]) for r in rec.rows]
        done = {"/".join(k): round(v[-1]["driving_score"]) for k, v in routes.items()}
        progress(f"scenario {s}: driving score {done}")
    rows = [{"profile": p, "mode": m, "latency_ms": plans[(p, m)].latency_s * 1e3,
             "period_ms": plans[(p, m)].period_s * 1e3, **aggregate(routes[(p, m)]),
             **against_native(routes, p, m), **kept_share(slots[(p, m)])} for p, m in plans]
    return {"policy": policy.name, "scenarios": scenarios, "seeds": seeds, "lights": lights, "profiles": list(profiles),
            "modes": sorted({m for _, m in plans}, key=["instant", *MODES].index),
            "perturbations": {**vars(perturb), "described": perturb.describe()}, "stage_ms": stages, "note": NOTE, "rows": rows,
            "routes": {"/".join(k): v for k, v in routes.items()}, "paths_seed": keep_paths_of, "paths": paths}


def kv_slots(policy) -> tuple[int, int]:
    """A streaming policy's image slots kept and computed so far ((0, 0) for any other)."""
    counts = getattr(policy, "kv_slots", lambda: None)()
    return counts or (0, 0)


def kept_share(slots: list[int]) -> dict:
    """Streaming KV: the share of a row's window image slots whose KV an earlier window had computed."""
    kept, computed = slots
    return {"kv_slots_kept_share": kept / (kept + computed)} if kept + computed else {}


def against_native(routes: dict, profile: str, mode: str) -> dict:
    """A row's driving score against its profile's native with the same compensation (native for a mode applied
    as it arrives, native_retimed for a re-timed one) and against native_retimed: paired over the scenarios."""
    out = {}
    if profile == "-" or len(routes[(profile, mode)]) < 2:   # one scenario decides nothing
        return out
    same = "native_retimed" if mode.endswith("_retimed") else "native"
    scores = [r["driving_score"] for r in routes[(profile, mode)]]
    for key, baseline in (("vs_native", same), ("vs_native_retimed", "native_retimed")):
        if (profile, baseline) in routes and baseline != mode:
            out[key] = {"baseline": baseline, **paired_difference(
                scores, [r["driving_score"] for r in routes[(profile, baseline)]])}
    return out


def compared_with(report: dict, other: dict, source: str) -> dict:
    """Each (profile, mode) both runs drove, this run's driving score minus the other's, paired over the same
    scenarios (the other run: another policy or option on the same seeds, e.g. streaming KV against the full
    recompute). -> {"source", "rows": {key: paired difference}}."""
    world = lambda r: (r.get("seeds"), r.get("lights"), r.get("perturbations", {}).get("described"))   # noqa: E731
    expect(world(other) == world(report), ConfigError,
           f"--compare-with {source}: its scenarios (seeds, lights, perturbations {world(other)}) are not this run's "
           f"({world(report)}): a paired difference needs the same")
    rows = {key: paired_difference([r["driving_score"] for r in routes],
                                   [r["driving_score"] for r in other["routes"][key]])
            for key, routes in report["routes"].items() if key in other.get("routes", {})}
    expect(bool(rows), ConfigError, f"--compare-with {source}: no (profile, mode) in common with this run")
    return {"source": source, "policy": other.get("policy"), "rows": rows}


def comparison_lines(comparison: dict, policy: str) -> list[str]:
    lines = [f"driving score, {policy} minus {comparison['policy']} ({comparison['source']}), paired (95% CI):"]
    for key, d in comparison["rows"].items():
        lines.append(f"  {key:<28} {d['mean']:+.2f} [{d['low']:+.2f}, {d['high']:+.2f}]: {d['verdict']}")
    return lines


def _fmt(x, spec: str = ".2f") -> str:
    if x is None:
        return "-"
    return "inf" if isinstance(x, float) and math.isinf(x) else format(x, spec)


def table_lines(report: dict) -> list[str]:
    head = ("profile", "mode", "latency ms", "period ms", "DS", "completion", "success", "coll", "red", "lane dep",
            "|jerk| m/s3", "smooth", "min TTC s", "plan age s", "DS - native, same compensation (95% CI)")
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for r in report["rows"]:
        cells = (r["profile"], r["mode"], _fmt(r["latency_ms"], ".0f"), _fmt(r["period_ms"], ".0f"),
                 _fmt(r["driving_score"], ".1f"), _fmt(r["completion"], ".3f"), _fmt(r["success_rate"], ".2f"),
                 str(r["collisions"]), str(r["red_lights"]), str(r["lane_departures"]), _fmt(r["mean_abs_jerk"]),
                 _fmt(r["smoothness"]), _fmt(r["median_min_ttc_s"]), _fmt(r["mean_plan_age_s"]), difference_cell(r))
        lines.append("| " + " | ".join(cells) + " |")
    return lines


def difference_cell(row: dict) -> str:
    d = row.get("vs_native")
    if d is None:
        return "-"
    return f"{d['mean']:+.2f} [{d['low']:+.2f}, {d['high']:+.2f}] vs {d['baseline']}: {d['verdict']}"


def plot_paths(report: dict, path) -> None:
    """Bird's-eye paths of every mode on one scenario, one panel per timing profile, the road drawn."""
    from ...report import pyplot
    from ...sim.world import Road
    plt = pyplot()
    scenario = random_scenario(report["paths_seed"], lights=report["lights"])
    road = Road(scenario)
    profiles = report["profiles"]
    fig, axes = plt.subplots(1, len(profiles), figsize=(6 * len(profiles), 6), squeeze=False)
    for ax, profile in zip(axes[0], profiles):
        keep = road.s <= scenario.length_m + 10
        for side in (-1, 1):
            ax.plot(road.x[keep] - side * scenario.width_m / 2 * np.sin(road.theta[keep]),
                    road.y[keep] + side * scenario.width_m / 2 * np.cos(road.theta[keep]),
                    color="grey", lw=0.8)
        for key, xy in report["paths"].items():
            if key.startswith(profile + "/") or key == "-/instant":
                end = report["routes"][key][report["seeds"].index(report["paths_seed"])]["end"]
                xs, ys = zip(*xy)
                ax.plot(xs, ys, lw=1.2, label=f"{key.split('/')[1]} ({end})")
        ax.set_aspect("equal", adjustable="datalim")
        ax.set_title(f"{profile}: scenario {report['paths_seed']}", fontsize=9)
        ax.legend(fontsize=7)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
