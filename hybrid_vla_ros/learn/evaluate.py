"""Driving quality on held-out synthetic drives (seeds below TRAIN_SEED_BASE): ADE and FDE against the ground
truth for a constant-velocity baseline, the native (unsplit, transformers' own forward) model, and the hybrid
split at several p with the CPU suffix in each dtype asked (fp32 and bf16 by default); plus the largest
trajectory difference between native and each hybrid setting. With kv_stream (a model reading its history): the
split with streaming KV (engine/kv_stream/, approximate), each drive's frames in order, and its trajectory difference
to the full recompute (native) per frame."""

from __future__ import annotations

import numpy as np

from ..engine.placement import Placement, parse_suffix_dtype
from ..errors import ConfigError, expect
from ..engine.stages import PrefixStage, SuffixStage, reference_forward
from ..model.vla import VLAModel
from ..report import pyplot
from .train import TRAIN_SEED_BASE, Sample, road_samples


def displacement(pred_xy: np.ndarray, truth_xy: np.ndarray) -> tuple[float, float]:
    """(N, 2) each -> (average, final) displacement error in metres."""
    dist = np.linalg.norm(pred_xy - truth_xy, axis=-1)
    return float(dist.mean()), float(dist[-1])


def predictions(model: VLAModel, samples: list[Sample], partition: int | None, suffix_dtype: str = "fp32",
                prefix: tuple[str, str] = ("cpu", "fp32")) -> list:
    """(N, 2) predicted positions per sample: native (partition None; the CPU, fp32) or split at `partition`
    with the prefix on `prefix` = (device, dtype) and the suffix on the CPU in `suffix_dtype`."""
    if partition is None:
        return [reference_forward(model, s.frame)[1].points[:, :2] for s in samples]
    placement = Placement.create(prefix[0], prefix[1], suffix_dtype)
    prefix, suffix = PrefixStage(model, partition, placement), SuffixStage(model, partition, placement)
    return [suffix.run(prefix.run(s.frame)).points[:, :2] for s in samples]


def streamed_predictions(model: VLAModel, samples: list[Sample], partition: int, refresh_windows: int = 0,
                         prefix: tuple[str, str] = ("cpu", "fp32")) -> list:
    """(N, 2) per sample through the split at `partition` with streaming KV, the prefix on `prefix` = (device,
    dtype), the suffix on the CPU in fp32: the samples in order (a drive's frames one after another, so its windows
    keep their past frames' KV; another drive's images never match)."""
    placement = Placement.create(prefix[0], prefix[1], "fp32")
    suffix = SuffixStage(model, partition, placement)
    prefix = PrefixStage(model, partition, placement, kv_stream=True, kv_refresh_windows=refresh_windows)
    return [suffix.run(prefix.run(s.frame)).points[:, :2] for s in samples]


def trajectory_difference(preds: list, reference: list) -> dict:
    """Per frame the mean distance (m) between the two plans' waypoints: its mean, 95th percentile and largest."""
    per_frame = np.array([np.linalg.norm(a - b, axis=-1).mean() for a, b in zip(preds, reference)])
    return {"mean_m": float(per_frame.mean()), "p95_m": float(np.percentile(per_frame, 95)),
            "max_m": float(per_frame.max())}


def score(preds: list, samples: list[Sample]) -> dict:
    """ADE and FDE over every frame, and over the frames whose lead vehicle is braking (where a model must see
    the lead's speed, which one image does not show), with that count."""
    errors = np.array([displacement(p, s.truth[:, :2]) for p, s in zip(preds, samples)])   # (n, 2)
    braking = np.array([s.lead_braking for s in samples], dtype=bool)
    out = {"ade_m": float(errors[:, 0].mean()), "fde_m": float(errors[:, 1].mean()), "lead_braking_frames":
           int(braking.sum())}
    if braking.any():
        out.update(lead_braking_ade_m=float(errors[braking, 0].mean()), lead_braking_fde_m=float(errors[braking, 1].mean()))
    return out


def constant_velocity(samples: list[Sample], dt_s: float) -> list:
    """Straight ahead at the frame's speed (what the ego state alone says)."""
    out = []
    for s in samples:
        t = np.arange(1, len(s.truth) + 1) * dt_s
        out.append(np.column_stack([s.frame.ego.speed_mps * t, np.zeros_like(t)]))
    return out


def evaluate(model: VLAModel, drives: int = 10, seed: int = 0, frames_per_drive: int = 40,
             partitions: tuple[int, ...] | None = None, progress=print, prefix: tuple[str, str] = ("cpu", "fp32"),
             suffix_dtypes: tuple[str, ...] = ("fp32", "bf16"), kv_stream: bool = False,
             kv_refresh_windows: int = 0) -> dict:
    """Held-out drives seed, seed + 1, ... (all below TRAIN_SEED_BASE). prefix: the hybrid settings' prefix
    (device, dtype); suffix_dtypes: the CPU suffix's dtypes to score at each p; native is always
    transformers' forward on the CPU in fp32. ade_change: per suffix dtype, the largest relative ADE change
    against native over the partitions."""
    spec = model.spec
    expect(bool(suffix_dtypes) and len(set(suffix_dtypes)) == len(suffix_dtypes), ConfigError,
           f"suffix dtypes {list(suffix_dtypes)}: expected one or more, each once")
    for dtype in suffix_dtypes:
        parse_suffix_dtype(dtype)
    seeds = list(range(seed, seed + drives))
    expect(seed >= 0 and max(seeds) < TRAIN_SEED_BASE, ConfigError,
           f"held-out drives {seeds[0]}..{seeds[-1]}: evaluation seeds must lie in 0..{TRAIN_SEED_BASE - 1} "
           f"(from {TRAIN_SEED_BASE} on they are training drives)")
    samples = road_samples(spec, seeds, frames_per_drive)
    partitions = partitions or tuple(sorted({1, spec.num_blocks // 2, spec.num_blocks - 1}))
    report = {"preset": spec.name, "drives": drives, "seeds": seeds, "frames": len(samples),
              "hybrid_prefix": {"device": prefix[0], "dtype": prefix[1]}, "settings": {}}
    settings = report["settings"]
    settings["constant_velocity"] = score(constant_velocity(samples, spec.waypoint_dt_s), samples)
    native = predictions(model, samples, None)
    settings["native"] = score(native, samples)
    progress(f"native: ADE {settings['native']['ade_m']:.3f} m")
    for p in partitions:
        for dtype in suffix_dtypes:
            name = f"hybrid_{dtype}_p{p}"
            preds = predictions(model, samples, p, dtype, prefix)
            settings[name] = {**score(preds, samples),
                              "max_diff_vs_native_m": float(max(np.abs(a - b).max() for a, b in zip(preds, native)))}
            progress(f"{name}: ADE {settings[name]['ade_m']:.3f} m")
    if kv_stream:   # the same plans at every cut (test_kv_stream): one, the middle of the asked ones, fp32 suffix
        p = sorted(partitions)[len(partitions) // 2]
        preds = streamed_predictions(model, samples, p, kv_refresh_windows, prefix)
        settings[f"streaming_kv_p{p}"] = {**score(preds, samples), "refresh_windows": kv_refresh_windows,
                                          "vs_full_recompute": trajectory_difference(preds, native)}
        progress(f"streaming_kv_p{p}: ADE {settings[f'streaming_kv_p{p}']['ade_m']:.3f} m")
    cv, nat = settings["constant_velocity"]["ade_m"], settings["native"]["ade_m"]
    report["ade_reduction_vs_constant_velocity"] = 1 - nat / cv
    report["ade_change"] = {d: max(abs(settings[f"hybrid_{d}_p{p}"]["ade_m"] - nat) / nat for p in partitions)
                            for d in suffix_dtypes}
    if "bf16" in suffix_dtypes:
        report["bf16_ade_change"] = report["ade_change"]["bf16"]
    if "fp32" in suffix_dtypes:
        report["fp32_identical_to_native"] = all(settings[f"hybrid_fp32_p{p}"]["max_diff_vs_native_m"] < 1e-4
                                                 for p in partitions)
    return report


def plot_evaluation(report: dict, path: str) -> None:
    plt = pyplot()
    names = list(report["settings"])
    fig, ax = plt.subplots(figsize=(max(6, len(names) * 0.9), 4))
    x = np.arange(len(names))
    ax.bar(x - 0.2, [report["settings"][n]["ade_m"] for n in names], 0.4, label="ADE")
    ax.bar(x + 0.2, [report["settings"][n]["fde_m"] for n in names], 0.4, label="FDE")
    ax.set_xticks(x, names, rotation=30, ha="right", fontsize=8)
    ax.set_ylabel("metres")
    ax.set_title(f"{report['preset']} on {report['drives']} held-out drives ({report['frames']} frames)", fontsize=9)
    ax.legend()
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
