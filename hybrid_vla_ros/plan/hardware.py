"""Hardware as plain dataclasses, a small table of published parts, and a description of this machine's CPU.

Peaks are datasheet figures (dense, no sparsity). A CPU's peak is cores x FLOPs per cycle of the instruction
path its BLAS takes for the dtype x the sustained all-core clock; the FLOPs per cycle come from the ISA (a
fused multiply-add counts 2):

    path          fp32   bf16   int8   (per core per cycle)
    avx2            32     32     64   2 x 256-bit FMA; bf16 converted to fp32; int8: VPMADDUBSW pairs (2x fp32)
    avx512          64     64    128   2 x 512-bit FMA (Xeon Gold/Platinum); bf16 converted; int8 as AVX2, wider
    avx512_bf16     64    128    256   VDPBF16PS: 32 bf16 products + 32 adds per instruction, 2 ports; int8:
                                       VPDPBUSD (VNNI, which every avx512_bf16 CPU has): 64 MACs per instruction
    amx             64   1024   2048   AMX-BF16 / AMX-INT8 tiles (Intel: 1024 bf16 and 2048 int8 ops per cycle per core)

int8 means the CPU suffix's int8 linears (engine/int8.py); an "op" is a multiply or an add, as a FLOP.

A 256-bit datapath (AMD Zen 4 runs AVX-512 double-pumped) halves the vector paths. No ROS, no torch.
"""

from __future__ import annotations

import dataclasses
import os
from dataclasses import dataclass
from pathlib import Path

from ..errors import ConfigError, expect

VECTOR_FLOPS = {"avx2": {"fp32": 32, "bf16": 32, "int8": 64}, "avx512": {"fp32": 64, "bf16": 64, "int8": 128},
                "avx512_bf16": {"fp32": 64, "bf16": 128, "int8": 256}, "amx": {"fp32": 64, "bf16": 1024, "int8": 2048}}
ISA_ORDER = ("avx2", "avx512", "avx512_bf16", "amx")
DTYPE_KEYS = {"fp32": "fp32", "float32": "fp32", "bf16": "bf16", "bfloat16": "bf16", "fp16": "fp16",
              "float16": "fp16", "int8": "int8"}


def dtype_key(dtype) -> str:
    """'fp32', 'bf16', 'fp16' or 'int8' (the CPU suffix's int8 linears) from a name or a torch dtype."""
    name = str(dtype).replace("torch.", "")
    expect(name in DTYPE_KEYS, ConfigError, f"dtype '{dtype}': expected one of fp32, bf16, fp16, int8")
    return DTYPE_KEYS[name]


@dataclass(frozen=True)
class CpuSpec:
    name: str
    cores: int                  # cores the suffix may use
    isa: str                    # best path: avx2, avx512, avx512_bf16 or amx (see the module doc)
    ghz: float                  # sustained all-core clock under vector load
    memory_gbs: float           # DRAM bandwidth (datasheet: channels x MT/s x 8 B), or measured here
    datapath_bits: int = 512    # 256: AVX-512 executed as two halves (AMD Zen 4)
    memory_gb: float = 0.0
    source: str = ""

    def __post_init__(self) -> None:
        expect(self.isa in VECTOR_FLOPS, ConfigError, f"cpu '{self.name}': isa '{self.isa}' is not one of {ISA_ORDER}")
        expect(self.cores >= 1 and self.ghz > 0 and self.memory_gbs > 0, ConfigError,
               f"cpu '{self.name}': cores {self.cores}, ghz {self.ghz}, memory_gbs {self.memory_gbs}: expected > 0")

    def path(self, dtype) -> str:
        """The instruction path a BLAS takes for dtype: amx_bf16, avx512_bf16, avx512_fp32 or avx2_fp32 (fp16 and
        a bf16 without native support run at the fp32 rate)."""
        vector = "avx2" if self.isa == "avx2" else "avx512"
        key = dtype_key(dtype)
        if key == "int8":
            return {"amx": "amx_int8", "avx512_bf16": "avx512_vnni_int8"}.get(self.isa, f"{vector}_int8")
        if key == "bf16" and self.isa in ("amx", "avx512_bf16"):
            return f"{self.isa}_bf16" if self.isa == "amx" else "avx512_bf16"
        return f"{vector}_fp32"

    def flops_per_cycle(self, dtype) -> float:
        key = dtype_key(dtype)
        key = key if key in ("bf16", "int8") else "fp32"   # fp16: the fp32 rate (see path)
        flops = VECTOR_FLOPS[self.isa][key]
        matrix = self.isa == "amx" and key in ("bf16", "int8")
        return flops if matrix or self.datapath_bits == 512 else flops / 2

    def peak_gflops(self, dtype) -> float:
        return self.cores * self.flops_per_cycle(dtype) * self.ghz

    def with_cores(self, cores: int) -> "CpuSpec":
        return dataclasses.replace(self, cores=cores)


@dataclass(frozen=True)
class GpuSpec:
    name: str
    tflops: dict                # dtype -> dense datasheet TFLOP/s: fp32 (SIMT), bf16/fp16 (tensor cores)
    memory_gbs: float
    memory_gb: float
    link_gbs: float             # host link per direction (PCIe x16 datasheet; shared DRAM: its bandwidth)
    link: str = ""
    shared_memory: bool = False  # Orin: GPU and CPU share one DRAM (the GPU budget is the car's memory)
    source: str = ""

    def peak_gflops(self, dtype) -> float:
        key = dtype_key(dtype)
        expect(key in self.tflops, ConfigError, f"gpu '{self.name}': no published {key} peak (has {sorted(self.tflops)})")
        return self.tflops[key] * 1e3


XEON_8470Q = CpuSpec(
    name="Intel Xeon Platinum 8470Q", cores=52, isa="amx", ghz=2.1, memory_gbs=307.2, memory_gb=0.0,
    source="Intel ARK: 52 cores, base 2.1 GHz (taken as the all-core clock under AVX-512/AMX load; the "
           "per-SKU AVX/AMX turbo is not published), 8 channels DDR5-4800 = 307.2 GB/s per socket, AMX + "
           "AVX-512 with 2 FMA units; one socket assumed for the suffix")
PARTS_CPU = {"xeon-8470q": XEON_8470Q}

PARTS_GPU = {
    "l20": GpuSpec("NVIDIA L20", {"fp32": 59.8, "bf16": 119.5, "fp16": 119.5}, memory_gbs=864.0, memory_gb=48.0,
                   link_gbs=32.0, link="PCIe 4.0 x16",
                   source="NVIDIA L20 datasheet: 48 GB GDDR6, 864 GB/s, FP32 59.8 TFLOPS, BF16/FP16 tensor 119.5 "
                          "TFLOPS dense (239 with sparsity), PCIe Gen4 x16"),
    "h200": GpuSpec("NVIDIA H200 SXM", {"fp32": 67.0, "bf16": 989.5, "fp16": 989.5}, memory_gbs=4800.0,
                    memory_gb=141.0, link_gbs=64.0, link="PCIe 5.0 x16",
                    source="NVIDIA H200 datasheet: 141 GB HBM3e, 4.8 TB/s, FP32 67 TFLOPS, BF16/FP16 tensor 1979 "
                           "TFLOPS with sparsity (989.5 dense), PCIe Gen5 x16"),
    "rtx4090": GpuSpec("NVIDIA GeForce RTX 4090", {"fp32": 82.6, "bf16": 165.2, "fp16": 165.2}, memory_gbs=1008.0,
                       memory_gb=24.0, link_gbs=32.0, link="PCIe 4.0 x16",
                       source="NVIDIA Ada Lovelace architecture whitepaper: 24 GB GDDR6X, 1008 GB/s, FP32 82.6 TFLOPS, "
                              "FP16/BF16 tensor with FP32 accumulate 165.2 TFLOPS dense (330.4 with sparsity), PCIe "
                              "Gen4 x16"),
    "rtx5090": GpuSpec("NVIDIA GeForce RTX 5090", {"fp32": 104.8, "bf16": 209.5, "fp16": 209.5}, memory_gbs=1792.0,
                       memory_gb=32.0, link_gbs=64.0, link="PCIe 5.0 x16",
                       source="NVIDIA Blackwell (GB202) figures: 32 GB GDDR7, 1792 GB/s, FP32 104.8 TFLOPS, FP16/BF16 "
                              "tensor with FP32 accumulate 209.5 TFLOPS dense (419 with sparsity), PCIe Gen5 x16"),
    "orin": GpuSpec("NVIDIA Jetson AGX Orin 64GB", {"fp32": 5.3, "bf16": 42.5, "fp16": 42.5}, memory_gbs=204.8,
                    memory_gb=64.0, link_gbs=204.8, link="shared LPDDR5", shared_memory=True,
                    source="Jetson AGX Orin technical brief: 2048 CUDA cores (5.3 FP32 TFLOPS), 64 tensor cores "
                           "(170 sparse INT8 TOPS: FP16 dense taken as a quarter, 42.5), 64 GB LPDDR5 at 204.8 "
                           "GB/s shared with the CPU"),
}


def _pairs(text: str, where: str) -> dict:
    out = {}
    for item in (t for t in text.split(",") if t.strip()):
        key, sep, value = item.partition("=")
        expect(bool(sep), ConfigError, f"{where}: '{item}' is not key=value")
        out[key.strip()] = value.strip()
    return out


def parse_cpu(text: str) -> CpuSpec:
    """A part name of PARTS_CPU, or a description 'cores=52,isa=amx,ghz=2.1,bw=307' (name=, bits= optional)."""
    if text.lower() in PARTS_CPU:
        return PARTS_CPU[text.lower()]
    kv = _pairs(text, f"--cpu '{text}'")
    unknown = sorted(set(kv) - {"cores", "isa", "ghz", "bw", "name", "bits"})
    expect(not unknown and {"cores", "isa", "ghz", "bw"} <= set(kv), ConfigError,
           f"--cpu '{text}': give a part ({sorted(PARTS_CPU)}, or 'this') or cores=,isa=,ghz=,bw= [name=, bits=]")
    try:
        return CpuSpec(kv.get("name", "described CPU"), int(kv["cores"]), kv["isa"], float(kv["ghz"]),
                       float(kv["bw"]), int(kv.get("bits", 512)), source="described on the command line")
    except ValueError as exc:
        raise ConfigError(f"--cpu '{text}': {exc}") from exc


def parse_gpu(text: str) -> GpuSpec:
    """A part name of PARTS_GPU, or 'fp32=59.8,bf16=119.5,bw=864,mem=48,link=32' (fp16=, name= optional)."""
    if text.lower() in PARTS_GPU:
        return PARTS_GPU[text.lower()]
    kv = _pairs(text, f"--gpu '{text}'")
    unknown = sorted(set(kv) - {"fp32", "bf16", "fp16", "bw", "mem", "link", "name"})
    expect(not unknown and {"fp32", "bw", "mem", "link"} <= set(kv), ConfigError,
           f"--gpu '{text}': give a part ({sorted(PARTS_GPU)}, 'this' or 'none') or fp32=,bf16=,bw=,mem=,link=")
    try:
        tflops = {k: float(kv[k]) for k in ("fp32", "bf16", "fp16") if k in kv}
        return GpuSpec(kv.get("name", "described GPU"), tflops, float(kv["bw"]), float(kv["mem"]),
                       float(kv["link"]), source="described on the command line")
    except ValueError as exc:
        raise ConfigError(f"--gpu '{text}': {exc}") from exc


def cpuinfo(path: Path = Path("/proc/cpuinfo")) -> dict:
    """model name, vendor, family, MHz and flags of the first processor entry ({} where unreadable)."""
    info: dict = {}
    try:
        for line in path.read_text().splitlines():
            key, _, value = line.partition(":")
            key = key.strip()
            if key in ("model name", "vendor_id", "cpu family", "cpu MHz", "flags") and key not in info:
                info[key] = value.strip()
    except OSError:
        pass
    return info


def isa_of(flags: set[str]) -> str:
    for isa, flag in (("amx", "amx_bf16"), ("avx512_bf16", "avx512_bf16"), ("avx512", "avx512f"), ("avx2", "avx2")):
        if flag in flags:
            return isa
    return "avx2"


def this_cpu(cores: int | None = None, memory_gbs: float = 1.0, info: dict | None = None) -> CpuSpec:
    """This machine's CPU from /proc/cpuinfo: ISA from its flags, the clock from 'cpu MHz' (under a hypervisor
    the nominal TSC clock: the real all-core clock may differ, which the measured ceiling / peak shows), the
    datapath 256 bits for AMD family 25 (Zen 3/4), else 512. memory_gbs: measured by the caller."""
    info = cpuinfo() if info is None else info
    flags = set(info.get("flags", "").split())
    family = info.get("cpu family", "")
    amd_half = info.get("vendor_id") == "AuthenticAMD" and family == "25"
    ghz = float(info.get("cpu MHz", "2000")) / 1e3
    return CpuSpec(name=f"this machine: {info.get('model name', 'unknown CPU')}",
                   cores=cores or len(os.sched_getaffinity(0)), isa=isa_of(flags), ghz=ghz,
                   memory_gbs=memory_gbs, datapath_bits=256 if amd_half else 512,
                   source=f"/proc/cpuinfo (flags -> {isa_of(flags)}; cpu MHz {ghz * 1e3:.0f} taken as the clock)")


def describe(part) -> dict:
    return dataclasses.asdict(part)


__all__ = ["CpuSpec", "GpuSpec", "PARTS_CPU", "PARTS_GPU", "XEON_8470Q", "cpuinfo", "describe", "dtype_key",
           "isa_of", "parse_cpu", "parse_gpu", "this_cpu"]
