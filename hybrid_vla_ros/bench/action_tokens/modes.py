"""`hybrid-vla bench --preset <an action-token model>`: the default bench's modes for a model that decodes action
tokens, side by side in one run, on the same frames: native (sequential decoding unsplit: transformers' layers and
cache, one frame at a time), serial (ActionFlow's packed split at p, one group: each step's prefix side, then its
suffix side, in one thread) and pipelined (two packed groups alternating across the cut, the suffix side in a
process of its own: the graph's arrangement, bench/action_tokens/packs.py). Native and serial run on one core, pipelined on
two (prefix side on the first, suffix side on the second: the two-core stand-in for GPU + CPU). `exact`: every
frame's tokens equal native's. `--head action-tokens` compares packs and threads in depth."""

from __future__ import annotations

import time

from ...engine.cpu import allowed_cores
from ...model.inputs import synthetic_frame
from ...report import pyplot
from .packs import TimedFlow, sequential_run, split_processes_run, summarise, cores_and_threads

MODES = ("native", "serial", "pipelined")


def run_token_modes(model, frames: int = 24, pack: int = 2, partition: int | None = None, progress=print) -> dict:
    spec, cores = model.spec, sorted(allowed_cores())
    inputs = [synthetic_frame(spec, i) for i in range(frames)]
    partition = spec.num_blocks // 2 if partition is None else partition
    split = {"prefix_cores": cores[:1], "suffix_cores": cores[1:2] or cores[:1]}
    native, reference = sequential_run(model, inputs, cores[:1], 1)
    native.update(exact=True, speedup_vs_sequential=1.0)
    progress(f"native: {native['frames_per_s']:.2f} frames/s")
    with cores_and_threads(set(cores[:1]), 1):
        flow = TimedFlow(model, pack, partition=partition)
        t0 = time.perf_counter()
        serial = summarise(flow.run(inputs), time.perf_counter() - t0, native["frames_per_s"], reference)
    progress(f"serial: {serial['frames_per_s']:.2f} frames/s")
    pipelined = split_processes_run(model, pack, partition, inputs, native["frames_per_s"], reference,
                                     {"split": split})
    progress(f"pipelined: {pipelined['frames_per_s']:.2f} frames/s")
    modes = {"native": native, "serial": serial, "pipelined": pipelined}
    return {"preset": spec.name, "kind": "tokens", "frames": frames, "pack": pack, "partition": partition,
            "num_blocks": spec.num_blocks, "cores": cores, **split,
            "tokens_per_frame": model.action_tokenizer.tokens_per_frame, "modes": modes,
            "exact": all(m["exact"] for m in modes.values())}


def token_modes_lines(report: dict) -> list[str]:
    lines = [f"{report['preset']}: action tokens, {report['num_blocks']} blocks, partition {report['partition']}, "
             f"{report['frames']} frames, pack {report['pack']}",
             f"  {'mode':10s} {'frames/s':>9s} {'x native':>9s} {'p50 ms':>8s}  exact"]
    for name, m in report["modes"].items():
        lines.append(f"  {name:10s} {m['frames_per_s']:9.2f} {m['speedup_vs_sequential']:9.2f} "
                     f"{m['latency_ms']['p50']:8.1f}  {m['exact']}")
    return lines


def plot_token_modes(report: dict, path: str) -> None:
    plt = pyplot()
    fig, ax = plt.subplots(figsize=(6, 4))
    names = list(report["modes"])
    ax.bar(names, [report["modes"][n]["frames_per_s"] for n in names], color=["gray", "tab:blue", "tab:green"])
    ax.set_ylabel("frames / s")
    ax.set_title(f"{report['preset']}: action tokens, split at p={report['partition']}, pack {report['pack']}")
    fig.tight_layout()
    fig.savefig(path)
    plt.close(fig)
