"""Report helpers shared by every measurement (bench, profile, load-step) and the demo summary."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np


def percentiles(values) -> dict:
    """p50 / p99 / mean of a list of numbers (None when empty)."""
    if not values:
        return {"p50": None, "p99": None, "mean": None}
    arr = np.asarray(values, dtype=float)
    return {"p50": float(np.percentile(arr, 50)), "p99": float(np.percentile(arr, 99)), "mean": float(arr.mean())}


def write_report(report: dict, json_path: str | Path | None) -> str:
    """The full report as JSON, written to `json_path` when given (folders made). -> the text."""
    text = json.dumps(report, indent=2)
    if json_path:
        Path(json_path).parent.mkdir(parents=True, exist_ok=True)
        Path(json_path).write_text(text)
    return text


def pyplot():
    """matplotlib's pyplot on the file-only backend."""
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    return plt


def progress_printer(prefix: str):
    """A progress callback for long commands: one line per step on stderr, with the elapsed time."""
    import sys
    import time
    start = time.monotonic()

    def show(text: str) -> None:
        print(f"[{prefix} {time.monotonic() - start:6.1f} s] {text}", file=sys.stderr, flush=True)
    return show


def fmt(value, spec: str = ".1f") -> str:
    return "-" if value is None else format(value, spec)


def modes_table(report: dict) -> str:
    """A short table of the modes (period and latency p50/p99, ratio to pipelined) for the terminal."""
    modes = report["modes"]
    piped = (modes.get("pipelined") or {}).get("period_ms", {}).get("p50")
    serial = (modes.get("serial") or {}).get("latency_ms", {}).get("p50")
    rows = [f"{'mode':24s} {'period p50':>11s} {'p99':>8s} {'latency p50':>12s} {'period / pipelined':>19s} "
            f"{'latency / serial':>17s}"]
    for name, mode in modes.items():
        if not isinstance(mode, dict) or "period_ms" not in mode:
            rows.append(f"{name:24s} {mode.get('skipped') or mode.get('error') or '-'}")
            continue
        period, latency = mode["period_ms"], mode.get("latency_ms", {})
        rel = period["p50"] / piped if piped and period.get("p50") else None
        age = latency["p50"] / serial if serial and latency.get("p50") else None
        rows.append(f"{name:24s} {fmt(period.get('p50')):>8s} ms {fmt(period.get('p99')):>8s} "
                    f"{fmt(latency.get('p50')):>9s} ms {fmt(rel, '.2f'):>18s}x {fmt(age, '.2f'):>16s}x")
    return "\n".join(rows)


def key_value_table(rows: list[tuple[str, object]]) -> str:
    """Two aligned columns for the end of a long command."""
    width = max(len(k) for k, _ in rows)
    return "\n".join(f"  {k:{width}s}  {v}" for k, v in rows)


def pair(stats: dict, unit: str = "ms") -> str:
    """'p50 / p99 unit' of a percentiles() dict."""
    return f"{fmt(stats.get('p50'))} / {fmt(stats.get('p99'))} {unit}"
