"""Timing on this machine for the planner: one real-shape decoder block, its largest GEMM (the ceiling), a
streaming read, and for a small model the front end and the head as the stages run them.

A block is timed as the median of a few runs (what a pipeline's p50 sees); the GEMM ceiling as the best of a
few (a ceiling). Only the modules timed are drawn (real-size presets: model/seeded.py).
"""

from __future__ import annotations

import itertools
import os
import statistics
import threading
import time
from contextlib import contextmanager

import torch
import torch.nn.functional as F

from ..engine.cpu import pin_current_thread, pinned
from ..engine.int8 import int8_linear, quantized_copy
from ..engine.placement import DTYPE_NAMES, INT8, Placement, int8_rest_dtype
from ..engine.expert_split.vision_cache import VisionCache
from ..engine.pipeline.frame_window import window_depth
from ..engine.stages import frame_embeddings, placed, run_blocks
from ..model.checkpoint import ensure_loaded
from ..model.inputs import synthetic_frame
from .efficiency import BlockMeasure
from .hardware import PARTS_GPU, dtype_key, this_cpu
from .workload import FrontEnd, Workload

CALIBRATION_ROWS = 512       # rows a calibration block runs at, at most (an efficiency, not a time, is wanted)
FRONT_MEASURE_FLOPS = 20e9   # front ends up to this are run as the stage runs them; larger: from their FLOPs


MEDIAN_MOST = 60


def median_ms(run, repeats: int = 3, sync=lambda: None, budget_s: float = 1.0, most: int = MEDIAN_MOST) -> float:
    """Median of at least `repeats` runs after a warm-up; short runs are repeated until about budget_s of them
    (at most `most`), so one burst of a competing load on a shared machine does not set the figure."""
    t0 = time.perf_counter()
    run()
    sync()
    first = time.perf_counter() - t0
    count = max(repeats, min(most, int(budget_s / max(first, 1e-6))))
    times = []
    for _ in range(count):
        t0 = time.perf_counter()
        run()
        sync()
        times.append(time.perf_counter() - t0)
    return statistics.median(times) * 1e3


BANDWIDTH_BYTES = 1 << 30   # a streaming read over a buffer far larger than the caches


def device_sync(device):
    return torch.cuda.synchronize if torch.device(device).type == "cuda" else (lambda: None)


def block_inputs(model, rows: int, dtype, device):
    """A hidden state (1, rows, hidden), its position ids in the family's layout and an all-ones mask."""
    gen = torch.Generator().manual_seed(rows)
    hidden = torch.randn(1, rows, model.spec.hidden_size, generator=gen).to(device, dtype)
    positions = torch.arange(rows, device=device).expand(model.family.position_ids_shape(rows)).contiguous()
    return hidden, positions, torch.ones(1, rows, dtype=torch.long, device=device)


def read_bandwidth_gbs(device="cpu") -> float:
    """GB/s of the best of a few sums over a 1 GiB buffer."""
    buffer = torch.ones(BANDWIDTH_BYTES // 4, dtype=torch.float32, device=device)
    sync, best = device_sync(device), float("inf")
    for _ in range(4):
        t0 = time.perf_counter()
        buffer.sum()
        sync()
        best = min(best, time.perf_counter() - t0)
    return BANDWIDTH_BYTES / best / 1e9


def gpu_part(device) -> str | None:
    """The PARTS_GPU key of a CUDA device by its name (None when not in the table)."""
    name = torch.cuda.get_device_name(device).lower()
    return next((key for key in PARTS_GPU if key in name.replace(" ", "")), None)


def device_peak_gflops(device, dtype, cores) -> tuple[float, str]:
    if torch.device(device).type == "cuda":
        part = gpu_part(device)
        return (PARTS_GPU[part].peak_gflops(dtype), PARTS_GPU[part].name) if part else (float("nan"), "unknown GPU")
    cpu = this_cpu(cores=len(cores) if cores else None)
    return cpu.peak_gflops(dtype), cpu.path(dtype)


def paired_times(run_block, run_gemm, sync=lambda: None, repeats: int = 3, budget_s: float = 1.5,
                 most: int = 60) -> list[tuple[float, float]]:
    """(block s, GEMM s) pairs, each pair run back to back after one warm-up of both: a slow spell of a shared
    machine lands on both members of a pair, so their ratio stays what the cores do."""
    def timed(run):
        t0 = time.perf_counter()
        run()
        sync()
        return time.perf_counter() - t0
    first = timed(run_block) + timed(run_gemm)
    return [(timed(run_block), timed(run_gemm)) for _ in range(max(repeats, min(most, int(budget_s / first))))]


@contextmanager
def busy_beside(run, cores):
    """`run()` over and over in a thread pinned to `cores` while the body runs: the other stage of a pipelined
    split computing beside the one timed, as it does in steady state (their Python shares one GIL in one
    process, their cores share the memory bus and the last-level cache). cores None or empty: nothing runs."""
    if not cores:
        yield
        return
    stop = threading.Event()

    def loop():
        pin_current_thread(list(cores), len(cores))
        with torch.inference_mode():
            while not stop.is_set():
                run()
    thread = threading.Thread(target=loop, name="plan-beside", daemon=True)
    thread.start()
    try:
        yield
    finally:
        stop.set()
        thread.join()


STREAM_BYTES = 512 * 2**20   # blocks timed in turn hold up to about this much: past any last-level cache, and
                             # bounded (a 7B checkpoint's blocks are not all copied to a GPU to be timed)


def resident_blocks(model, streamed: bool) -> list:
    """The blocks a measurement runs in turn: streamed, the model's blocks from block 0 while their weights
    stay under STREAM_BYTES (each block's weights then come from memory, not from a cache the same block left
    warm, as when a stage runs its blocks), else block 0 (a real-size preset draws only it; its weights exceed
    any cache anyway)."""
    layers = list(model.decoder.layers)
    if not streamed or model.spec.real_size:
        return layers[:1]
    chosen, held = [], 0
    for layer in layers:
        if chosen and held >= STREAM_BYTES:
            break
        chosen.append(layer)
        held += sum(t.numel() * t.element_size() for t in layer.parameters())
    return chosen


def measure_block(model, rows: int, dtype: torch.dtype, cores=None, device="cpu", repeats: int = 3,
                  beside=None, streamed: bool = False) -> BlockMeasure:
    """Block 0 of `model` at `rows` rows in `dtype` on `cores` (or the GPU), paired with its largest GEMM,
    (rows, hidden) @ (hidden, intermediate): the block's median time, the GEMM's best rate (the ceiling), the
    median of the pairs' block / GEMM rate, and the device's peak for the dtype. beside: CPU cores on which the
    same block runs meanwhile (the other stage, as in the pipelined steady state). streamed: every resident
    block in turn, the time per block (resident_blocks), on both the timed and the beside side."""
    spec, dev = model.spec, torch.device(device)
    blocks = resident_blocks(model, streamed)
    int8, kind = dtype == INT8, dtype
    dtype = int8_rest_dtype() if int8 else dtype                 # int8: the linears; the rest in this dtype
    ensure_loaded(model, blocks, dtype, dev)
    layers = [placed(block, dev, dtype) for block in blocks]
    params = sum(p.numel() for p in layers[0].parameters())
    layers = [quantized_copy(layer) for layer in layers] if int8 else layers
    work = Workload(spec.name, 1, spec.hidden_size, spec.num_heads, spec.num_kv_heads, spec.intermediate_size,
                    rows, front=FrontEnd("none", 0.0, 0, 0.0), block_params=params, head_width=spec.head_dim)
    gemm_flops = 2.0 * rows * spec.hidden_size * spec.intermediate_size
    x, gemm = _largest_gemm(spec, rows, dtype, dev, int8)
    with pinned(cores if dev.type == "cpu" else None), torch.inference_mode():
        hidden, positions, mask = block_inputs(model, rows, dtype, device)
        run = lambda: run_blocks(model.decoder, layers, hidden, positions, mask)  # noqa: E731
        with busy_beside(_beside_run(model, blocks, rows, dtype, int8) if beside else None, beside):
            pairs = paired_times(run, lambda: [gemm(x) for _ in layers], device_sync(device), repeats)
        peak, path = device_peak_gflops(device, kind, cores)
    block_s = statistics.median(b for b, _ in pairs) / len(layers)
    ratio = statistics.median((work.block_flops / b) / (gemm_flops / g) for b, g in pairs)
    return BlockMeasure(shape=f"{spec.hidden_size} x {spec.intermediate_size}, {spec.num_heads}/{spec.num_kv_heads} heads",
                        rows=rows, dtype=dtype_key(kind), path=path, block_gflops=work.block_flops / block_s / 1e9,
                        gemm_gflops=gemm_flops * len(layers) / min(g for _, g in pairs) / 1e9, peak_gflops=peak,
                        block_ms=block_s * 1e3, block_of_gemm=ratio, device=str(device), cores=tuple(cores or ()),
                        beside=tuple(beside or ()), blocks=len(layers),
                        loadavg=os.getloadavg()[0], pairs=len(pairs))


def _largest_gemm(spec, rows: int, dtype, dev, int8: bool):
    """(x, gemm) of the block's largest GEMM, (rows, hidden) @ (hidden, intermediate), as the block runs it:
    F.linear in dtype, or the int8 suffix's linear (engine/int8.py, its quantize pass included)."""
    gen = torch.Generator().manual_seed(rows)
    x = torch.randn(rows, spec.hidden_size, generator=gen).to(dev, dtype)
    w = torch.randn(spec.intermediate_size, spec.hidden_size, generator=gen)
    if not int8:
        w = w.to(dev, dtype)
        return x, lambda rows_: F.linear(rows_, w)
    return x, int8_linear(w)


def _beside_run(model, blocks, rows: int, dtype, int8: bool = False):
    """The other stage's work for busy_beside: the same blocks on the CPU (placed copies only where needed)."""
    others = [placed(block, torch.device("cpu"), dtype) for block in blocks]
    others = [quantized_copy(block) for block in others] if int8 else others
    inputs = block_inputs(model, rows, dtype, "cpu")
    return lambda: run_blocks(model.decoder, others, *inputs)


def measure_bandwidth(cores=None, device="cpu") -> float:
    with pinned(cores if torch.device(device).type == "cpu" else None):
        return read_bandwidth_gbs(device)


def measure_front_ms(model, placement: Placement, cores=None, repeats: int = 3,
                     encode_once: bool = True) -> float | None:
    """frame_embeddings (camera preprocessing, vision tower, embeddings, positions) on a synthetic frame, as the
    prefix stage runs it; None for a real-size preset (drawing and running its tower here would take minutes). A
    model reading its history, encode_once: a window of a sliding drive once its images repeat, each image encoded
    once as the prefix stage does where that is exact (its VisionCache decides; off: whole windows, timed so)."""
    if model.spec.real_size:
        return None
    placed_model, spec = _placed_prefix(model, placement), model.spec
    vision = VisionCache(windows=max(2, spec.frame_stride)) if spec.frames_per_camera > 1 and encode_once else None
    seqs = itertools.count()
    frame = synthetic_frame(spec, 0)
    with pinned(cores if not placement.uses_cuda else None), torch.inference_mode():
        if vision is None:
            return median_ms(lambda: frame_embeddings(placed_model, frame, placement), repeats, placement.synchronize)
        for _ in range(window_depth(spec) + 2):   # past the first windows: the check that turns reuse on
            frame_embeddings(placed_model, synthetic_frame(spec, next(seqs)), placement, vision)
        frames = iter([synthetic_frame(spec, next(seqs)) for _ in range(MEDIAN_MOST + 1)])   # warm-up + the most
        return median_ms(lambda: frame_embeddings(placed_model, next(frames), placement, vision), repeats,
                         placement.synchronize, most=MEDIAN_MOST)


def _placed_prefix(model, placement: Placement):
    from ..engine.stages import PrefixStage
    return PrefixStage(model, 0, placement).model


def measure_head_ms(model, placement: Placement, cores=None, repeats: int = 5) -> float | None:
    """What the suffix stage does beyond its blocks (checks, final norm, action head, waypoints) on a state at
    p = L, in the suffix dtype on its cores (None for a real-size preset: from its FLOPs)."""
    if model.spec.real_size:
        return None
    from ..engine.stages import SuffixStage
    from ..types import BoundaryState
    frame, cpu = synthetic_frame(model.spec, 0), Placement(prefix_dtype=placement.prefix_dtype,
                                                           suffix_dtype=placement.suffix_dtype)
    with torch.inference_mode():
        embedded = frame_embeddings(_placed_prefix(model, cpu), frame, cpu)
    state = BoundaryState(hidden=embedded.embeds, position_ids=embedded.position_ids,
                          attention_mask=torch.ones_like(embedded.input_ids), partition=model.num_blocks,
                          seq=0, stamp_ns=frame.stamp_ns, query_index=embedded.input_ids.shape[1] - 1)
    suffix = SuffixStage(model, model.num_blocks, cpu)
    with pinned(cores):
        return median_ms(lambda: suffix.run(state), repeats)


def calibration_rows(work: Workload) -> int:
    return min(work.rows, CALIBRATION_ROWS)


def dtype_name(dtype: torch.dtype) -> str:
    return DTYPE_NAMES.get(dtype, str(dtype))


__all__ = ["CALIBRATION_ROWS", "STREAM_BYTES", "calibration_rows", "device_peak_gflops", "gpu_part", "measure_bandwidth",
           "measure_block", "measure_front_ms", "resident_blocks", "measure_head_ms", "median_ms"]
