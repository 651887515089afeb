"""An int8 suffix's calibration (issue 40): SmoothQuant smoothing scales from recorded frames, and the
trajectory deviation int8 causes on them, measured, so that `dtype: auto` only takes int8 where the driving
holds. Written next to a checkpoint as `int8_calibration.safetensors` (tensors + JSON metadata; no pickle).

Smoothing (Xiao et al., SmoothQuant, 2023): per input channel j of a linear, s_j = max|X_j|^a / max|W_j|^(1-a)
(a = ALPHA): activations divided by s, weight columns multiplied by s, so activation outliers move into the
per-channel-quantized weight. Kept only where it lowers the measured deviation.

The deviation: every frame through the whole model at partition 0 (every block on the suffix side, the worst
case for any cut), the int8 suffix as it runs here (engine/placement.py int8_rest_dtype) against fp32: the mean over frames of the mean waypoint distance (metres, x/y), and the
largest waypoint distance seen.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import torch
from safetensors.torch import safe_open, save_file

from ..errors import ConfigError, expect
from .int8 import linear_names, quantized_copy

CALIBRATION_FILE = "int8_calibration.safetensors"
FORMAT = "hybrid_vla.int8_calibration.v1"
ALPHA = 0.5
SCALE_RANGE = (1e-4, 1e4)


@dataclass
class Int8Calibration:
    """smoothing: block index -> linear name (inside the block) -> (K,) scales; empty when smoothing did not
    lower the deviation. deviation_m / max_deviation_m: int8 vs fp32 with the smoothing as kept;
    unsmoothed_deviation_m: without any."""
    frames: int
    deviation_m: float
    max_deviation_m: float
    unsmoothed_deviation_m: float
    source: str = ""
    alpha: float = ALPHA
    smoothing: dict[int, dict[str, torch.Tensor]] = field(default_factory=dict)

    def describe(self) -> dict:
        return {"frames": self.frames, "deviation_m": self.deviation_m, "max_deviation_m": self.max_deviation_m,
                "unsmoothed_deviation_m": self.unsmoothed_deviation_m, "smoothed": bool(self.smoothing),
                "alpha": self.alpha, "source": self.source}

    def save(self, directory: str | Path) -> Path:
        path = Path(directory) / CALIBRATION_FILE
        tensors = {f"layers.{i}.{name}.smooth": s.contiguous() for i, block in self.smoothing.items()
                   for name, s in block.items()}
        save_file(tensors, str(path), metadata={"format": FORMAT, "calibration": json.dumps(self.describe())})
        return path

    @classmethod
    def load(cls, directory: str | Path) -> "Int8Calibration | None":
        """The calibration next to a checkpoint; None when it has none."""
        path = Path(directory) / CALIBRATION_FILE
        if not path.is_file():
            return None
        with safe_open(str(path), "pt") as f:
            meta = f.metadata() or {}
            expect(meta.get("format") == FORMAT, ConfigError,
                   f"{path}: format {meta.get('format')!r}, expected {FORMAT!r} (written by hybrid-vla calibrate)")
            smoothing: dict[int, dict[str, torch.Tensor]] = {}
            for key in f.keys():
                _, index, rest = key.split(".", 2)
                smoothing.setdefault(int(index), {})[rest.removesuffix(".smooth")] = f.get_tensor(key)
        fields = json.loads(meta["calibration"])
        return cls(fields["frames"], fields["deviation_m"], fields["max_deviation_m"],
                   fields["unsmoothed_deviation_m"], fields.get("source", ""), fields.get("alpha", ALPHA), smoothing)


def calibration_of(model) -> Int8Calibration | None:
    """model.int8_calibration; for a checkpoint model, read once from its directory (None: it has none)."""
    files = getattr(model, "checkpoint_files", None)
    if getattr(model, "int8_calibration", None) is None and files is not None and \
            not getattr(model, "int8_calibration_read", False):
        model.int8_calibration = Int8Calibration.load(files.directory)
        model.int8_calibration_read = True
    return getattr(model, "int8_calibration", None)


def int8_block(model, index: int, block: torch.nn.Module) -> torch.nn.Module:
    """Block `index` of `model` as the int8 suffix runs it: a quantized copy, smoothed where the model's
    calibration has scales for it."""
    calibration = calibration_of(model)
    return quantized_copy(block, calibration.smoothing.get(index) if calibration is not None else None)


@torch.inference_mode()
def activation_ranges(model, frames) -> dict[int, dict[str, torch.Tensor]]:
    """Every decoder block's linears: the largest |input| per input channel over `frames` (fp32, whole model)."""
    from .stages import reference_forward
    ranges: dict[int, dict[str, torch.Tensor]] = {}
    hooks = []
    for i, block in enumerate(model.decoder.layers):
        for name in linear_names(block):
            def record(_module, args, i=i, name=name):
                seen = args[0].detach().abs().float().reshape(-1, args[0].shape[-1]).amax(dim=0)   # (K,)
                old = ranges.setdefault(i, {}).get(name)
                ranges[i][name] = seen if old is None else torch.maximum(old, seen)
            hooks.append(block.get_submodule(name).register_forward_pre_hook(record))
    try:
        for frame in frames:
            reference_forward(model, frame)
    finally:
        for hook in hooks:
            hook.remove()
    return ranges


def smoothing_scales(model, ranges: dict[int, dict[str, torch.Tensor]], alpha: float = ALPHA) -> dict:
    """SmoothQuant's s = max|X|^a / max|W|^(1-a) per input channel, clamped to SCALE_RANGE (1 where unseen)."""
    scales: dict[int, dict[str, torch.Tensor]] = {}
    for i, block in ranges.items():
        for name, x_max in block.items():
            w_max = model.decoder.layers[i].get_submodule(name).weight.detach().abs().float().amax(dim=0)  # (K,)
            s = x_max.clamp_min(1e-8).pow(alpha) / w_max.clamp_min(1e-8).pow(1 - alpha)
            s = torch.where(x_max > 0, s, torch.ones_like(s)).clamp(*SCALE_RANGE)
            scales.setdefault(i, {})[name] = s
    return scales


@torch.inference_mode()
def trajectory_deviation(model, frames, calibration: Int8Calibration | None) -> tuple[float, float]:
    """int8 (with `calibration`'s smoothing, or none) against fp32, at partition 0 -> (mean, max) metres."""
    from .placement import Placement
    from .stages import PrefixStage, SuffixStage
    previous = calibration_of(model)
    model.int8_calibration, model.int8_calibration_read = calibration, True
    try:
        prefix = PrefixStage(model, 0)
        fp32, int8 = SuffixStage(model, 0), SuffixStage(model, 0, Placement.create("cpu", "fp32", "int8"))
        distances = []
        for frame in frames:
            state = prefix.run(frame)
            a, b = fp32.run(state).points[:, :2], int8.run(state).points[:, :2]
            distances.append(np.linalg.norm(a - b, axis=-1))                          # (N,)
    finally:
        model.int8_calibration = previous
    return float(np.mean([d.mean() for d in distances])), float(max(d.max() for d in distances))


def calibrate(model, frames, source: str = "", alpha: float = ALPHA) -> Int8Calibration:
    """Smoothing scales from `frames`, kept only where they lower the measured int8 deviation."""
    frames = list(frames)
    expect(model.spec.action_head == "waypoints", ConfigError,
           f"calibrate: model '{model.spec.name}' decodes action tokens; int8 calibration measures waypoint "
           f"trajectories (an action-token model's int8 suffix runs unsmoothed)")
    expect(len(frames) > 0, ConfigError, "calibrate: no frames to calibrate on")
    plain = trajectory_deviation(model, frames, None)
    smoothed = Int8Calibration(len(frames), 0.0, 0.0, plain[0], source, alpha,
                               smoothing_scales(model, activation_ranges(model, frames), alpha))
    smoothed.deviation_m, smoothed.max_deviation_m = trajectory_deviation(model, frames, smoothed)
    if smoothed.deviation_m < plain[0]:
        return smoothed
    return Int8Calibration(len(frames), plain[0], plain[1], plain[0], source, alpha)
