"""Roofline of real-size decoder blocks: achieved GFLOP/s against the GEMM ceiling of the same cores and dtype.

A 7B stack does not need to be whole to be measured: a few of its blocks are drawn (model/seeded.py) and run
through the engine's own `run_blocks` at each token count N. FLOPs are counted from the shapes (a
multiply-add = 2): q/k/v/o projections and the MLP (gate, up, down) 2 N x params; attention 2 x 2 N^2 d
per head, halved for the causal mask (the CPU flash kernel skips masked tiles). The ceiling is the best of
a few runs of the block's largest GEMM, (N, hidden) @ (hidden, intermediate), on the same pinned cores in
the same dtype. Decode rows (one token, the weights read once) are set against memory bandwidth: weight
bytes / time vs a streaming read of a buffer far larger than the caches.
"""

from __future__ import annotations

import time

import torch
import torch.nn.functional as F

from ...engine.cpu import core_plan, pinned
from ...engine.placement import Placement
from ...engine.int8 import linear_names, quantized_copy
from ...engine.stages import placed, run_blocks
from ...model.checkpoint import ensure_loaded
from ...model.vla import VLAModel

REPEATS = 3
BANDWIDTH_BYTES = 1 << 30


def block_flops(spec, tokens: int) -> dict:
    """FLOPs of one decoder block at `tokens` tokens: {"linear", "attention", "total"}."""
    hidden, heads, kv_heads = spec.hidden_size, spec.num_heads, spec.num_kv_heads
    head_dim = spec.attention_head_dim
    params = hidden * heads * head_dim * 2 + hidden * kv_heads * head_dim * 2 + 3 * hidden * spec.intermediate_size
    linear = 2.0 * tokens * params
    attention = 2.0 * 2.0 * heads * head_dim * tokens * tokens / 2  # QK^T and PV, causal half
    return {"linear": linear, "attention": attention, "total": linear + attention, "weight_params": params}


def _best_ms(run, repeats: int = REPEATS, sync=lambda: None) -> float:
    run()  # warm-up: kernels chosen and cached, pages touched
    sync()
    best = float("inf")
    for _ in range(repeats):
        t0 = time.perf_counter()
        run()
        sync()
        best = min(best, time.perf_counter() - t0)
    return best * 1e3


def gemm_ceiling_gflops(tokens: int, hidden: int, intermediate: int, dtype: torch.dtype, device="cpu") -> float:
    """GFLOP/s of (tokens, hidden) @ (hidden, intermediate) in dtype: what these cores reach on a block's GEMM."""
    gen = torch.Generator().manual_seed(0)
    x = torch.randn(tokens, hidden, generator=gen).to(device, dtype)
    w = torch.randn(intermediate, hidden, generator=gen).to(device, dtype)
    ms = _best_ms(lambda: F.linear(x, w), sync=_sync(device))
    return 2.0 * tokens * hidden * intermediate / ms / 1e6


def int8_gemm_ceiling_gops(tokens: int, hidden: int, intermediate: int) -> float:
    """GOP/s of the int8 GEMM (tokens, hidden) @ (hidden, intermediate) alone: oneDNN's quantized linear (the
    kernel of engine/int8.py) on uint8 rows and a prepacked int8 weight, fp32 out, no quantize pass."""
    gen = torch.Generator().manual_seed(0)
    x = torch.randint(0, 256, (tokens, hidden), generator=gen, dtype=torch.uint8)
    packed = torch.ops.onednn.qlinear_prepack(
        torch.randint(-127, 128, (intermediate, hidden), generator=gen, dtype=torch.int8), None)
    scales, zeros = torch.ones(intermediate), torch.zeros(intermediate, dtype=torch.long)
    ms = _best_ms(lambda: torch.ops.onednn.qlinear_pointwise(x, 1.0, 128, packed, scales, zeros, None, 1.0, 0,
                                                             torch.float32, "none", [], ""))
    return 2.0 * tokens * hidden * intermediate / ms / 1e6


def read_bandwidth_gbs(device="cpu") -> float:
    """GB/s of one streaming read (a sum) over a 1 GiB buffer."""
    buffer = torch.ones(BANDWIDTH_BYTES // 4, dtype=torch.float32, device=device)
    ms = _best_ms(lambda: buffer.sum(), sync=_sync(device))
    return BANDWIDTH_BYTES / ms / 1e6


def _sync(device):
    return torch.cuda.synchronize if torch.device(device).type == "cuda" else (lambda: None)


def _block_inputs(model: VLAModel, tokens: int, dtype, device):
    """Random hidden rows (P, N, H) (P = the model's passes, run as one batch), positions and mask."""
    rows = model.num_passes
    gen = torch.Generator().manual_seed(tokens)
    hidden = torch.randn(rows, tokens, model.spec.hidden_size, generator=gen).to(device, dtype)
    shape = list(model.family.position_ids_shape(tokens))
    shape[-2] = rows                                                       # (3, P, N) or (P, N)
    positions = torch.arange(tokens, device=device).expand(shape).contiguous()
    return hidden, positions, torch.ones(rows, tokens, dtype=torch.long, device=device)


class PartTimes:
    """Best ms of the attention and of the MLP of one block over the runs made while this is open (hooks)."""

    def __init__(self, block):
        self.best = {"self_attn": float("inf"), "mlp": float("inf")}
        self._marks: dict = {}
        self._hooks = []
        for name in self.best:
            part = getattr(block, name)
            self._hooks.append(part.register_forward_pre_hook(
                lambda *_, n=name: self._marks.__setitem__(n, time.perf_counter())))
            self._hooks.append(part.register_forward_hook(lambda *_, n=name: self._end(n)))

    def _end(self, name: str) -> None:
        self.best[name] = min(self.best[name], time.perf_counter() - self._marks[name])

    def __enter__(self) -> "PartTimes":
        return self

    def __exit__(self, *exc) -> None:
        for hook in self._hooks:
            hook.remove()

    def ms(self) -> dict:
        return {f"{name}_ms": seconds * 1e3 for name, seconds in self.best.items()}


def _timed_layers(model: VLAModel, blocks: int, dtype, device, int8: bool) -> list:
    """The first `blocks` blocks placed in dtype; int8: their linears quantized (engine/int8.py), each with a
    smoothing vector (ones) so that the calibrated suffix's extra multiply is timed too."""
    ensure_loaded(model, list(model.decoder.layers[:blocks]), dtype, torch.device(device))
    layers = [placed(layer, torch.device(device), dtype) for layer in model.decoder.layers[:blocks]]
    if int8:
        layers = [quantized_copy(layer, {name: torch.ones(layer.get_submodule(name).in_features)
                                         for name in linear_names(layer)}) for layer in layers]
    return layers


def block_roofline(model: VLAModel, tokens_list, dtype: torch.dtype, device="cpu", blocks: int = 2,
                   int8: bool = False) -> dict:
    """Time `blocks` consecutive real-size blocks at each N of tokens_list (only they are drawn). int8: the
    int8 suffix's blocks, against the int8 GEMM ceiling (GOP/s)."""
    layers = _timed_layers(model, blocks, dtype, device, int8)
    decoder, spec, sync = model.decoder, model.spec, _sync(device)
    rows = []
    for tokens in tokens_list:
        hidden, positions, mask = _block_inputs(model, tokens, dtype, device)
        run = (lambda h=hidden, p=positions, m=mask: run_blocks(decoder, layers, h, p, m))
        with torch.inference_mode(), PartTimes(layers[0]) as parts:   # the same runs: no extra ones
            ms = _best_ms(run, sync=sync) / blocks
        flops = {k: v * model.num_passes for k, v in block_flops(spec, tokens).items()}   # P rows
        ceiling = (int8_gemm_ceiling_gops(tokens * model.num_passes, spec.hidden_size, spec.intermediate_size) if int8
                   else gemm_ceiling_gflops(tokens * model.num_passes, spec.hidden_size, spec.intermediate_size, dtype, device))
        achieved = flops["total"] / ms / 1e6
        rows.append({"tokens": tokens, "block_ms": ms, "gflops": achieved, "ceiling_gflops": ceiling,
                     "of_ceiling": achieved / ceiling, **parts.ms(),
                     "attention_share_of_flops": flops["attention"] / flops["total"]})
    return {"rows": rows, "decode": _decode_row(model, layers, dtype, device)}


def _decode_row(model: VLAModel, layers, dtype, device) -> dict:
    """One token through the blocks: weight bytes streamed per ms against the buffer-read bandwidth."""
    hidden, positions, mask = _block_inputs(model, 1, dtype, device)
    with torch.inference_mode():
        ms = _best_ms(lambda: run_blocks(model.decoder, layers, hidden, positions, mask), sync=_sync(device)) / len(layers)
    weight_bytes = sum(t.numel() * t.element_size() for t in [*layers[0].parameters(), *layers[0].buffers()])
    bandwidth = read_bandwidth_gbs(device)
    achieved = weight_bytes / ms / 1e6
    return {"block_ms": ms, "weight_bytes": weight_bytes, "weight_gbs": achieved, "bandwidth_gbs": bandwidth,
            "of_bandwidth": achieved / bandwidth}


def roofline_report(model: VLAModel, placement: Placement, tokens_list, blocks: int = 2) -> dict:
    """block_roofline per side: the prefix on its device and cores in its dtype, the suffix on its cores in
    its dtype (this machine without a GPU: both are CPU core sets, the prefix's a stand-in)."""
    prefix_cores, suffix_cores, devices = core_plan(placement)
    sides = {"prefix": (prefix_cores, placement.prefix_device, placement.prefix_dtype, False),
             "suffix": (suffix_cores, placement.suffix_device, placement.suffix_dtype, placement.suffix_int8)}
    report = {"preset": model.spec.name, "family": model.spec.family, "devices": devices, "blocks_timed": blocks}
    for side, (cores, device, dtype, int8) in sides.items():
        with pinned(cores):
            name = "int8" if int8 else str(dtype).replace("torch.", "")
            report[side] = {"cores": cores, "dtype": name, "threads": torch.get_num_threads(),
                            **block_roofline(model, tokens_list, dtype, device, blocks, int8)}
    return report


def suffix_dtypes_report(model: VLAModel, placement: Placement, tokens_list, names, blocks: int = 1) -> dict:
    """The suffix's real-size block time at each N in each dtype of `names` (fp32, bf16, int8) on the suffix's
    cores, and each one's speed-up over fp32 and over bf16 where both were timed."""
    from ...engine.placement import parse_suffix_dtype
    _, cores, _ = core_plan(placement)
    times = {}
    with pinned(cores):
        for name in names:
            dtype, int8 = parse_suffix_dtype(name)
            times[name] = [r["block_ms"] for r in block_roofline(model, tokens_list, dtype, "cpu", blocks, int8)["rows"]]
    rows = []
    for i, tokens in enumerate(tokens_list):
        row = {"tokens": tokens, **{f"{n}_ms": times[n][i] for n in names}}
        for base in ("fp32", "bf16"):
            if base in times:
                row.update({f"{n}_vs_{base}": times[base][i] / times[n][i] for n in names if n != base})
        rows.append(row)
    return {"cores": cores, "threads": len(cores), "dtypes": list(names), "rows": rows}




def plot_roofline(report: dict, path) -> None:
    """Achieved GFLOP/s and the GEMM ceiling over N, per side."""
    from ...report import pyplot
    plt = pyplot()
    fig, axes = plt.subplots(1, 2, figsize=(10, 3.8), sharey=True)
    for ax, side in zip(axes, ("prefix", "suffix")):
        rows = report[side]["rows"]
        tokens = [r["tokens"] for r in rows]
        ax.plot(tokens, [r["ceiling_gflops"] for r in rows], "k--", label="GEMM ceiling")
        ax.plot(tokens, [r["gflops"] for r in rows], "o-", label="block")
        ax.set_xscale("log", base=2)
        ax.set_xlabel("tokens N")
        ax.set_title(f"{side}: {report[side]['dtype']}, cores {report[side]['cores']}")
        ax.legend()
    axes[0].set_ylabel("GFLOP/s")
    fig.suptitle(f"{report['preset']}: one real-size block")
    fig.tight_layout()
    fig.savefig(path)
    plt.close(fig)


__all__ = ["block_flops", "block_roofline", "gemm_ceiling_gflops", "plot_roofline", "read_bandwidth_gbs", "roofline_report"]
