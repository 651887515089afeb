"""The two sides of a plan, for this machine or for described hardware.

- This machine: the prefix on the GPU when CUDA is present (its block timed there), else on the stand-in core
  set (engine/cpu.py core_plan); the suffix on its cores. Each side's block is timed at the real shape, the
  front end and head as the stages run them (small models), so the rates are measured, not assumed.
- Described hardware (a part of hardware.py's table or a description): published peaks x efficiencies
  (efficiency.py), the block / GEMM share measured here on a block of the same shape in the side's dtype.
Measurements are kept in a Calibration (a JSON file can carry them from one run to the next).
"""

from __future__ import annotations

import json
from pathlib import Path

import torch

from ..engine.cpu import core_plan
from ..engine.placement import INT8, Placement, int8_rest_dtype
from .efficiency import (CUDA_CONTEXT_BYTES, LINK_LATENCY_MS, LINK_OF_PEAK, BlockMeasure, Rate, cpu_rate, gpu_rate,
                         measured_rate)
from .hardware import PARTS_GPU, CpuSpec, GpuSpec, dtype_key
from .measure import (calibration_rows, gpu_part, measure_bandwidth, measure_block, measure_front_ms,
                      measure_head_ms, resident_blocks)
from .predict import Sides
from .workload import Workload

ASSUMED_PCIE_GBS = 25.0   # assumed for a CUDA device not in the parts table (a PCIe 4.0 x16 copy)


class Calibration:
    """Block measurements here, keyed by (shape, dtype, rows, device, cores), with the optional JSON file they
    persist in (a GPU's timings are kept only for the run that made them: a later run may have another GPU)."""

    def __init__(self, path: str | None = None):
        self.path = Path(path) if path else None
        self.blocks: dict[tuple, BlockMeasure] = {}
        self.bandwidth_gbs: dict[str, float] = {}
        if self.path and self.path.is_file():
            data = json.loads(self.path.read_text())
            for item in data.get("blocks", []):
                m = BlockMeasure.from_dict(item)
                self.blocks[(m.shape, m.dtype, m.rows, m.device, m.cores, m.beside, m.blocks)] = m
            self.bandwidth_gbs = data.get("bandwidth_gbs", {})

    def block(self, model, rows: int, dtype: torch.dtype, cores, device="cpu", progress=None,
              beside=None, streamed: bool = False) -> BlockMeasure:
        """beside: the other stage's CPU cores, on which the same block runs while this one is timed; streamed:
        the blocks in turn (measure.py resident_blocks), as a stage runs them."""
        spec = model.spec
        count = len(resident_blocks(model, streamed))
        key = (f"{spec.hidden_size} x {spec.intermediate_size}, {spec.num_heads}/{spec.num_kv_heads} heads",
               dtype_key(dtype), rows, str(device), tuple(cores or ()), tuple(beside or ()), count)
        if key not in self.blocks:
            if progress:
                progress(f"timing {'one' if count == 1 else f'each of {count}'} {key[0]} block{'s' * (count > 1)} "
                         f"at {rows} rows in {key[1]} on {device} {cores or ''}"
                         f"{f', the other stage running on {list(beside)}' if beside else ''}")
            self.blocks[key] = measure_block(model, rows, dtype, cores, device, beside=beside, streamed=streamed)
        return self.blocks[key]

    def bandwidth(self, cores, device="cpu") -> float:
        key = f"{device}:{cores}"
        if key not in self.bandwidth_gbs:
            self.bandwidth_gbs[key] = measure_bandwidth(cores, device)
        return self.bandwidth_gbs[key]

    def save(self) -> None:
        if self.path:
            self.path.parent.mkdir(parents=True, exist_ok=True)
            blocks = [m.to_dict() for m in self.blocks.values() if m.device == "cpu"]
            self.path.write_text(json.dumps({"blocks": blocks,
                                             "bandwidth_gbs": self.bandwidth_gbs}, indent=2))

    def measures(self) -> list[dict]:
        return [m.to_dict() for m in self.blocks.values()]


def itemsize(dtype) -> int:
    """Bytes per element of the activations a side holds; an int8 suffix's are in its float rest dtype."""
    if dtype == INT8:
        dtype = int8_rest_dtype()
    return torch.empty((), dtype=dtype).element_size()


def rates_here(model, rows: int, placement: Placement, calibration: Calibration, progress=None,
               prefix_rows: int | None = None) -> tuple:
    """(prefix Rate, suffix Rate) of this machine at `rows` rows (the prefix at prefix_rows where given): each
    side's blocks timed in turn on its own device and cores (streamed, as a stage runs them); both on this CPU:
    each with the other side running beside it."""
    prefix_cores, suffix_cores, devices = core_plan(placement)
    pdev, on_cpu = placement.prefix_device, not placement.uses_cuda
    pre = calibration.block(model, prefix_rows or rows, placement.prefix_dtype,
                            None if placement.uses_cuda else prefix_cores,
                            pdev, progress, beside=suffix_cores if on_cpu else None, streamed=True)
    suf = calibration.block(model, rows, placement.suffix_kind, suffix_cores, "cpu", progress,
                            beside=prefix_cores if on_cpu else None, streamed=True)
    pre_bw = calibration.bandwidth(None if placement.uses_cuda else prefix_cores, str(pdev))
    return (measured_rate(devices["prefix"], pre, pre_bw),
            measured_rate(devices["suffix"], suf, calibration.bandwidth(suffix_cores)))


def sides_here(model, work: Workload, placement: Placement, calibration: Calibration, progress=None) -> tuple:
    """(Sides, description) of this machine for `model` as `placement` places it: every rate measured."""
    prefix_cores, suffix_cores, devices = core_plan(placement)
    rows = work.rows if not model.spec.real_size else calibration_rows(work)   # a real-size CPU block: capped
    pdev = placement.prefix_device
    prefix_rate, suffix_rate = rates_here(model, rows, placement, calibration, progress,
                                          work.rows if placement.uses_cuda else rows)   # a GPU: the frame's rows
    suf_bw = calibration.bandwidth(suffix_cores)
    if placement.uses_cuda:
        part = gpu_part(pdev)
        link = PARTS_GPU[part].link_gbs * LINK_OF_PEAK[0] if part else ASSUMED_PCIE_GBS
        latency, context = LINK_LATENCY_MS, CUDA_CONTEXT_BYTES
    else:
        link, latency, context = suf_bw, 0.0, 0   # in one process the boundary is handed over, not copied
    if progress:
        progress("timing the front end and the head as the stages run them")
    sides = Sides(prefix=prefix_rate, suffix=suffix_rate,
                  prefix_itemsize=itemsize(placement.prefix_dtype), suffix_itemsize=itemsize(placement.suffix_kind),
                  link_gbs=link, link_latency_ms=latency, context_bytes=context,
                  front_ms=measure_front_ms(model, placement, prefix_cores),
                  head_ms=measure_head_ms(model, placement, suffix_cores))
    return sides, {"devices": devices, "prefix_cores": prefix_cores, "suffix_cores": suffix_cores,
                   "measured_rows": rows}


def sides_of(prefix: Rate, suffix: Rate, gpu: GpuSpec, prefix_dtype, suffix_dtype, max_in_flight: int = 2) -> Sides:
    """Sides from two rates (measured or described) with a described GPU's link and a CUDA context."""
    return Sides(prefix=prefix, suffix=suffix, prefix_itemsize=itemsize(prefix_dtype),
                 suffix_itemsize=itemsize(suffix_dtype), link_gbs=gpu.link_gbs * LINK_OF_PEAK[0],
                 link_latency_ms=LINK_LATENCY_MS, context_bytes=CUDA_CONTEXT_BYTES, max_in_flight=max_in_flight)


def described_rates(gpu: GpuSpec, gpu_key: str, cpu: CpuSpec, gpu_measure: BlockMeasure, cpu_measure: BlockMeasure,
                    gpu_dtype, cpu_dtype) -> tuple[Rate, Rate]:
    """Published peaks x the efficiencies measured or stated (efficiency.py)."""
    return gpu_rate(gpu, gpu_key, gpu_dtype, gpu_measure), cpu_rate(cpu, cpu_dtype, cpu_measure)


__all__ = ["Calibration", "described_rates", "itemsize", "rates_here", "sides_here", "sides_of"]
