"""Proof that the cut changes nothing: split output vs HF's unsplit forward, for every partition point."""

from __future__ import annotations

import numpy as np

from ..model.inputs import synthetic_frame
from ..model.vla import VLAModel
from .placement import DTYPE_NAMES, Placement
from .stages import PrefixStage, SuffixStage, reference_forward


def verify_partitions(model: VLAModel, placement: Placement = Placement(), frames: int = 2) -> dict:
    """A scene encoder's memory is reset before the reference run and before each cut's: every run sees the same
    frames in the same order from an empty memory (frames > 1 then checks that memory, too)."""
    samples = [synthetic_frame(model.spec, seq) for seq in range(frames)]
    model.reset_memory("verify")
    references = [reference_forward(model, frame) for frame in samples]
    results = []
    for partition in range(model.num_blocks + 1):
        prefix, suffix = PrefixStage(model, partition, placement), SuffixStage(model, partition, placement)
        prefix.model.reset_memory("verify")
        hidden_diff = traj_diff = extras_diff = 0.0
        for frame, (ref_hidden, ref_traj) in zip(samples, references):
            hidden, traj = suffix.forward(prefix.run(frame))
            hidden_diff = max(hidden_diff, (hidden.float().cpu() - ref_hidden.float()).abs().max().item())
            traj_diff = max(traj_diff, float(np.abs(traj.points - ref_traj.points).max()))
            extras_diff = max(extras_diff, extras_difference(traj.extras, ref_traj.extras))
        results.append({"partition": partition, "max_abs_diff": max(hidden_diff, traj_diff, extras_diff),
                        "hidden_max_abs_diff": hidden_diff, "trajectory_max_abs_diff": traj_diff,
                        "extras_max_abs_diff": extras_diff})
    return {"preset": model.spec.name, "family": model.spec.family, "num_blocks": model.num_blocks,
            "dtype": DTYPE_NAMES[placement.prefix_dtype], "placement": placement.describe(), "frames": frames,
            "results": results, "max_abs_diff": max(r["max_abs_diff"] for r in results)}


def extras_difference(got: dict, want: dict) -> float:
    """A head's extras (decision labels, logits, a route, a mode) split vs unsplit: the largest numeric difference;
    inf when a label or the set of extras differs."""
    if got.keys() != want.keys():
        return float("inf")
    worst = 0.0
    for key, value in want.items():
        if isinstance(value, (str, bool)) or value is None:
            worst = max(worst, 0.0 if got[key] == value else float("inf"))
            continue
        a, b = np.asarray(got[key], dtype=np.float64), np.asarray(value, dtype=np.float64)
        worst = max(worst, float(np.abs(a - b).max()) if a.shape == b.shape and a.size else
                    (0.0 if a.shape == b.shape else float("inf")))
    return worst
