"""CPU topology and thread pinning: NUMA nodes from sysfs, disjoint core sets, per-thread affinity."""

from __future__ import annotations

import os
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


def pin_current_thread(cores: list[int] | None, threads: int | None = None) -> None:
    """Pin the calling OS thread (Linux: sched_setaffinity(0) acts on the thread) and size torch's
    intra-op pool for it. OpenMP workers it spawns inherit the mask."""
    if cores:
        os.sched_setaffinity(0, set(cores))
    if threads or cores:
        torch.set_num_threads(threads or len(cores))


def thread_affinity() -> list[int]:
    return sorted(os.sched_getaffinity(0))
