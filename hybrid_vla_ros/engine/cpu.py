"""CPU topology and thread pinning: NUMA nodes from sysfs, disjoint core sets, per-thread affinity."""

from __future__ import annotations

import os
import threading
from contextlib import contextmanager
from pathlib import Path

import torch

from ..errors import ConfigError, expect

SYS_NODES = Path("/sys/devices/system/node")


def parse_cpulist(text: str) -> list[int]:
    """'0-3,8,10-11' -> [0, 1, 2, 3, 8, 10, 11]."""
    cores: list[int] = []
    for part in text.strip().split(","):
        if not part:
            continue
        if "-" in part:
            lo, hi = part.split("-")
            cores.extend(range(int(lo), int(hi) + 1))
        else:
            cores.append(int(part))
    return cores


def allowed_cores() -> list[int]:
    return sorted(os.sched_getaffinity(0))


def check_allowed(cores: list[int], what: str = "cores") -> None:
    """A core set this process may not use is refused here, naming both sets: sched_setaffinity would refuse
    it later (EINVAL) on the stage's own thread, where nobody is listening."""
    allowed = allowed_cores()
    outside = sorted(set(cores) - set(allowed))
    expect(not outside, ConfigError, f"{what} {list(cores)}: {outside} not among the cores this process may "
           f"use; this process may use {allowed} (os.sched_getaffinity)")


def numa_nodes(root: Path = SYS_NODES) -> dict[int, list[int]]:
    """NUMA node -> cores this process may use. One node holding every allowed core when sysfs has none."""
    allowed = set(allowed_cores())
    nodes: dict[int, list[int]] = {}
    for node_dir in sorted(root.glob("node[0-9]*")) if root.is_dir() else []:
        cpulist = node_dir / "cpulist"
        if cpulist.is_file():
            cores = [c for c in parse_cpulist(cpulist.read_text()) if c in allowed]
            if cores:
                nodes[int(node_dir.name[4:])] = cores
    return nodes or {0: sorted(allowed)}


def cores_of_numa_node(node: int, root: Path = SYS_NODES) -> list[int]:
    nodes = numa_nodes(root)
    expect(node in nodes, ConfigError, f"NUMA node {node} not found; this machine has nodes {sorted(nodes)}")
    return nodes[node]


def split_cores(cores: list[int], parts: int) -> list[list[int]]:
    """Disjoint, contiguous core sets, as even as possible. Needs at least one core per part."""
    expect(len(cores) >= parts, ConfigError,
           f"cannot give {parts} stages disjoint cores: only {len(cores)} cores allowed ({cores})")
    size, extra = divmod(len(cores), parts)
    out, start = [], 0
    for i in range(parts):
        n = size + (1 if i < extra else 0)
        out.append(cores[start:start + n])
        start += n
    return out


_THREADS_LOCK = threading.Lock()


def default_stage_cores(stage: int, stages: int = 2) -> list[int] | None:
    """The default placement of stage `stage` (0 = prefix, 1 = suffix): its share of disjoint core sets of
    the cores this process may use (without a GPU, the stand-in for "GPU + CPU"); None on one core."""
    cores = allowed_cores()
    return split_cores(cores, stages)[stage] if len(cores) >= stages else None


def pin_current_thread(cores: list[int] | None, threads: int | None = None) -> None:
    """Pin the calling OS thread (Linux: sched_setaffinity(0) acts on the thread) and size torch's
    intra-op pool for it. OpenMP workers it spawns inherit the mask. Without explicit threads, one thread
    per core the thread may run on: an OpenMP team larger than its cores spin-waits on itself (measured
    here: a 130 ms stage took 2.2 s with a team of 2 on one pinned core)."""
    if cores:
        os.sched_setaffinity(0, set(cores))
    wanted = threads or len(os.sched_getaffinity(0))
    # torch keeps the pool size per thread (OpenMP), but a thread applies the *process-wide* last value at its
    # first parallel op (lazy init): a stage that set 1 could run 2 after the other stage set 2. So set it and
    # force this thread's lazy init at once, under one lock, so no other stage's value can slip in between.
    with _THREADS_LOCK:
        torch.set_num_threads(wanted)
        torch.get_num_threads()  # runs the lazy init now, with our value
        torch.set_num_threads(wanted)


@contextmanager
def pinned(cores: list[int] | None, threads: int | None = None):
    """Run the body on `cores` from this thread, then give the thread back its own cores and torch threads
    (read before pinning: after it, allowed_cores() would only see the pinned set)."""
    before_cores, before_threads = os.sched_getaffinity(0), torch.get_num_threads()
    pin_current_thread(cores, threads)
    try:
        yield
    finally:
        os.sched_setaffinity(0, before_cores)
        pin_current_thread(None, before_threads)


def thread_affinity() -> list[int]:
    return sorted(os.sched_getaffinity(0))


def thread_cpu_seconds() -> dict[str, float]:
    """CPU seconds (user + system) each live thread of this process has used, by thread name (names shared by
    several threads are summed), from /proc/self/task/*/stat; {} where there is no /proc."""
    ticks = os.sysconf("SC_CLK_TCK") if hasattr(os, "sysconf") else 100
    names = {t.native_id: t.name for t in threading.enumerate()}
    out: dict[str, float] = {}
    for task in Path("/proc/self/task").glob("*") if Path("/proc/self/task").is_dir() else []:
        try:
            fields = (task / "stat").read_text().rsplit(")", 1)[1].split()
        except OSError:   # the thread ended meanwhile
            continue
        name = names.get(int(task.name), f"native thread {int(task.name)}")
        out[name] = out.get(name, 0.0) + (int(fields[11]) + int(fields[12])) / ticks   # utime + stime
    return out


def thread_cpu_delta(before: dict, after: dict) -> dict:
    """thread_cpu_seconds() of a span: the threads that used CPU between the two readings."""
    return {name: round(after[name] - before.get(name, 0.0), 3) for name in after
            if after[name] - before.get(name, 0.0) > 0}


def ms_per_frame(cpu_s: dict, frames: int) -> dict:
    """CPU seconds by thread -> CPU ms per frame by thread."""
    return {name: s * 1e3 / max(1, frames) for name, s in cpu_s.items()}


# ---- CPU suffix backend -----------------------------------------------------------------------------------

# oneDNN's ISA cap (ONEDNN_MAX_CPU_ISA) -> the matrix flags its kernels may still use; flags above the cap
# are not this process's to use, so a choice made from them (bf16 native, the int8 flavour) must not see them.
ONEDNN_CAPS = {"SSE41": (), "AVX": ("avx",), "AVX2": ("avx", "avx2", "fma"),
               "AVX2_VNNI": ("avx", "avx2", "fma", "avx_vnni"), "AVX2_VNNI_2": ("avx", "avx2", "fma", "avx_vnni"),
               "AVX512_CORE": ("avx", "avx2", "fma", "avx_vnni", "avx512f", "avx512bw", "avx512vl", "avx512dq",
                               "avx512cd")}
ONEDNN_CAPS["AVX512_CORE_VNNI"] = ONEDNN_CAPS["AVX512_CORE"] + ("avx512_vnni",)
ONEDNN_CAPS["AVX512_CORE_BF16"] = ONEDNN_CAPS["AVX512_CORE_VNNI"] + ("avx512_bf16",)
MATRIX_FLAG_PREFIXES = ("avx", "fma", "amx")


def cpu_flags() -> set[str]:
    """The CPU's flags (/proc/cpuinfo), less the matrix ones above ONEDNN_MAX_CPU_ISA when that caps oneDNN."""
    flags: set[str] = set()
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("flags"):
                flags = set(line.split(":", 1)[1].split())
                break
    except OSError:
        pass
    allowed = ONEDNN_CAPS.get(os.environ.get("ONEDNN_MAX_CPU_ISA", "ALL").upper())
    if allowed is None:   # ALL, an AMX level or a name we do not know: no cap we can apply
        return flags
    return {f for f in flags if not f.startswith(MATRIX_FLAG_PREFIXES) or f in allowed}


BF16_FLAGS = ("amx_bf16", "avx512_bf16")  # native bf16 matmul (AMX tiles, AVX-512 BF16 dot products)


def cpu_isa(flags: set[str]) -> str:
    """The best matrix ISA oneDNN can use here, from the CPU flags."""
    for isa in ("amx_bf16", "avx512_bf16", "avx512f", "avx2"):
        if isa in flags:
            return isa
    return "generic"


def cpu_backend_report(dtype: torch.dtype) -> dict:
    """What the CPU suffix runs on, said once at start-up: stock PyTorch with its oneDNN kernels (no extension:
    docs/DESIGN_DECISIONS.md, CPU backend), the ISA they find, and whether bf16 is native there."""
    isa = cpu_isa(cpu_flags())
    return {"backend": f"stock torch {torch.__version__} (oneDNN)", "dtype": str(dtype).replace("torch.", ""),
            "isa": isa, "onednn": torch.backends.mkldnn.is_available(), "bf16_native": isa in BF16_FLAGS}


MPOL_BIND = 2
SYS_SET_MEMPOLICY = {"x86_64": 238, "aarch64": 237}


def bind_memory_to_node(node: int) -> str:
    """Bind this thread's future allocations to one NUMA node (set_mempolicy MPOL_BIND). Returns 'bound'
    or the reason it was not (not Linux, unknown architecture, or the kernel refused)."""
    import ctypes
    import platform
    number = SYS_SET_MEMPOLICY.get(platform.machine())
    if number is None or not Path("/proc").is_dir():
        return f"not bound: set_mempolicy unknown on {platform.machine()}"
    libc = ctypes.CDLL(None, use_errno=True)
    mask = ctypes.c_ulong(1 << node)
    if libc.syscall(number, MPOL_BIND, ctypes.byref(mask), ctypes.c_ulong(64)) != 0:
        return f"not bound: set_mempolicy failed ({os.strerror(ctypes.get_errno())})"
    return "bound"


def core_plan(placement) -> tuple[list[int], list[int], dict]:
    """Cores of the prefix's host thread and of the suffix, and how to describe the devices: with CUDA one core
    feeds the GPU and the rest run the suffix; without, two disjoint core sets (the GPU stand-in and the CPU)."""
    cores = allowed_cores()
    if placement.uses_cuda:
        prefix, suffix = cores[:1], cores[1:] or cores[:1]
        devices = {"prefix": f"{placement.prefix_device} ({torch.cuda.get_device_name(placement.prefix_device)}), "
                             f"host thread on cores {prefix}",
                   "suffix": f"cpu cores {suffix}", "stand_in": False}
    else:
        prefix, suffix = split_cores(cores, 2)
        devices = {"prefix": f"cpu cores {prefix} (stand-in for the GPU)", "suffix": f"cpu cores {suffix}",
                   "stand_in": True,
                   "note": "no CUDA: prefix and suffix run on disjoint CPU core sets of this machine"}
    return prefix, suffix, devices
