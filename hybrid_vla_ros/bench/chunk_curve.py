"""Chunked prefill over k: where chunking pays and where tiny chunks lose more GEMM efficiency than the overlap
wins. For each chunking, in one run on the same frames: the serial (1 in flight: stages idle between frames)
and pipelined (saturated) latency and period, and the suffix's compute per frame (its cost of chunking). The
planner's prediction of the same is `hybrid-vla plan --chunks ...` (plan/chunks.py)."""

from __future__ import annotations

from ..engine.chunking import parse_chunks
from ..engine.placement import Placement
from ..model.vla import VLAModel
from ..report import fmt, pyplot
from .kernels.gemm_rows import gemm_rows_lines, gemm_rows_report
from .modes import run_mode


def run_chunk_curve(model: VLAModel, placement: Placement, partition: int, chunkings, frames: list, cores: tuple,
                    warmup: int, max_in_flight: int = 2, progress=None) -> dict:
    """-> {"rows": [one per chunking], "serial_latency_ms": unchunked serial latency p50, ...}."""
    progress = progress or (lambda text: None)
    prefix_cores, suffix_cores = cores
    rows = []
    for chunks in (parse_chunks(c) for c in chunkings):
        progress(f"chunks {chunks}: serial and pipelined")
        serial = run_mode(model, placement, partition, 1, "inproc", frames, prefix_cores, suffix_cores, warmup,
                          chunks=chunks)
        piped = run_mode(model, placement, partition, max_in_flight, "inproc", frames, prefix_cores, suffix_cores,
                         warmup, chunks=chunks)
        rows.append({"chunks": chunks, "chunk_count": serial["chunk_count"],
                     "serial_latency_ms": serial["latency_ms"]["p50"], "serial_period_ms": serial["period_ms"]["p50"],
                     "pipelined_latency_ms": piped["latency_ms"]["p50"], "pipelined_period_ms": piped["period_ms"]["p50"],
                     "suffix_busy_ms": serial["suffix_busy_ms"]["p50"],
                     "prefix_busy_ms": serial["prefix_busy_ms"]["p50"],
                     "failed": serial["failed"] + piped["failed"]})
    base = next((r for r in rows if r["chunks"] == 1), None)
    for row in rows:
        row.update(_ratios(row, base))
    progress("the suffix's widest GEMM at each chunking's rows, cache-hot and streamed")
    gemm = gemm_rows_report(model, partition, [chunk_rows(model, r["chunk_count"]) for r in rows], suffix_cores)
    return {"preset": model.spec.name, "partition": partition, "frames": len(frames) - warmup, "warmup": warmup,
            "sequence_length": model.sequence_length, "placement": placement.describe(), "rows": rows,
            "gemm_by_rows": gemm}


def chunk_rows(model: VLAModel, count: int) -> int:
    """A chunk's GEMM rows when a frame's tokens are cut into `count` chunks (tokens / count x passes)."""
    return max(1, round(model.sequence_length / count)) * model.num_passes


def _ratios(row: dict, base: dict | None) -> dict:
    if base is None:
        return {}
    def ratio(a, b):
        return a / b if a and b else None
    return {"serial_latency_vs_unchunked_serial": ratio(row["serial_latency_ms"], base["serial_latency_ms"]),
            "pipelined_latency_vs_unchunked_serial": ratio(row["pipelined_latency_ms"], base["serial_latency_ms"]),
            "pipelined_period_vs_unchunked": ratio(row["pipelined_period_ms"], base["pipelined_period_ms"]),
            "suffix_cost_vs_unchunked": ratio(row["suffix_busy_ms"], base["suffix_busy_ms"])}


def curve_table(report: dict) -> str:
    head = (f"{'chunks':>7s} {'n':>3s} {'serial lat':>11s} {'piped lat':>10s} {'piped period':>13s} "
            f"{'lat/serial1':>12s} {'period/piped1':>14s} {'suffix cost':>12s}")
    lines = [head]
    for r in report["rows"]:
        lines.append(f"{str(r['chunks']):>7s} {r['chunk_count']:3d} {fmt(r['serial_latency_ms']):>8s} ms "
                     f"{fmt(r['pipelined_latency_ms']):>7s} ms {fmt(r['pipelined_period_ms']):>10s} ms "
                     f"{fmt(r.get('pipelined_latency_vs_unchunked_serial'), '.2f'):>11s}x "
                     f"{fmt(r.get('pipelined_period_vs_unchunked'), '.2f'):>13s}x "
                     f"{fmt(r.get('suffix_cost_vs_unchunked'), '.2f'):>11s}x")
    if report.get("gemm_by_rows"):
        lines += ["", *gemm_rows_lines(report["gemm_by_rows"])]
    return "\n".join(lines)


def plot_chunk_curve(report: dict, path) -> None:
    plt = pyplot()
    rows = report["rows"]
    labels = [str(r["chunks"]) for r in rows]
    fig, ax = plt.subplots(figsize=(8, 4.2))
    for key, label, style in (("serial_latency_ms", "latency, serial (idle stages)", "o-"),
                              ("pipelined_latency_ms", "latency, pipelined (saturated)", "s-"),
                              ("pipelined_period_ms", "period, pipelined", "^--"),
                              ("suffix_busy_ms", "suffix compute per frame", "x:")):
        ax.plot(labels, [r[key] or 0 for r in rows], style, label=label)
    ax.set_xlabel("chunks per frame")
    ax.set_ylabel("ms (p50)")
    ax.set_title(f"{report['preset']} p={report['partition']}, {report['sequence_length']} tokens: chunked prefill "
                 f"over k", fontsize=9)
    ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
