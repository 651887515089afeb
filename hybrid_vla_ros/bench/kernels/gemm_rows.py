"""Why small chunks cost more: a stage's widest GEMM at a chunk's rows, with its weight cache-hot (one block's
weight over and over) and streamed (the stage's own blocks' weights in turn, as a stage runs them: each chunk
re-reads them from memory). On the suffix's cores, the model's own weights, no copy."""

from __future__ import annotations

import time

import torch
import torch.nn.functional as F

from ...engine.cpu import pinned


def widest_weights(model, first: int, last: int) -> list[torch.Tensor]:
    """The largest linear weight (out, in) of each decoder block in [first, last) (an MLP projection)."""
    out = []
    for block in list(model.decoder.layers)[first:last]:
        linears = [m for m in block.modules() if isinstance(m, torch.nn.Linear)]
        out.append(max(linears, key=lambda m: m.weight.numel()).weight.detach())
    return out


def _gflops(x: torch.Tensor, weights: list[torch.Tensor], budget_s: float) -> float:
    """GFLOP/s of x @ w.T over `weights` in turn, the best of as many rounds as fit in budget_s (after one)."""
    for w in weights:
        F.linear(x, w)
    flops = sum(2.0 * x.shape[0] * w.shape[0] * w.shape[1] for w in weights)
    best, spent = float("inf"), 0.0
    while spent < budget_s or best == float("inf"):
        t0 = time.perf_counter()
        for w in weights:
            F.linear(x, w)
        took = time.perf_counter() - t0
        best, spent = min(best, took), spent + took
    return flops / best / 1e9


def gemm_rows_report(model, first: int, rows: list[int], cores=None, budget_s: float = 0.5) -> dict:
    """Blocks [first, L)'s widest GEMM at each row count: cache-hot and streamed GFLOP/s, and each against the
    largest row count's (the unchunked frame, when it is in `rows`)."""
    weights = widest_weights(model, first, model.num_blocks) or widest_weights(model, 0, model.num_blocks)
    dtype = weights[0].dtype
    out = []
    with pinned(cores), torch.inference_mode():
        for n in sorted(set(rows), reverse=True):
            x = torch.randn(n, weights[0].shape[1], generator=torch.Generator().manual_seed(n)).to(dtype)
            out.append({"rows": n, "hot_gflops": _gflops(x, weights[:1] * len(weights), budget_s),
                        "streamed_gflops": _gflops(x, weights, budget_s)})
    top = out[0]
    for row in out:
        row["hot_vs_frame"] = row["hot_gflops"] / top["hot_gflops"]
        row["streamed_vs_frame"] = row["streamed_gflops"] / top["hot_gflops"]
    shape = tuple(weights[0].shape)
    return {"gemm": f"(rows, {shape[1]}) @ ({shape[1]}, {shape[0]}), {dtype}", "blocks": len(weights),
            "weight_mb": sum(w.numel() * w.element_size() for w in weights) / 2**20, "cores": list(cores or []),
            "rows": out}


def gemm_rows_lines(report: dict) -> list[str]:
    lines = [f"the suffix's widest GEMM {report['gemm']} by rows (weights of {report['blocks']} blocks, "
             f"{report['weight_mb']:.0f} MB): against the frame's rows, cache-hot",
             f"{'rows':>6s} {'hot GFLOP/s':>12s} {'streamed':>9s} {'hot/frame':>10s} {'streamed/frame':>15s}"]
    for r in report["rows"]:
        lines.append(f"{r['rows']:6d} {r['hot_gflops']:12.0f} {r['streamed_gflops']:9.0f} {r['hot_vs_frame']:10.2f} "
                     f"{r['streamed_vs_frame']:15.2f}")
    return lines


__all__ = ["gemm_rows_lines", "gemm_rows_report", "widest_weights"]
