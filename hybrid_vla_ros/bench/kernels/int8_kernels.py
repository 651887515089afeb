"""`profile --int8-kernels`: the int8 linears this torch offers on the CPU, side by side with fp32 and bf16 on
one block-sized linear (hidden -> intermediate) at a frame's rows and at a decode step's single row, on the
suffix's cores: time and relative error against fp32. What engine/int8.py chose, and why, is
docs/DESIGN_DECISIONS.md (the int8 CPU suffix); this is the measurement behind it."""

from __future__ import annotations

import time
import warnings

import torch
from torch import nn

from ...engine.int8 import Int8Linear

REPEATS = 5


def _best_ms(run) -> float:
    """Best of REPEATS after a warm-up; a kernel whose warm-up took over a second: that one run."""
    t0 = time.perf_counter()
    run()
    best = time.perf_counter() - t0
    if best > 1.0:
        return best * 1e3
    for _ in range(REPEATS):
        t0 = time.perf_counter()
        run()
        best = min(best, time.perf_counter() - t0)
    return best * 1e3


def _candidates(linear: nn.Linear) -> dict:
    """name -> callable(x fp32) for every kernel compared (each built once, weights prepared outside the timing)."""
    w = linear.weight.detach()
    scale = w.abs().amax(dim=1).clamp_min(1e-12) / 127                                   # (N,)
    q = torch.round(w / scale[:, None]).to(torch.int8)                                   # (N, K)
    q_t = q.t().contiguous()
    bf16 = nn.Linear(linear.in_features, linear.out_features, bias=False).to(torch.bfloat16)
    bf16.weight.data = w.to(torch.bfloat16)
    ours = Int8Linear(linear)

    def int_mm(x):   # per-token quantize, torch._int_mm, dequantize: three separate passes
        s = x.abs().amax(dim=1, keepdim=True).clamp_min(1e-12) / 127
        return torch._int_mm(torch.round(x / s).to(torch.int8), q_t).float() * s * scale
    out = {"fp32": linear, "bf16": lambda x: bf16(x.to(torch.bfloat16)), "int_mm_per_token": int_mm,
           "weight_int8pack_mm": lambda x: torch._weight_int8pack_mm(x, q, scale),
           "onednn_per_token (engine/int8.py)": ours,
           "onednn_per_token, bf16 rows": lambda x: ours(x.to(torch.bfloat16))}
    with warnings.catch_warnings():   # torch.ao's quantization API warns of its deprecation
        warnings.simplefilter("ignore")
        from torch.ao.quantization import per_channel_dynamic_qconfig, quantize_dynamic
        out["ao_fbgemm_dynamic"] = quantize_dynamic(nn.Sequential(linear), {nn.Linear: per_channel_dynamic_qconfig},
                                                    dtype=torch.qint8)
    return out


@torch.inference_mode()
def compare_int8_kernels(hidden: int, intermediate: int, rows_list=(600, 1)) -> dict:
    """{"rows": [{rows, kernels: {name: {ms, error}}}]}: error = |y - y_fp32| / |y_fp32| (Frobenius)."""
    gen = torch.Generator().manual_seed(0)
    linear = nn.Linear(hidden, intermediate, bias=False)
    linear.weight.data = torch.randn(intermediate, hidden, generator=gen) * 0.02
    kernels = _candidates(linear)
    report = {"hidden": hidden, "intermediate": intermediate, "threads": torch.get_num_threads(), "rows": []}
    for rows in rows_list:
        x = torch.randn(rows, hidden, generator=gen)
        ref = linear(x)
        row = {"rows": rows, "kernels": {}}
        for name, run in kernels.items():
            try:
                error = float((run(x).float() - ref).norm() / ref.norm())
                row["kernels"][name] = {"ms": _best_ms(lambda: run(x)), "error": error}
            except (RuntimeError, NotImplementedError) as exc:
                row["kernels"][name] = {"error_message": str(exc).splitlines()[0][:120]}
        report["rows"].append(row)
    return report


def int8_kernel_lines(report: dict) -> list[str]:
    lines = [f"int8 kernels: one {report['hidden']} -> {report['intermediate']} linear, "
             f"{report['threads']} thread(s); ms (x fp32's time), error vs fp32"]
    for row in report["rows"]:
        fp32 = row["kernels"]["fp32"]["ms"]
        lines.append(f"  {row['rows']} rows:")
        for name, k in row["kernels"].items():
            lines.append(f"    {name:36s} " + (f"{k['ms']:9.2f} ms ({k['ms'] / fp32:5.2f}x)  error {k['error']:.4f}"
                                                if "ms" in k else k["error_message"]))
    return lines
