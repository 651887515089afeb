"""`hybrid-vla bench --checkpoint builtin:drive-history --scenario encode-once`: what computing only what is new saves
(issue 53) for a model that reads its history (spec.frames_per_camera > 1) on the waypoint path, over a drive of
sliding windows (synthetic camera sets, one new set a window, windows built as engine/pipeline/frame_window.py
builds them).

Modes, each over the same windows, split serially at one cut p (PrefixStage + SuffixStage in one thread), window by
window in rotating order:
    full          every window's images through the vision tower (PrefixStage(encode_once=False))
    encode-once   the prefix keeps each image's encoding (its VisionCache): only the window's new images encoded
    streaming     encode-once and past frames' KV kept on each side (engine/kv_stream/; approximate): only the new
                  images' tokens (and the text) through the blocks
Per window: the prefix (tower + embeddings + blocks [0, p)), the whole frame (prefix + suffix: the serial period),
the images encoded; medians over the windows after the first two (the first encoded whole, the second whole and its
new images once more: the check that turns reuse on). Every encode-once plan is checked equal to the full mode's;
streaming's plans differ (its approximation): their mean and largest waypoint distance to the full mode's."""

from __future__ import annotations

import statistics
import time

import numpy as np
import torch

from ..engine.stages import PrefixStage, SuffixStage
from ..errors import ConfigError, expect
from ..model.inputs import synthetic_frame

START = 2


def run_windows(model, windows: int = 24, partition: int | None = None) -> dict:
    spec = model.spec
    expect(spec.frames_per_camera > 1, ConfigError,
           f"--scenario encode-once: model '{spec.name}' reads one frame a camera (frames_per_camera 1): nothing "
           f"repeats across its frames (the reduced Alpamayo: --preset alpamayo-bench)")
    p = model.num_blocks // 2 if partition is None else partition
    modes = {"full": PrefixStage(model, p, encode_once=False), "encode-once": PrefixStage(model, p),
             "streaming": PrefixStage(model, p, kv_stream=True)}
    suffixes = {name: SuffixStage(model, p) for name in modes}   # a streaming suffix keeps its own segments
    rows = {name: [] for name in modes}
    frames = [synthetic_frame(spec, seq) for seq in range(windows)]
    suffixes["full"].run(modes["full"].run(frames[0]))                                         # warm-up
    for seq, frame in enumerate(frames):
        order = list(modes)[seq % len(modes):] + list(modes)[:seq % len(modes)]
        for name in order:
            prefix = modes[name]
            t0 = time.perf_counter()
            state = prefix.run(frame)
            t1 = time.perf_counter()
            plan = suffixes[name].run(state)
            rows[name].append({"prefix_ms": (t1 - t0) * 1e3, "frame_ms": (time.perf_counter() - t0) * 1e3,
                               "images_encoded": prefix.vision.encoded if prefix.vision else spec.image_slots,
                               "points": plan.points})
    exact = all(np.array_equal(a["points"], b["points"]) for a, b in zip(rows["full"], rows["encode-once"]))
    distance = [float(np.linalg.norm(a["points"][:, :2] - b["points"][:, :2], axis=-1).mean())
                for a, b in zip(rows["full"], rows["streaming"])]                        # m, per window
    summary = {name: summarise(r) for name, r in rows.items()}
    return {"preset": spec.name, "blocks": model.num_blocks, "partition": p, "windows": windows,
            "images_per_window": spec.image_slots, "frames_per_camera": spec.frames_per_camera,
            "frame_stride": spec.frame_stride, "threads": torch.get_num_threads(), "modes": summary, "exact": exact,
            "encode_once": "on" if modes["encode-once"].vision.exact else modes["encode-once"].vision.why,
            "prefix_ratio": summary["encode-once"]["prefix_ms"] / summary["full"]["prefix_ms"],
            "frame_ratio": summary["encode-once"]["frame_ms"] / summary["full"]["frame_ms"],
            "streaming_prefix_ratio": summary["streaming"]["prefix_ms"] / summary["full"]["prefix_ms"],
            "streaming_frame_ratio": summary["streaming"]["frame_ms"] / summary["full"]["frame_ms"],
            "streaming_vs_full_m": {"mean": float(np.mean(distance)), "max": float(np.max(distance))},
            "tokens_per_window": model.sequence_length,
            "streaming_new_tokens": modes["streaming"].stream.last_new_tokens,   # the last window's
            "streaming_kept_slots": modes["streaming"].stream.stats()["kept_slots"],
            "streaming_kept_mib": {"prefix": modes["streaming"].stream.store.nbytes() / 2 ** 20,
                                   "suffix": suffixes["streaming"].stream.store.nbytes() / 2 ** 20}}


def summarise(rows: list[dict]) -> dict:
    warm = rows[START:]
    return {key: statistics.median(r[key] for r in warm) for key in ("prefix_ms", "frame_ms", "images_encoded")} | {
        "start_images_encoded": [r["images_encoded"] for r in rows[:START]]}


def table(report: dict) -> list[str]:
    lines = [f"{report['preset']}: {report['blocks']} blocks, cut p={report['partition']}, "
             f"{report['images_per_window']} images a window ({report['frames_per_camera']} frames a camera, every "
             f"{report['frame_stride']}), {report['tokens_per_window']} tokens ({report['streaming_new_tokens']} new "
             f"streaming), {report['threads']} thread(s); median of windows {START + 1}..{report['windows']} (ms)",
             f"{'mode':<13}{'prefix':>9}{'frame (serial period)':>23}{'images encoded':>16}"]
    for name, m in report["modes"].items():
        lines.append(f"{name:<13}{m['prefix_ms']:>9.2f}{m['frame_ms']:>23.2f}{m['images_encoded']:>16.0f}")
    lines.append(f"encode-once / full: prefix {report['prefix_ratio']:.2f}x, frame {report['frame_ratio']:.2f}x; "
                 f"exact: {'yes' if report['exact'] else 'NO'}; encode once: {report['encode_once']}")
    d = report["streaming_vs_full_m"]
    lines.append(f"streaming / full: prefix {report['streaming_prefix_ratio']:.2f}x, frame "
                 f"{report['streaming_frame_ratio']:.2f}x; approximate: plans {d['mean']:.3f} m from the full "
                 f"mode's on average (largest {d['max']:.3f} m); kept KV: prefix "
                 f"{report['streaming_kept_mib']['prefix']:.1f} MiB, suffix {report['streaming_kept_mib']['suffix']:.1f} MiB")
    return lines


def plot(report: dict, path) -> None:
    plot_mode_pairs(report["modes"], (("prefix_ms", "prefix"), ("frame_ms", "whole frame")),
                    f"{report['preset']}: compute what is new, {report['images_per_window']} images a window", path)


def plot_mode_pairs(modes: dict, bars: tuple, title: str, path) -> None:
    """Two bars per mode: bars = ((key, label), (key, label)) of each mode's medians (ms per window)."""
    from ..report import pyplot
    plt = pyplot()
    names = list(modes)
    fig, ax = plt.subplots(figsize=(6, 3.5))
    xs = range(len(names))
    for shift, (key, label) in zip((-0.2, 0.2), bars):
        ax.bar([x + shift for x in xs], [modes[n][key] for n in names], 0.4, label=label)
    ax.set_xticks(list(xs), names)
    ax.set_ylabel("ms (median per window)")
    ax.set_title(title, fontsize=9)
    ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
