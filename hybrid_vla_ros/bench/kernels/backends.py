"""One real-size decoder block on three CPU backends: eager PyTorch (oneDNN), torch.compile (inductor with
freezing) and OpenVINO (converted wrapper module, bf16 inference hint). Same cores, dtype, tokens; the
result of each is checked against eager's. A backend that is not installed or fails says why."""

from __future__ import annotations

import copy
import time

import torch
from torch import nn

from ...engine.stages import run_blocks
from ...model.checkpoint import ensure_loaded
from .roofline import _best_ms, _block_inputs, block_flops


class OneBlock(nn.Module):
    """block(hidden) with the frame's mask and rotary tables fixed: the unit every backend compiles."""

    def __init__(self, decoder, block, positions, mask):
        super().__init__()
        self.decoder, self.block = decoder, block
        self.positions, self.mask = positions, mask

    def forward(self, hidden):
        return run_blocks(self.decoder, [self.block], hidden, self.positions, self.mask)


def _timed(build, run_with, hidden, reference) -> dict:
    t0 = time.perf_counter()
    try:
        runner = build()
        out = run_with(runner)
    except Exception as exc:  # noqa: BLE001 - reported, not raised: one backend's failure is a finding
        return {"error": f"{type(exc).__name__}: {str(exc).splitlines()[0][:200] if str(exc) else ''}"}
    setup_s = time.perf_counter() - t0
    ms = _best_ms(lambda: run_with(runner))
    diff = (torch.as_tensor(out).float() - reference.float()).abs().max().item()
    return {"ms": ms, "setup_s": setup_s, "max_abs_diff_vs_eager": diff}


def _compiled(module):
    import torch._inductor.config as inductor_config
    inductor_config.freezing = True
    return torch.compile(module, backend="inductor")


def _openvino(module, hidden, dtype, threads: int):
    import openvino as ov
    converted = ov.convert_model(module, example_input=(hidden,))
    hint = {torch.bfloat16: "bf16", torch.float32: "f32"}.get(dtype, "f32")
    return ov.Core().compile_model(converted, "CPU", {"INFERENCE_PRECISION_HINT": hint,
                                                      "INFERENCE_NUM_THREADS": threads})


def compare_backends(model, tokens: int, dtype: torch.dtype, threads: int) -> dict:
    """ms of one block at `tokens` tokens on each backend, with GFLOP/s; model: a real-size preset (lazy)."""
    ensure_loaded(model, [model.decoder.layers[0]], dtype)
    hidden, positions, mask = _block_inputs(model, tokens, dtype, "cpu")

    def module_in(kind):  # an own copy of the block for each backend (compilers may rewrite their module)
        return OneBlock(model.decoder, copy.deepcopy(model.decoder.layers[0]).to(kind), positions, mask).eval()
    module = module_in(dtype)
    flops = block_flops(model.spec, tokens)["total"]
    with torch.inference_mode():
        reference = module(hidden)
        results = {"eager": _timed(lambda: module, lambda m: m(hidden), hidden, reference),
                   "torch_compile": _timed(lambda: _compiled(module_in(dtype)), lambda m: m(hidden), hidden,
                                           reference)}
    # OpenVINO takes fp32 numpy in and out; its bf16 hint runs the block in bf16 inside
    hidden32 = hidden.float().numpy()
    results["openvino"] = _timed(lambda: _openvino(module_in(torch.float32), hidden.float(), dtype, threads),
                                 lambda m: torch.from_numpy(m(hidden32)[0]), hidden, reference)
    for result in results.values():
        if "ms" in result:
            result["gflops"] = flops / result["ms"] / 1e6
    return {"tokens": tokens, "dtype": str(dtype).replace("torch.", ""), "threads": threads, "backends": results}


__all__ = ["compare_backends"]
