"""Memory measured, not assumed: each stage started in a process of its own, its peak RSS compared with the
weight bytes `info` reports for it.

Per stage: `weight_bytes` (info's resident bytes: the stage's blocks plus the dynamic zone), `peak_rss_bytes`
above `baseline_rss_bytes` (a bare interpreter with torch imported), measured after the stage's weights
were paged in (safetensors maps the files: a tensor's pages are resident, and shared with other processes
mapping the same file, once touched), split into `imports_rss_bytes` (the package's code: transformers and the
model classes, no weights) and `weights_rss_bytes` (what the loaded stage holds beyond the imports);
`peak_weights_rss_bytes`, the peak above the imports (the weights and what their loading held at once: one tensor
in flight; `peak_within_target`: at most 15% above weight_bytes); `peak_cuda_bytes` on a CUDA prefix. Run as a
module, it is one stage's child process (one JSON line on stdout).
"""

from __future__ import annotations

import argparse
import json
import resource
import subprocess
import sys

from ..errors import ConfigError, HybridVLAError, expect
from ..model.plugins import alpamayo

REFUSED = 2             # a child's exit status when its stage refused (its one line on stderr)
TARGET_FRACTION = 0.15  # weights_rss within 15% of weight_bytes
BASELINE_CODE = ("import resource, torch, psutil; "
                 "print(psutil.Process().memory_info().rss, resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024)")


def _peak_rss() -> int:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024  # Linux: KiB


def stage_in_this_process(stage: str, checkpoint: str | None, preset: str | None, partition: int,
                          zone: tuple[int, int] | None, dtype: str, device: str) -> dict:
    import psutil
    import torch
    from ..engine.scheduling.partition import partition_report
    from ..engine.placement import Placement
    from ..model.load import load_vla
    if checkpoint is not None and alpamayo.is_release(checkpoint):
        expect(device in ("auto", "cpu"), ConfigError, f"--prefix-device {device}: an Alpamayo release's sides run "
                                                         f"on the CPU in this version")
        return release_stage_in_this_process(stage, checkpoint, partition, zone, dtype)
    placement = Placement.create(device, dtype, dtype)
    shapes = load_vla(preset=preset, checkpoint=checkpoint, shapes_only=True).to(placement.prefix_dtype)
    given = f"--dtype {dtype}" if dtype != "fp32" else f"--prefix-device {device}"
    expect(shapes.kind == "waypoints" or (dtype == "fp32" and device in ("auto", "cpu")), ConfigError,
           f"{given}: an action-token model's sides are measured as the ActionFlow servers read them, on the CPU "
           f"in fp32")
    imports_rss = psutil.Process().memory_info().rss  # code and a weightless (meta) model: the lazy imports done
    model = load_vla(preset=preset, checkpoint=checkpoint, lazy=True)   # the stage reads (draws) its own side
    modules, zone = built_side(model, stage, partition, placement, zone)
    with torch.no_grad():  # page the weights in, as the first frame does (safetensors maps them lazily)
        for tensor in [t for m in modules for t in m.parameters()]:
            tensor.sum()
    weight_bytes = partition_report(shapes, partition, zone)[f"{stage}_resident_bytes"] if model.kind == "waypoints" \
        else sum(t.numel() * t.element_size() for t in {id(t): t for m in modules
                                                        for t in [*m.parameters(), *m.buffers()]}.values())
    cuda = torch.cuda.max_memory_allocated() if torch.cuda.is_available() else None
    return {"stage": stage, "weight_bytes": weight_bytes, "imports_rss_bytes": imports_rss,
            "rss_after_load_bytes": psutil.Process().memory_info().rss,
            "peak_rss_bytes": _peak_rss(),
            "peak_cuda_bytes": cuda, "zone": list(zone),
            "tensors_read": len(model.checkpoint_files.read_keys) if checkpoint else None}


def release_stage_in_this_process(stage: str, checkpoint: str, partition: int, zone: tuple[int, int] | None,
                                  dtype: str) -> dict:
    """An Alpamayo release's side of the cut, as its node reads it (engine/expert_split/sides.py): weight_bytes
    are the bytes of the parameters that side reads, in `dtype`."""
    import psutil
    import torch
    from ..engine.expert_split.sides import side_reads
    from ..engine.scheduling.partition import Zone
    expect(dtype in ("fp32", "bf16"), ConfigError, f"--dtype {dtype}: an Alpamayo release's sides run fp32 or bf16")
    wanted = torch.float32 if dtype == "fp32" else torch.bfloat16
    shapes = alpamayo.load_release(checkpoint, shapes_only=True)
    imports_rss = psutil.Process().memory_info().rss
    zone = tuple(Zone.around(partition, shapes.num_blocks, zone))   # ConfigError: a cut or zone outside 0..L
    reads = side_reads(shapes, stage, zone)
    model = alpamayo.load_release(checkpoint, dtype=wanted, reads=reads)
    read = [p for n, p in model.named_parameters() if reads(n)]
    with torch.no_grad():
        for tensor in read:   # paged in, as the first frame does
            tensor.sum()
    return {"stage": stage, "weight_bytes": sum(p.numel() * p.element_size() for p in read),
            "imports_rss_bytes": imports_rss, "rss_after_load_bytes": psutil.Process().memory_info().rss,
            "peak_rss_bytes": _peak_rss(), "peak_cuda_bytes": None, "zone": list(zone), "tensors_read": len(read),
            "tensors_in_release": len(model.weight_map)}


def built_side(model, stage: str, partition: int, placement, zone) -> tuple[list, tuple[int, int]]:
    """The stage its node builds (reading its side) -> (the modules it computes with, its zone). An action-token
    model's sides are the ActionFlow servers (engine/actionflow): the prefix without the head, the suffix with the
    head's action rows."""
    from ..engine.scheduling.partition import Zone, prefix_modules, side_modules
    from ..engine.stages import PrefixStage, SuffixStage
    if model.kind == "tokens":
        from ..engine.actionflow.prefix_server import PackedPrefixServer
        from ..engine.actionflow.suffix_server import PackedSuffixServer
        lo, hi = Zone.around(partition, model.num_blocks, zone)
        if stage == "prefix":
            PackedPrefixServer(model, 1, 1, partition, zone=(lo, hi))
            return side_modules(model, 0, hi), (lo, hi)
        server = PackedSuffixServer(model, zone=(lo, hi))
        return [*model.decoder.layers[lo:], model.decoder.norm, server.tokens.head(model)], (lo, hi)
    if stage == "prefix":
        built = PrefixStage(model, partition, placement, zone)
        return prefix_modules(built.model, built.zone[1]), tuple(built.zone)
    built = SuffixStage(model, partition, placement, zone)
    return list(built.blocks.values()) + [built.norm, built.head], tuple(built.zone)


def _child(args: list[str]) -> str:
    """Runs `python ARGS`; -> its last stdout line."""
    out = subprocess.run([sys.executable, *args], capture_output=True, text=True, timeout=1800)
    if out.returncode == REFUSED:   # the stage refused the model or an option: its one line
        lines = out.stderr.strip().splitlines()   # its one line: the stage's own, else the last said
        said = [line for line in lines if line.startswith(("prefix stage:", "suffix stage:"))]
        raise ConfigError((said or lines or [f"memory child {args[:3]} refused, saying nothing"])[-1])
    if out.returncode != 0:
        raise RuntimeError(f"memory child {args[:3]} failed: {out.stderr.strip()[-2000:]}")
    return out.stdout.strip().splitlines()[-1]


def memory_report(checkpoint: str | None, preset: str | None, partition: int, zone: tuple[int, int] | None,
                  dtype: str = "fp32", device: str = "cpu") -> dict:
    rss, peak = (int(x) for x in _child(["-c", BASELINE_CODE]).split())
    baseline = max(rss, peak)
    stages = {}
    for stage in ("prefix", "suffix"):
        args = ["-m", __name__, "--stage", stage, "--partition", str(partition), "--dtype", dtype, "--device", device]
        args += ["--checkpoint", checkpoint] if checkpoint else ["--preset", preset]
        args += ["--zone", f"{zone[0]},{zone[1]}"] if zone else []
        child = json.loads(_child(args))
        weights_rss = child["rss_after_load_bytes"] - child["imports_rss_bytes"]
        peak_weights = child["peak_rss_bytes"] - child["imports_rss_bytes"]   # the load's peak above the code
        stages[stage] = {**child, "baseline_rss_bytes": baseline,
                         "peak_rss_above_baseline_bytes": child["peak_rss_bytes"] - baseline,
                         "imports_rss_bytes": child["imports_rss_bytes"] - baseline,
                         "weights_rss_bytes": weights_rss,
                         "weights_rss_over_weight_bytes": weights_rss / max(1, child["weight_bytes"]),
                         "within_target": abs(weights_rss / max(1, child["weight_bytes"]) - 1) <= TARGET_FRACTION,
                         "peak_weights_rss_bytes": peak_weights,
                         "peak_within_target": peak_weights <= (1 + TARGET_FRACTION) * child["weight_bytes"]}
    return {"checkpoint": checkpoint, "preset": preset, "partition": partition, "dtype": dtype, "device": device,
            "target_fraction": TARGET_FRACTION, "stages": stages}


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description="one stage's memory, in this process (a child of `hybrid-vla memory`)")
    p.add_argument("--stage", choices=("prefix", "suffix"), required=True)
    p.add_argument("--checkpoint")
    p.add_argument("--preset")
    p.add_argument("--partition", type=int, required=True)
    p.add_argument("--zone", default=None)
    p.add_argument("--dtype", default="fp32")
    p.add_argument("--device", default="cpu")
    a = p.parse_args(argv)
    zone = tuple(int(x) for x in a.zone.split(",")) if a.zone else None
    try:
        report = stage_in_this_process(a.stage, a.checkpoint, a.preset, a.partition, zone, a.dtype, a.device)
    except HybridVLAError as exc:
        print(f"{a.stage} stage: {exc}", file=sys.stderr)
        return REFUSED
    print(json.dumps(report))
    return 0


if __name__ == "__main__":
    sys.exit(main())
