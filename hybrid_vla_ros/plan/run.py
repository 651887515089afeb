"""The planner's entry points: a plan for this machine, for described hardware, and the paper comparison.
Each result carries every assumption it rests on (`assumptions`) and the measurements it used (`measured`)."""

from __future__ import annotations

import dataclasses
import os

import torch

from ..engine.cpu import core_plan
from ..engine.placement import Placement
from .chunks import chunked_section
from .efficiency import AMX_GEMM_OF_PEAK, CUDA_CONTEXT_BYTES, LINK_LATENCY_MS, LINK_OF_PEAK, Rate, measured_rate
from .efficiency import gpu_rate as gpu_rate_of
from .hardware import PARTS_GPU, XEON_8470Q, CpuSpec, GpuSpec, describe, dtype_key
from .machine import Calibration, described_rates, rates_here, sides_here, sides_of
from .measure import CALIBRATION_ROWS, calibration_rows
from .paper import DTYPE_REASONING, PAPER_MODELS, PAPER_SOURCE, compare, implied_by_paper, with_tokens
from .predict import ZONE_SLACK, plan
from .workload import workload_from_model

GENERAL_ASSUMPTIONS = (
    "period = max(prefix, transfer + suffix): the cross-frame pipeline in steady state; latency = their sum",
    "a block's time = max(FLOPs / achieved FLOP/s, weight bytes / achieved bandwidth); activations' traffic not "
    "counted; attention FLOPs halved for the causal mask",
    "no KV cache is kept across frames (one prefill per frame, as ORION and MindDrive run)",
    "activations: the largest working set of one layer (memory-efficient attention, no S x S matrix)",
)


def _rate_lines(side: str, rate: Rate) -> list[str]:
    return [f"{side} {name}: {value:.4g} ({source})" for name, (value, source) in rate.factors.items()]


def plan_here(model, placement: Placement, budget_bytes: int | None = None, tokens: int | None = None,
              calibration: Calibration | None = None, progress=None, chunks=None) -> dict:
    """Plan for this machine as `placement` places the model: every rate measured on its own cores; chunks
    (e.g. [1, 2, "camera"]): the chunked prefill's period and latency at the best cut too (plan/chunks.py)."""
    calibration = calibration or Calibration()
    work = workload_from_model(model, tokens)
    sides, where = sides_here(model, work, placement, calibration, progress)
    result = _with_chunks(plan(work, sides, budget_bytes), model, work, sides, chunks,
                          _rates_at_rows(model, placement, calibration, progress))
    front = "measured as the prefix stage runs it" if sides.front_ms is not None else \
        f"{work.front.flops / 1e9:.1f} GFLOP at the prefix's measured block rate"
    notes = [f"this machine: prefix on {where['devices']['prefix']}, suffix on {where['devices']['suffix']}",
             f"blocks timed at {where['measured_rows']} rows (the model's {work.rows})", f"front end: {front}",
             "transfer: " + ("in one process the boundary is handed over, not copied" if not placement.uses_cuda else
                             f"link at {LINK_OF_PEAK[0]} of its datasheet rate + {LINK_LATENCY_MS} ms"),
             *_rate_lines("prefix", sides.prefix), *_rate_lines("suffix", sides.suffix)]
    if placement.uses_cuda:
        notes.append(f"CUDA context + workspaces: {CUDA_CONTEXT_BYTES / 2**20:.0f} MiB (assumed)")
    return {**result, "mode": "this machine", "placement": placement.describe(), **where,
            "assumptions": [*GENERAL_ASSUMPTIONS, *work.notes, *notes, _load_note(calibration)],
            "measured": calibration.measures()}


def _with_chunks(result: dict, model, work, sides, chunks, rates_at=None) -> dict:
    section = chunked_section(model, work, sides, result["best_p"], chunks, rates_at=rates_at)
    return {**result, "chunked": section} if section else result


def _rates_at_rows(model, placement: Placement, calibration: Calibration, progress=None):
    """rows -> (prefix Rate, suffix Rate) of this machine timed at that many rows (a chunk's), kept in the
    calibration; a real-size CPU block at most CALIBRATION_ROWS rows, as for the frame."""
    def rates_at(rows: int):
        rows = min(rows, CALIBRATION_ROWS) if model.spec.real_size and not placement.uses_cuda else rows
        return rates_here(model, rows, placement, calibration, progress)
    return rates_at


def _load_note(calibration: Calibration) -> str:
    """The load average recorded with the block timings used (a calibration file keeps its own)."""
    loads, cores = [m["loadavg"] for m in calibration.measures()], os.cpu_count() or 1
    if not loads:
        return "no block was timed"
    busy = max(loads) > cores
    return (f"load average {min(loads):.1f}-{max(loads):.1f} on {cores} cores while the blocks were timed" +
            (": a competing load slowed what was timed" if busy else ""))


def plan_described(model, gpu: GpuSpec, gpu_key: str, cpu: CpuSpec | None, gpu_dtype, cpu_dtype,
                   budget_bytes: int | None = None, tokens: int | None = None, calibration: Calibration | None = None,
                   work=None, progress=None, chunks=None) -> dict:
    """Plan for a described GPU (and a described CPU, or this machine's suffix cores when cpu is None)."""
    calibration = calibration or Calibration()
    work = work or workload_from_model(model, tokens)
    _, suffix_cores, _ = core_plan(this_placement())
    rows = calibration_rows(work)
    gm = calibration.block(model, rows, gpu_dtype, suffix_cores, progress=progress)
    cm = calibration.block(model, rows, cpu_dtype, suffix_cores, progress=progress)
    if cpu is None:   # this machine's own suffix cores: their measured block rate
        cpu = _this_suffix_cpu(calibration, suffix_cores)
        gpu_rate = gpu_rate_of(gpu, gpu_key, gpu_dtype, gm)
        cpu_rate = measured_rate(cpu.name, cm, calibration.bandwidth(suffix_cores))
    else:
        gpu_rate, cpu_rate = described_rates(gpu, gpu_key, cpu, gm, cm, gpu_dtype, cpu_dtype)
    sides = sides_of(gpu_rate, cpu_rate, gpu, gpu_dtype, cpu_dtype)
    result = _with_chunks(plan(work, sides, budget_bytes), model, work, sides, chunks)
    return {**result, "mode": "described", "gpu": describe(gpu), "cpu": describe(cpu),
            "dtypes": {"gpu": dtype_key(gpu_dtype), "cpu": dtype_key(cpu_dtype)},
            "assumptions": [*GENERAL_ASSUMPTIONS, *work.notes, f"GPU: {gpu.source}", f"CPU: {cpu.source}",
                            *_rate_lines("GPU", gpu_rate), *_rate_lines("CPU", cpu_rate),
                            f"transfer: {gpu.link} at {LINK_OF_PEAK[0]} of {gpu.link_gbs} GB/s + {LINK_LATENCY_MS} ms",
                            f"CUDA context + workspaces: {CUDA_CONTEXT_BYTES / 2**20:.0f} MiB (assumed)",
                            f"zone: the best cut with either side {ZONE_SLACK}x slower", _load_note(calibration)],
            "measured": calibration.measures(), "rates": {"gpu": dataclasses.asdict(gpu_rate),
                                                          "cpu": dataclasses.asdict(cpu_rate)}}


def this_placement() -> Placement:
    """This machine's default placement (the suffix's cores as a run here would give them: with CUDA all but
    the GPU's feeding core, else half)."""
    return Placement(torch.device("cuda")) if torch.cuda.is_available() else Placement()


def _this_suffix_cpu(calibration: Calibration, cores) -> CpuSpec:
    from .hardware import this_cpu
    return this_cpu(cores=len(cores), memory_gbs=calibration.bandwidth(cores))


def paper_report(calibration: Calibration | None = None, tokens: dict | None = None, progress=None) -> dict:
    """ORION and MindDrive at the paper's hardware (L20 fp32 + Xeon 8470Q bf16), beside the paper's table."""
    from ..model.load import load_vla
    calibration = calibration or Calibration()
    out = {"source": PAPER_SOURCE, "dtype_reasoning": DTYPE_REASONING, "models": {}}
    for key, base in PAPER_MODELS.items():
        model_ = with_tokens(base, (tokens or {}).get(key))
        blocks = load_vla(preset=model_.block_preset, lazy=True)
        result = plan_described(blocks, PARTS_GPU["l20"], "l20", XEON_8470Q, torch.float32, torch.bfloat16,
                                calibration=calibration, work=model_.workload, progress=progress)
        result["comparison"] = compare(result, model_.figures)
        result["implied_by_paper"] = implied_by_paper(model_.workload, model_.figures, result["times"]["transfer_ms"])
        result["sensitivity"] = _cpu_sensitivity(blocks, model_, calibration)
        out["models"][key] = result
    return out


def _cpu_sensitivity(blocks, paper_model, calibration: Calibration) -> list[dict]:
    """The same plan with the CPU's one unmeasurable factor changed: how the 8470Q's bf16 GEMMs relate to its
    peak (this machine has no AMX). Reported beside the default, never chosen by closeness to the paper."""
    work = paper_model.workload
    rows = calibration_rows(work)
    _, cores, _ = core_plan(this_placement())
    gm = calibration.block(blocks, rows, torch.float32, cores)
    cm = calibration.block(blocks, rows, torch.bfloat16, cores)
    variants = {"AMX at the published GEMM efficiency (" + AMX_GEMM_OF_PEAK[1] + ")": (XEON_8470Q, AMX_GEMM_OF_PEAK[0]),
                "AMX unused: the AVX-512 bf16 path at this machine's measured GEMM / peak":
                    (dataclasses.replace(XEON_8470Q, isa="avx512_bf16"), None)}
    out = []
    for name, (cpu, gemm_of_peak) in variants.items():
        gpu_rate, cpu_rate = described_rates(PARTS_GPU["l20"], "l20", cpu, gm, cm, torch.float32, torch.bfloat16)
        if gemm_of_peak is not None:
            cpu_rate = dataclasses.replace(cpu_rate, gflops=cpu.peak_gflops(torch.bfloat16) * gemm_of_peak
                                           * cm.block_of_gemm)
        result = plan(work, sides_of(gpu_rate, cpu_rate, PARTS_GPU["l20"], torch.float32, torch.bfloat16))
        row = result["rows"][result["best_p"]]
        out.append({"variant": name, "cpu_tflops": cpu_rate.gflops / 1e3, "best_p": result["best_p"],
                    "period_ms": row["period_ms"], "latency_ms": row["latency_ms"],
                    "hybrid_gpu_gib": row["gpu_bytes"]["total"] / 2**30})
    return out


__all__ = ["GENERAL_ASSUMPTIONS", "paper_report", "plan_described", "plan_here"]
