"""`hybrid-vla bench --preset alpamayo-bench --scenario encode-once`: what encoding each image once saves (issue 53,
engine/expert_split/vision_cache.py), on the reduced Alpamayo 1.5 of reduced.py over a drive of sliding windows
(4 cameras x the last 4 camera sets, one new set a window, as the prefix node sees a drive).

Modes, each over the same windows, split serially at one cut p (one process, run_split's sides), window by window in
alternating order:
    full          every window's 16 images through the vision tower (what the node did before)
    encode-once   the prefix keeps each image's encoding: only the window's 4 new images through the tower
Per window: the prefix's prefill (tower + embeddings + blocks [0, p)), the whole frame (reasoning, expert), the images
encoded; medians over the windows after the first two (the first is encoded whole, the second whole and its new
images once more: the check that turns reuse on; reported apart). Every encode-once frame's
tokens and trajectory are checked equal to the full mode's (exact: the report says so)."""

from __future__ import annotations

import statistics

import torch

from ...engine.expert_split.runner import AlpamayoSplit
from ...engine.expert_split.vision_cache import VisionCache
from ...model.plugins.alpamayo.decode import Sampling
from ...model.plugins.alpamayo.flow import FlowSettings
from .reduced import reduced_inputs, reduced_model

CAMERAS, FRAMES = 4, 4
ROW_WIDTH = 3 * 2 * 16 * 16    # the reduced tower's patch rows: 3 channels x 2 frames x 16 x 16 px


def image_rows(camera: int, index: int, grid: tuple[int, int]) -> torch.Tensor:
    """Camera `camera`'s image of camera set `index`: seeded noise patch rows (gh * gw, ROW_WIDTH)."""
    gen = torch.Generator().manual_seed(1000 * index + camera)
    return torch.randn(grid[0] * grid[1], ROW_WIDTH, generator=gen) * 0.5


def window(last: int, grid: tuple[int, int]):
    """The window ending at camera set `last`: camera-major, oldest first, keyed (camera, set)."""
    keys = tuple((c, k) for c in range(CAMERAS) for k in range(last - FRAMES + 1, last + 1))
    inputs = reduced_inputs(route=True, grid=grid, pixel_rows=torch.cat([image_rows(c, k, grid) for c, k in keys]))
    inputs.image_keys = keys
    return inputs


def measure(split: AlpamayoSplit, inputs, seq: int, sampling, flow) -> dict:
    vision = split.vision
    if vision is None:
        inputs = type(inputs)(**{**inputs.__dict__, "image_keys": None})
    out = split.run(inputs, seq, sampling, flow)
    return {"prefill_ms": out.phase_ms("prefix", "prefill"), "total_ms": out.result.timings["total_ms"],
            "images_encoded": vision.encoded if vision is not None else int(inputs.image_grid_thw.shape[0]),
            "tokens": out.result.tokens, "xyz": out.result.xyz}


def run_modes(model, windows, partition: int, sampling, flow) -> tuple[list[dict], list[dict]]:
    """Both modes window by window, alternating (a load that comes and goes hits both alike)."""
    full, once = AlpamayoSplit(model, partition), AlpamayoSplit(model, partition, vision=VisionCache())
    rows = ([], [])
    for seq, inputs in enumerate(windows):
        for split, out in ((full, rows[0]), (once, rows[1])) if seq % 2 == 0 else ((once, rows[1]), (full, rows[0])):
            out.append(measure(split, inputs, seq, sampling, flow))
    return rows


START = 2   # windows before the steady state: the first is encoded whole, the second whole + its new images alone


def summary(rows: list[dict]) -> dict:
    warm = rows[START:]
    return {"prefill_ms": statistics.median(r["prefill_ms"] for r in warm),
            "total_ms": statistics.median(r["total_ms"] for r in warm),
            "images_encoded": statistics.median(r["images_encoded"] for r in warm),
            "start_prefill_ms": [r["prefill_ms"] for r in rows[:START]],
            "start_images_encoded": [r["images_encoded"] for r in rows[:START]]}


def run_encode_once(windows: int = 6, partition: int | None = None, reasoning: int = 8, steps: int = 10,
                    grid: tuple[int, int] = (16, 24), seed: int = 0) -> dict:
    """-> the report (JSON-ready; table() prints it)."""
    model = reduced_model(seed)
    blocks = model.config.vlm.text_config.num_hidden_layers
    partition = blocks // 2 if partition is None else partition
    sampling, flow = Sampling(max_new_tokens=reasoning), FlowSettings(steps=steps)
    drive = [window(FRAMES - 1 + i, grid) for i in range(windows)]
    measure(AlpamayoSplit(model, partition), drive[0], 0, sampling, flow)                      # warm-up
    full, once = run_modes(model, drive, partition, sampling, flow)
    exact = all(a["tokens"] == b["tokens"] and torch.equal(a["xyz"], b["xyz"]) for a, b in zip(full, once))
    modes = {"full": summary(full), "encode-once": summary(once)}
    return {"blocks": blocks, "partition": partition, "windows": windows, "grid": list(grid),
            "image_tokens": grid[0] * grid[1] // 4, "images_per_window": CAMERAS * FRAMES,
            "prompt_tokens": int(drive[0].input_ids.shape[1]), "reasoning_tokens": reasoning, "steps": steps,
            "threads": torch.get_num_threads(), "modes": modes, "exact": exact,
            "prefill_ratio": modes["encode-once"]["prefill_ms"] / modes["full"]["prefill_ms"],
            "total_ratio": modes["encode-once"]["total_ms"] / modes["full"]["total_ms"]}


def table(report: dict) -> list[str]:
    lines = [f"reduced Alpamayo 1.5: {report['blocks']} blocks, cut p={report['partition']}, "
             f"{report['images_per_window']} images x {report['image_tokens']} tokens a window "
             f"(prompt {report['prompt_tokens']}), {report['reasoning_tokens']} reasoning tokens, {report['steps']} "
             f"Euler steps, {report['threads']} thread(s); median of windows {START + 1}..{report['windows']} (ms)",
             f"{'mode':<13}{'prefix prefill':>15}{'frame':>9}{'images encoded':>16}  first windows: prefill ms "
             f"(images encoded)"]
    for name, m in report["modes"].items():
        start = ", ".join(f"{ms:.1f} ({n})" for ms, n in zip(m["start_prefill_ms"], m["start_images_encoded"]))
        lines.append(f"{name:<13}{m['prefill_ms']:>15.1f}{m['total_ms']:>9.1f}{m['images_encoded']:>16.0f}  {start}")
    lines.append(f"encode-once / full: prefill {report['prefill_ratio']:.2f}x, frame {report['total_ratio']:.2f}x; "
                 f"exact: {'yes' if report['exact'] else 'NO'}")
    return lines


def plot(report: dict, path) -> None:
    """The prefix's prefill and the whole frame per mode."""
    from ..windows import plot_mode_pairs
    plot_mode_pairs(report["modes"], (("prefill_ms", "prefix prefill"), ("total_ms", "whole frame")),
                    f"encode once: {report['images_per_window']} images a window, 4 new", path)
