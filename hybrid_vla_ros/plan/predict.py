"""The planner's arithmetic: for every cut p, prefix / transfer / suffix time, period, latency and the bytes each
device holds; the best p under a GPU memory budget, a dynamic zone around it, and native GPU-only (no ROS, no
torch, no timing: the rates come in, numbers come out).

    prefix(p)   = front end + p x block on the prefix device
    suffix(p)   = (L - p) x block on the CPU + final norm and head
    transfer    = boundary bytes / link rate + one copy's latency
    period(p)   = max(prefix(p), transfer + suffix(p))       (cross-frame pipeline, steady state)
    latency(p)  = prefix(p) + transfer + suffix(p)
    native      = front end + L blocks + head, all on the prefix device (no transfer, no pipeline)

A block's time on a device = max(FLOPs / achieved FLOP/s, weight bytes / achieved bandwidth).
GPU bytes at a zone [lo, hi] = (front end + embeddings + blocks [0, hi)) in the prefix dtype + the largest
activation working set + the boundary states in flight + the CUDA context; CPU bytes = blocks [lo, L) + head
in the suffix dtype + its working set + the ring's slots.
"""

from __future__ import annotations

from dataclasses import dataclass

from .efficiency import Rate
from .workload import Workload

ZONE_SLACK = 1.5   # the zone covers the best cut while either side runs up to this many times slower


@dataclass(frozen=True)
class Sides:
    prefix: Rate
    suffix: Rate
    prefix_itemsize: int
    suffix_itemsize: int
    link_gbs: float
    link_latency_ms: float = 0.0
    context_bytes: int = 0
    front_ms: float | None = None     # measured (this machine), else from the front end's FLOPs
    head_ms: float | None = None      # measured suffix head, else from its FLOPs
    max_in_flight: int = 2


@dataclass(frozen=True)
class StageTimes:
    front_ms: float
    block_prefix_ms: float
    block_suffix_ms: float
    head_suffix_ms: float
    head_prefix_ms: float
    transfer_ms: float
    bound: dict


def stage_times(work: Workload, sides: Sides) -> StageTimes:
    weights_p = work.params_per_block * sides.prefix_itemsize
    weights_s = work.params_per_block * sides.suffix_itemsize
    block_p, bound_p = sides.prefix.seconds(work.block_flops, weights_p)
    block_s, bound_s = sides.suffix.seconds(work.block_flops, weights_s)
    front = sides.front_ms if sides.front_ms is not None else \
        sides.prefix.seconds(work.front.flops, work.front.params * sides.prefix_itemsize)[0] * 1e3
    head_s = sides.head_ms if sides.head_ms is not None else \
        sides.suffix.seconds(work.head_flops, work.head_params * sides.suffix_itemsize)[0] * 1e3
    head_p = sides.prefix.seconds(work.head_flops, work.head_params * sides.prefix_itemsize)[0] * 1e3
    transfer = boundary_bytes(work, sides.prefix_itemsize) / (sides.link_gbs * 1e9) * 1e3 + sides.link_latency_ms
    return StageTimes(front, block_p * 1e3, block_s * 1e3, head_s, head_p, transfer,
                      {"prefix_block": bound_p, "suffix_block": bound_s})


def boundary_bytes(work: Workload, itemsize: int) -> int:
    """The hidden state (rows x hidden) in the prefix dtype, plus positions and mask (int64)."""
    return work.boundary_elems * itemsize + 2 * work.rows * 8


def gpu_bytes(work: Workload, sides: Sides, hi: int, native: bool = False) -> dict:
    size = sides.prefix_itemsize
    head = work.head_params if native and not work.head_tied else 0   # a tied LM head is the embedding table
    params = work.front.params + work.embed_params + hi * work.params_per_block + head
    activations = max(work.front.activation_elems, work.block_activation_elems if hi else 0) * size
    ring = 0 if native else sides.max_in_flight * boundary_bytes(work, size)
    out = {"weights": params * size, "activations": int(activations), "rings": ring, "context": sides.context_bytes}
    return {**out, "total": sum(out.values())}


def cpu_bytes(work: Workload, sides: Sides, lo: int) -> dict:
    size = sides.suffix_itemsize
    params = (work.num_blocks - lo) * work.params_per_block + work.head_params
    activations = work.block_activation_elems * size if lo < work.num_blocks else work.boundary_elems * size
    ring = (sides.max_in_flight + 1) * boundary_bytes(work, sides.prefix_itemsize)
    out = {"weights": params * size, "activations": int(activations), "rings": ring}
    return {**out, "total": sum(out.values())}


def cut_row(work: Workload, sides: Sides, times: StageTimes, p: int, zone: tuple[int, int] | None = None) -> dict:
    lo, hi = zone or (p, p)
    prefix = times.front_ms + p * times.block_prefix_ms
    suffix = (work.num_blocks - p) * times.block_suffix_ms + times.head_suffix_ms
    return {"p": p, "prefix_ms": prefix, "suffix_ms": suffix, "transfer_ms": times.transfer_ms,
            "period_ms": max(prefix, times.transfer_ms + suffix), "latency_ms": prefix + times.transfer_ms + suffix,
            "bound": "prefix" if prefix >= times.transfer_ms + suffix else "suffix",
            "gpu_bytes": gpu_bytes(work, sides, hi), "cpu_bytes": cpu_bytes(work, sides, lo)}


def native_row(work: Workload, sides: Sides, times: StageTimes) -> dict:
    ms = times.front_ms + work.num_blocks * times.block_prefix_ms + times.head_prefix_ms
    return {"p": work.num_blocks, "period_ms": ms, "latency_ms": ms, "prefix_ms": ms,
            "gpu_bytes": gpu_bytes(work, sides, work.num_blocks, native=True)}


def best_cut(work: Workload, times: StageTimes, fits, prefix_scale: float = 1.0, suffix_scale: float = 1.0):
    """The p of least period among those that fit (ties: the smaller p, fewer GPU bytes); None when none fits."""
    def period(p):
        prefix = prefix_scale * (times.front_ms + p * times.block_prefix_ms)
        suffix = suffix_scale * ((work.num_blocks - p) * times.block_suffix_ms + times.head_suffix_ms)
        return max(prefix, times.transfer_ms + suffix)
    candidates = [p for p in range(work.num_blocks + 1) if fits(p)]
    return min(candidates, key=lambda p: (round(period(p), 9), p)) if candidates else None


def plan(work: Workload, sides: Sides, budget_bytes: int | None = None, slack: float = ZONE_SLACK) -> dict:
    """Every cut, the best one under the budget, its zone, and native; see the module doc."""
    times = stage_times(work, sides)
    rows = [cut_row(work, sides, times, p) for p in range(work.num_blocks + 1)]
    fits = (lambda p: rows[p]["gpu_bytes"]["total"] <= budget_bytes) if budget_bytes else (lambda p: True)
    best = best_cut(work, times, fits)
    out = {"workload": work.to_dict(), "times": times.__dict__, "rows": rows, "native": native_row(work, sides, times),
           "budget_bytes": budget_bytes, "best_p": best, "zone": None, "recommended": None}
    out["cost_model"] = cost_model_fields(out)
    if best is None:
        out["why_none"] = "no cut keeps the GPU bytes under the budget (the front end and embeddings alone do not fit)"
        return out
    lo = best_cut(work, times, fits, prefix_scale=slack)
    hi = best_cut(work, times, fits, suffix_scale=slack)
    out["zone"] = [min(lo, best), max(hi, best)]
    out["recommended"] = cut_row(work, sides, times, best, tuple(out["zone"]))
    out["zone_rule"] = (f"the best cut while the GPU side runs {slack}x slower (zone start) or the CPU side "
                        f"{slack}x slower (zone end), the zone's GPU bytes within the budget")
    return out


def cost_model_fields(result: dict) -> dict:
    """What the scheduler's CostModel takes from a plan (engine/scheduling/costs.py CostModel.from_plan)."""
    t, work = result["times"], result["workload"]
    L = work["num_blocks"]
    return {"embed_ms": t["front_ms"], "prefix_block_ms": [t["block_prefix_ms"]] * L,
            "suffix_block_ms": [t["block_suffix_ms"]] * L, "head_ms": t["head_suffix_ms"],
            "handover_ms": t["transfer_ms"], "tokens_ref": work["tokens"]}


__all__ = ["Sides", "StageTimes", "ZONE_SLACK", "best_cut", "boundary_bytes", "cost_model_fields", "cpu_bytes",
           "cut_row", "gpu_bytes", "native_row", "plan", "stage_times"]
