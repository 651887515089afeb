"""How much of a device's published peak a block reaches: measured here where it can be, published or assumed
(and said so) where it cannot. Pure arithmetic; the measuring is in measure.py.

A block's achieved rate on a device = peak(dtype) x (GEMM ceiling / peak) x (block / GEMM ceiling):

- block / GEMM ceiling: measured HERE on a block of the real shape (same cores, same dtype, back to back, so a
  competing load on this shared machine cancels out), and taken to carry over to the target device: it is
  the share of the block's time outside its big matrix products (attention, norms, rotary, dispatch).
- GEMM ceiling / peak: for a CPU, this machine's CPU measured against its own peak (hardware.this_cpu) in the
  same dtype, carried to the described CPU's peak, also where that CPU takes another instruction path (AMX:
  this machine has none; the plan says so, and run.py reports the published AMX figure beside it). For a
  GPU: a published GEMM measurement (source in the table below), or, where none was at hand, "assumed".
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field

from .hardware import CpuSpec, GpuSpec, dtype_key

# (GEMM TFLOP/s reached / datasheet peak, source). Keys: (gpu part, dtype).
GPU_GEMM_OF_PEAK = {
    ("l20", "fp32"): (0.61, "published: torch.matmul fp32 (cuBLAS SGEMM) 4096x4096x2048 in 1.90 ms = 36 TFLOP/s on "
                            "the Ada card of DefTruth/CUDA-Learn-Notes sgemm/README.md (whose text gives the L20's "
                            "59.8 TFLOPS FP32 peak): 0.61 of peak"),
    ("l20", "bf16"): (0.92, "published: cuBLAS HGEMM 105-115 TFLOP/s of the L20's 119.5 (DefTruth/CUDA-Learn-Notes "
                            "hgemm/README.md); bf16 taken equal"),
    ("l20", "fp16"): (0.92, "published: cuBLAS HGEMM 105-115 TFLOP/s of the L20's 119.5 (DefTruth/CUDA-Learn-Notes "
                            "hgemm/README.md)"),
}
GPU_GEMM_DEFAULT = (0.70, "assumed (no published GEMM figure at hand for this part and dtype): 0.70 of the "
                          "datasheet peak; scripts/gpu_plan_check.sh measures it on a lent GPU")
AMX_GEMM_OF_PEAK = (0.50, "published: MKL bf16 GEMM n=4096 on one core of a Xeon 6972P, 1229 GFLOP/s (johnnyw3/gemm "
                          "README) against 1024 FLOP/cycle x 2.4 GHz base = 2458: 0.50")
GPU_BANDWIDTH_OF_PEAK = (0.80, "assumed: a streaming read reaches 0.8 of the datasheet memory bandwidth")
CPU_BANDWIDTH_OF_PEAK = (0.75, "assumed: a STREAM-like read reaches 0.75 of the DDR channels' peak")
LINK_OF_PEAK = (0.80, "assumed: a pinned device-to-host copy reaches 0.8 of the link's datasheet rate")
LINK_LATENCY_MS = 0.05   # assumed: one copy's launch + synchronise
CUDA_CONTEXT_BYTES = 512 * 2**20   # assumed: CUDA context + cuBLAS/cuDNN workspaces of a PyTorch process


@dataclass(frozen=True)
class BlockMeasure:
    """One real-shape block timed here (measure.py): rows, dtype, the block's median and its largest GEMM's best
    GFLOP/s, their paired ratio, and this CPU's peak for the dtype's path."""
    shape: str                  # 'hidden x intermediate, heads/kv_heads'
    rows: int
    dtype: str
    path: str
    block_gflops: float
    gemm_gflops: float
    peak_gflops: float
    block_ms: float
    block_of_gemm: float = 0.0  # median over back-to-back (block, GEMM) pairs of their rate ratio; 0: the rates'
    device: str = "cpu"
    cores: tuple = ()
    beside: tuple = ()          # the cores another block ran on meanwhile (the other stage, as when pipelined)
    blocks: int = 1             # distinct blocks run in turn (more than 1: weights streamed, measure.py)
    loadavg: float = 0.0
    pairs: int = 0

    def __post_init__(self) -> None:
        if not self.block_of_gemm:
            object.__setattr__(self, "block_of_gemm", self.block_gflops / self.gemm_gflops)

    @property
    def gemm_of_peak(self) -> float:
        return self.gemm_gflops / self.peak_gflops

    def to_dict(self) -> dict:
        return {**dataclasses.asdict(self), "gemm_of_peak": self.gemm_of_peak}

    @classmethod
    def from_dict(cls, data: dict) -> "BlockMeasure":
        names = {f.name for f in dataclasses.fields(cls)}
        return cls(**{k: (tuple(v) if k in ("cores", "beside") else v) for k, v in data.items() if k in names})


@dataclass(frozen=True)
class Rate:
    """What a side of the plan computes with: achieved GFLOP/s and GB/s, and where each factor came from."""
    device: str
    dtype: str
    gflops: float
    gbs: float
    factors: dict = field(default_factory=dict)   # name -> (value, source)

    def seconds(self, flops: float, nbytes: float) -> tuple[float, str]:
        compute, memory = flops / (self.gflops * 1e9), nbytes / (self.gbs * 1e9)
        return (compute, "compute") if compute >= memory else (memory, "memory")


def cpu_rate(cpu: CpuSpec, dtype, measured: BlockMeasure) -> Rate:
    """A described CPU: its peak for the dtype's path x this CPU's measured GEMM ceiling / peak (for the same
    dtype; carried across instruction paths when the described CPU takes another, e.g. AMX: said so) x the
    block / GEMM share measured here."""
    path = cpu.path(dtype)
    share = measured.gemm_of_peak
    carried = "" if path == measured.path else f", carried to {path} (this CPU has no {path} path)"
    if carried and share > 1.0:   # this CPU beat its own nominal peak (a clock above the nominal): not carried
        share, carried = 1.0, f"{carried}; above 1 here (clock over the nominal), taken as 1.0 there"
    gemm = (share, f"measured here: {measured.gemm_gflops:.0f} GFLOP/s GEMM ceiling of "
                   f"{measured.peak_gflops:.0f} peak on the {measured.path} path{carried}")
    block = (measured.block_of_gemm, f"measured here: one {measured.shape} block at {measured.rows} rows in "
                                     f"{measured.dtype} against its largest GEMM, run in {measured.pairs} "
                                     f"back-to-back pairs (block median {measured.block_gflops:.0f} GFLOP/s)")
    peak = cpu.peak_gflops(dtype)
    factors = {"peak_gflops": (peak, f"{cpu.cores} cores x {cpu.flops_per_cycle(dtype):.0f} FLOP/cycle ({path}) x "
                                     f"{cpu.ghz} GHz"),
               "gemm_of_peak": gemm, "block_of_gemm": block,
               "bandwidth_of_peak": CPU_BANDWIDTH_OF_PEAK}
    return Rate(cpu.name, dtype_key(dtype), peak * gemm[0] * block[0], cpu.memory_gbs * CPU_BANDWIDTH_OF_PEAK[0],
                factors)


def gpu_rate(gpu: GpuSpec, part: str, dtype, measured: BlockMeasure) -> Rate:
    """A described GPU: datasheet peak x published GEMM/peak x block/GEMM measured here on the CPU for the same
    block shape and dtype (taken to carry over: an assumption, stated)."""
    key = dtype_key(dtype)
    gemm = GPU_GEMM_OF_PEAK.get((part, key), GPU_GEMM_DEFAULT)
    block = (measured.block_of_gemm, f"measured here on the CPU ({measured.shape}, {measured.rows} rows, "
                                     f"{measured.dtype}), assumed to carry over to the GPU")
    peak = gpu.peak_gflops(key)
    factors = {"peak_gflops": (peak, gpu.source), "gemm_of_peak": gemm, "block_of_gemm": block,
               "bandwidth_of_peak": GPU_BANDWIDTH_OF_PEAK}
    return Rate(gpu.name, key, peak * gemm[0] * block[0], gpu.memory_gbs * GPU_BANDWIDTH_OF_PEAK[0], factors)


def measured_rate(device: str, measured: BlockMeasure, bandwidth_gbs: float) -> Rate:
    """A device measured here (this machine's cores, or a GPU present): the block's own achieved rate."""
    return Rate(device, measured.dtype, measured.block_gflops, bandwidth_gbs,
                {"measured_block_gflops": (measured.block_gflops, f"measured here: one {measured.shape} block "
                                                                  f"at {measured.rows} rows, {measured.block_ms:.1f} ms"
                                                                  + (f" (each of {measured.blocks} blocks in turn)"
                                                                     if measured.blocks > 1 else "")),
                 "bandwidth_gbs": (bandwidth_gbs, "measured here: streaming read")})


__all__ = ["AMX_GEMM_OF_PEAK", "BlockMeasure", "CUDA_CONTEXT_BYTES", "GPU_GEMM_OF_PEAK", "LINK_LATENCY_MS",
           "LINK_OF_PEAK", "Rate", "cpu_rate", "gpu_rate", "measured_rate"]
