"""Proof that the cut changes nothing for an action-token model: ActionFlow's packed decoding split at every
partition point (prefix side blocks [0, p), suffix side [p, L) and the head's action rows, in one process) against
sequential decoding (transformers' layers and cache, one frame at a time: reference.py). A frame's tokens are the
argmax of its logits, so the two agree exactly or not at all; its trajectory follows from its tokens
(model/tokenize/action_tokens.py), so its difference is 0.0 where the tokens are equal. The logits themselves run
other kernels on each path and agree to rounding only (test/greedy_reference.py measures that margin)."""

from __future__ import annotations

import numpy as np

from ...errors import ConfigError, expect
from ...model.inputs import synthetic_frame
from ...model.vla import VLAModel
from .packing import ActionFlow
from .reference import sequential_results


def verify_token_partitions(model: VLAModel, frames: int = 2, pack: int = 2) -> dict:
    """-> per partition p in 0..L: frames whose tokens differ from sequential decoding's, and the largest
    trajectory difference (inf where a frame's tokens differ, or it failed)."""
    expect(frames >= 1 and pack >= 1, ConfigError, f"{frames} frame(s), pack {pack}: the check needs at least one of each")
    samples = [synthetic_frame(model.spec, seq) for seq in range(frames)]
    reference = {r.seq: r for r in sequential_results(model, samples)}
    results = []
    for partition in range(model.num_blocks + 1):
        got = {r.seq: r for r in ActionFlow(model, pack, partition=partition).run(samples)}
        differing = [seq for seq, ref in reference.items() if seq not in got or got[seq].tokens != ref.tokens]
        diff = float("inf") if differing else max(trajectory_difference(got[s], reference[s]) for s in reference)
        results.append({"partition": partition, "max_abs_diff": diff, "trajectory_max_abs_diff": diff,
                        "frames_with_other_tokens": differing})
    return {"preset": model.spec.name, "family": model.spec.family, "num_blocks": model.num_blocks, "dtype": "fp32",
            "placement": "both sides on the CPU, in this process", "frames": frames, "pack": pack,
            "answer": "text" if model.spec.action_head == "text" else "action tokens",
            "tokens_per_frame": {seq: len(r.tokens) for seq, r in reference.items()},
            "results": results, "max_abs_diff": max(r["max_abs_diff"] for r in results)}


def trajectory_difference(got, want) -> float:
    """The largest |difference| of two results' trajectory points; inf where either has none."""
    if got.trajectory is None or want.trajectory is None:
        return float("inf")
    a, b = got.trajectory.points, want.trajectory.points
    return float(np.abs(a - b).max()) if a.shape == b.shape else float("inf")
