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
    text = json.dumps(report, indent=2)
    if json_path:
        Path(json_path).parent.mkdir(parents=True, exist_ok=True)
        Path(json_path).write_text(text)
    return text


def headline(report: dict) -> dict:
    """The report without per-frame timelines (what the CLI prints)."""
    out = {k: v for k, v in report.items() if k != "modes"}
    out["modes"] = {name: {k: v for k, v in mode.items() if k != "timeline"} for name, mode in report["modes"].items()}
    return out


def pyplot():
    """matplotlib's pyplot on the file-only backend."""
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    return plt
