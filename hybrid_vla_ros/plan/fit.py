"""Where a model that no car's GPU holds fits (`hybrid-vla plan --fit`): for each GPU (a part, or a part with a
budget, `h200:64`), the cuts whose GPU side fits, the best of them for each reasoning length, and native beside it
when it fits at all. The times are plan/decode_heavy.py's (per phase and side); this module only adds memory:

    GPU GiB at cut p   the plan's bytes at p (front end, blocks [0, p), activations, rings, CUDA context)
                       + the expert's layers [0, p) + the KV cache of blocks [0, p) for the frames in flight
                       (prompt + n rows, 2 frames, x2 caches with guidance)
    native GPU GiB     every block and expert layer, lm_head, and one frame's KV cache of every block

A budget is what the VLA may hold (what Autoware and the rest of the car leave); by default the whole GPU, its
datasheet GB read as 10^9 bytes: conservative, as cards show up to ~7% more (an RTX 4090's 24 GB are 24 GiB; give
the GiB `nvidia-smi` shows after ':', up to the datasheet figure read as GiB).
"""

from __future__ import annotations

from dataclasses import dataclass

from ..errors import ConfigError, expect
from .decode_heavy import (IN_FLIGHT, _gpu_gib, best_split, encode_once_assumption, kept_rows_gib, native_row,
                           sampler_ms_here, shapes_of, sides_of_plan, window_times)
from .hardware import PARTS_GPU, GpuSpec, describe
from .run import plan_described

GIB = 2 ** 30


@dataclass(frozen=True)
class FitGpu:
    key: str
    spec: GpuSpec
    budget_gib: float


def parse_fit(text: str) -> list[FitGpu]:
    """'rtx4090,l20,h200:64' -> the parts, each with its budget in GiB (default: its whole memory)."""
    gpus = []
    for item in (t.strip() for t in text.split(",") if t.strip()):
        key, _, budget = item.partition(":")
        expect(key.lower() in PARTS_GPU, ConfigError, f"--fit '{item}': {key!r} is not a part ({sorted(PARTS_GPU)})")
        spec = PARTS_GPU[key.lower()]
        try:
            gib = float(budget) if budget else spec.memory_gb * 1e9 / GIB
        except ValueError as exc:
            raise ConfigError(f"--fit '{item}': the budget after ':' is GiB, e.g. h200:64") from exc
        expect(0 < gib <= spec.memory_gb, ConfigError,
               f"--fit '{item}': budget {gib:g} GiB, the {spec.name} holds at most {spec.memory_gb:g} GiB")
        gpus.append(FitGpu(key.lower(), spec, gib))
    expect(bool(gpus), ConfigError, "--fit: name at least one GPU part, e.g. rtx4090,rtx5090,l20,h200:64")
    return gpus


def kv_gib(s, blocks: int, n: int, itemsize: int, caches: int, frames: int) -> float:
    """The KV cache of `blocks` VLM blocks for `frames` frames of prompt + n rows each."""
    return blocks * (s.prompt + n) * 2 * s.kv_heads * s.head_dim * itemsize * caches * frames / GIB


def _phases(row: dict) -> dict:
    """A split row's chain per window by phase (both sides and the crossings), ms."""
    out = {}
    for part in (row["prefix"], row["suffix"], row["crossings"]):
        for phase, ms in part.items():
            key = "prefill" if phase == "unguided" else phase
            out[key] = out.get(key, 0.0) + ms
    return out


def fit_row(s, result: dict, gpu: FitGpu, sides, n: int, steps: int, guidance: bool, encode_once: bool = True) -> dict:
    gpu_side, cpu_side, link = sides
    size, caches, times = gpu_side.itemsize, 2 if guidance else 1, window_times(result["times"], encode_once)
    kept = kept_rows_gib(s, size, encode_once)
    need = {p: _gpu_gib(s, result, p, size) + kv_gib(s, p, n, size, caches, IN_FLIGHT) + kept
            for p in range(s.blocks + 1)}
    cuts = [p for p, gib in need.items() if gib <= gpu.budget_gib]
    split = best_split(s, times, gpu_side, cpu_side, link, n, steps, guidance, cuts=cuts)
    native = native_row(s, times, gpu_side, n, steps, guidance)
    native_gib = (result["native"]["gpu_bytes"]["total"] + s.vocab * s.hidden * size) / GIB + \
        kv_gib(s, s.blocks, n, size, caches, 1) + kept
    row = {"gpu": gpu.spec.name, "part": gpu.key, "budget_gib": gpu.budget_gib, "n": n,
           "cuts": [min(cuts), max(cuts)] if cuts else None, "native_gib": native_gib,
           "native_fits": native_gib <= gpu.budget_gib, "native_period_ms": native["period_ms"], "split": None}
    if split is not None:
        row["split"] = {"p": split["p"], "gpu_gib": need[split["p"]], "period_ms": split["period_ms"],
                        "latency_ms": split["latency_ms"], "phases_ms": _phases(split)}
        row["gain"] = native["period_ms"] / split["period_ms"] if row["native_fits"] else None
    if encode_once:   # the same window with every image through the tower, in this run (the same measured rates)
        row["every_image"] = every_image(s, result, gpu, sides, n, steps, guidance)
    return row


def every_image(s, result: dict, gpu: FitGpu, sides, n: int, steps: int, guidance: bool) -> dict:
    """The best cut's period and latency, and native's period, with every window's images encoded."""
    other = fit_row(s, result, gpu, sides, n, steps, guidance, encode_once=False)
    split = other["split"] or {}
    return {"p": split.get("p"), "period_ms": split.get("period_ms"), "latency_ms": split.get("latency_ms"),
            "native_period_ms": other["native_period_ms"] if other["native_fits"] else None}


def fit_report(model, gpus: list[FitGpu], cpu, gpu_dtype, cpu_dtype, lengths, steps: int, guidance: bool,
               calibration=None, progress=None, encode_once: bool = True) -> dict:
    """Every GPU x reasoning length; cpu: a CpuSpec, or None for this machine's suffix cores (measured)."""
    rows, sampler, cpu_name, assumptions = [], None, "", []
    for gpu in gpus:
        result = plan_described(model, gpu.spec, gpu.key, cpu, gpu_dtype, cpu_dtype, None, None, calibration,
                                progress=progress)
        s = shapes_of(model, result["workload"])
        sampler = sampler_ms_here(s.vocab) if sampler is None else sampler
        sides = sides_of_plan(result, sampler)
        rows += [fit_row(s, result, gpu, sides, n, steps, guidance, encode_once) for n in lengths]
        cpu_name, assumptions = result["cpu"]["name"], [*assumptions, *result["assumptions"]]
    assumptions.append(encode_once_assumption(encode_once))
    return {"mode": "fit", "model": model.spec.name, "cpu": cpu_name, "steps": steps, "guidance": guidance,
            "encode_once": encode_once,
            "in_flight": IN_FLIGHT, "sampler_ms": sampler, "rows": rows,
            "assumptions": list(dict.fromkeys(assumptions))}


def fit_lines(report: dict) -> list[str]:
    lines = [f"where {report['model']} fits, beside {report['cpu']} ({report['steps']} Euler steps"
             f"{', guidance' if report['guidance'] else ''}; {report['in_flight']} frames in flight; GiB with the KV "
             f"cache):",
             "  GPU                           budget      n  native GiB  native ms  cuts that fit  best p  GPU GiB  "
             "prefill ms  reasoning ms  expert ms  period ms  latency ms  vs native"]
    for r in report["rows"]:
        sp = r["split"]
        native = f"{r['native_period_ms']:9.0f}" if r["native_fits"] else "  no fit "
        head = f"  {r['gpu'][:28]:28s} {r['budget_gib']:6.1f} {r['n']:6d} {r['native_gib']:11.1f} {native}"
        if sp is None:
            lines.append(f"{head}  none: the front end and embeddings alone exceed the budget")
            continue
        ph, gain = sp["phases_ms"], r.get("gain")
        vs = f"{gain:8.2f}x" if gain is not None else "  only way"
        lines.append(f"{head}  [{r['cuts'][0]:2d}, {r['cuts'][1]:2d}]     {sp['p']:7d} {sp['gpu_gib']:8.1f} "
                     f"{ph.get('prefill', 0):11.0f} {ph.get('decode', 0):13.0f} {ph.get('expert', 0):10.0f} "
                     f"{sp['period_ms']:10.0f} {sp['latency_ms']:11.0f} {vs}")
    return lines + ["  assumptions:"] + [f"    - {a}" for a in report["assumptions"]]
