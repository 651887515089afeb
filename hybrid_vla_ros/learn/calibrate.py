"""`hybrid-vla calibrate`'s measurement (issue 40): SmoothQuant smoothing scales for an int8 suffix from
recorded frames, and the trajectory deviation int8 causes on them (engine/int8_calibration.py: the file).

Smoothing (Xiao et al., SmoothQuant, 2023): per input channel j of a linear, s_j = max|X_j|^a / max|W_j|^(1-a)
(a = ALPHA): activations divided by s, weight columns multiplied by s, so activation outliers move into the
per-channel-quantized weight. Kept only where it lowers the measured deviation.

The deviation: every frame through the whole model at partition 0 (every block on the suffix side, the worst
case for any cut), the int8 suffix as it runs on this CPU (engine/placement.py int8_rest_dtype) against fp32:
the mean over frames of the mean waypoint distance (metres, x/y), and the largest waypoint distance seen.
"""

from __future__ import annotations

import numpy as np
import torch

from ..engine.int8 import linear_names
from ..engine.int8_calibration import ALPHA, Int8Calibration, calibration_of
from ..engine.placement import Placement, int8_flavour
from ..engine.stages import PrefixStage, SuffixStage, reference_forward
from ..errors import ConfigError, expect

SCALE_RANGE = (1e-4, 1e4)


@torch.inference_mode()
def activation_ranges(model, frames) -> dict[int, dict[str, torch.Tensor]]:
    """Every decoder block's linears: the largest |input| per input channel over `frames` (fp32, whole model)."""
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
    smoothed = Int8Calibration(len(frames), 0.0, 0.0, plain[0], int8_flavour(), source, alpha,
                               smoothing_scales(model, activation_ranges(model, frames), alpha))
    smoothed.deviation_m, smoothed.max_deviation_m = trajectory_deviation(model, frames, smoothed)
    if smoothed.deviation_m < plain[0]:
        return smoothed
    return Int8Calibration(len(frames), plain[0], plain[1], plain[0], int8_flavour(), source, alpha)
