"""`bench --scenario suffix-dtypes`: the same frames through the split with the CPU suffix in each dtype (fp32,
bf16, int8), one after the other in one run: each at the planner's best cut for that suffix (plan/run.py
plan_here, both sides timed on their cores), serial and pipelined; native (the whole model on the prefix's
cores) once. Ratios against the fp32 suffix. A faster suffix takes more blocks: the cut moves deeper."""

from __future__ import annotations

from ..engine.placement import Placement
from ..model.vla import VLAModel
from .modes import run_bench

SUFFIX_DTYPES = ("fp32", "bf16", "int8")


def run_suffix_dtypes(model: VLAModel, prefix_device: str, prefix_dtype: str, names=SUFFIX_DTYPES,
                      num_frames: int = 24, warmup: int = 3, progress=None) -> dict:
    """-> {"dtypes": {name: {partition, native / serial / pipelined period and latency p50, plan}}, ratios}."""
    progress = progress or (lambda text: None)
    out: dict = {"preset": model.spec.name, "frames": num_frames, "dtypes": {}}
    for i, name in enumerate(names):
        placement = Placement.create(prefix_device, prefix_dtype, name)
        progress(f"suffix {name}")
        modes = ("native", "serial", "pipelined") if i == 0 else ("serial", "pipelined")
        report = run_bench(model, placement, num_frames=num_frames, warmup=warmup, modes=modes,
                           transports=("inproc",), progress=progress)
        row = {"partition": report["partition"], "placement": report["placement"], "plan": report.get("plan")}
        for mode in modes:
            stats = report["modes"][mode]
            row[mode] = {"period_ms": stats["period_ms"]["p50"], "latency_ms": stats["latency_ms"]["p50"]}
        out["dtypes"][name] = row
        out.setdefault("devices", report["devices"])
    first = out["dtypes"][names[0]]
    out["native_period_ms"] = first["native"]["period_ms"]
    for name, row in out["dtypes"].items():
        row["pipelined_vs_first"] = first["pipelined"]["period_ms"] / row["pipelined"]["period_ms"]
        row["pipelined_vs_native"] = out["native_period_ms"] / row["pipelined"]["period_ms"]
    return out


def suffix_dtypes_lines(report: dict) -> list[str]:
    names = list(report["dtypes"])
    lines = [f"{report['preset']}: the suffix in {', '.join(names)}, each at its planned cut "
             f"({report['frames']} frames; native {report['native_period_ms']:.1f} ms per frame)",
             f"  {'suffix':7s} {'p':>3s} {'serial ms':>10s} {'pipelined ms':>13s} {'latency ms':>11s} "
             f"{'vs ' + names[0]:>9s} {'vs native':>10s}"]
    for name, row in report["dtypes"].items():
        pipe = row["pipelined"]
        lines.append(f"  {name:7s} {row['partition']:3d} {row['serial']['period_ms']:10.1f} {pipe['period_ms']:13.1f} "
                     f"{pipe['latency_ms']:11.1f} {row['pipelined_vs_first']:8.2f}x {row['pipelined_vs_native']:9.2f}x")
    return lines
