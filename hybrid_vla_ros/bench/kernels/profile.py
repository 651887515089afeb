"""Per-block timing of a model on the current thread, and the balanced partition it implies."""

from __future__ import annotations

import statistics
import time

import torch

from ...engine.scheduling.costs import CostModel
from ...engine.cpu import core_plan, pinned
from ...engine.placement import Placement
from ...engine.stages import PrefixStage, SuffixStage
from ...model.inputs import synthetic_frame
from ...model.vla import VLAModel


def profile_blocks(model: VLAModel, placement: Placement = Placement(), frames: int = 3, warmup: int = 1) -> dict:
    """Median ms of: everything before block 0 ("embed": vision + embeddings + positions), each block,
    and the head (final norm + action head), measured with forward hooks on an unsplit prefix."""
    prefix = PrefixStage(model, model.num_blocks, placement)
    suffix = SuffixStage(model, model.num_blocks, placement)
    marks: list[float] = []
    hooks = [block.register_forward_pre_hook(lambda *_: marks.append(time.perf_counter())) for block in prefix.blocks]
    hooks.append(prefix.blocks[-1].register_forward_hook(lambda *_: marks.append(time.perf_counter())))
    embed, blocks, head = [], [[] for _ in prefix.blocks], []
    try:
        for seq in range(warmup + frames):
            marks.clear()
            frame = synthetic_frame(model.spec, seq)
            t0 = time.perf_counter()
            state = prefix.run(frame)
            t1 = time.perf_counter()
            suffix.run(state)
            t2 = time.perf_counter()
            if seq < warmup:
                continue
            embed.append((marks[0] - t0) * 1e3)
            for i in range(len(blocks)):
                blocks[i].append((marks[i + 1] - marks[i]) * 1e3)
            head.append((t2 - t1) * 1e3)
    finally:
        for hook in hooks:
            hook.remove()
    return {"embed_ms": statistics.median(embed), "block_ms": [statistics.median(b) for b in blocks],
            "head_ms": statistics.median(head), "threads": torch.get_num_threads()}


def seed_cost_model(model: VLAModel, placement: Placement, prefix_cores, suffix_cores, frames: int = 2) -> CostModel:
    """Profile the prefix on its cores and the suffix on its cores (a `hybrid-vla profile` in miniature)."""
    with pinned(prefix_cores):
        prefix = profile_blocks(model, Placement(placement.prefix_device, placement.prefix_dtype,
                                                 placement.prefix_dtype), frames)
    with pinned(suffix_cores):
        suffix = profile_blocks(model, Placement(prefix_dtype=placement.suffix_dtype,
                                                 suffix_dtype=placement.suffix_dtype), frames)
    return CostModel.from_profiles(prefix, suffix, handover_ms=0.0, tokens=1)


def profile_report(model: VLAModel, placement: Placement, frames: int = 3, progress=None) -> dict:
    """Per-block times on each device, the handover cost, and the CPU suffix's bf16 speed-up and accuracy.
    The prefix is profiled on the prefix's cores in the prefix dtype; the suffix on the suffix's cores in
    fp32 and in bf16 (the stages convert copies: `model` keeps its dtype)."""
    import numpy as np

    from ...engine.cpu import cpu_backend_report
    from ...engine.stages import reference_forward
    from ..handover import handover_microbench
    prefix_cores, suffix_cores, devices = core_plan(placement)
    progress = progress or (lambda text: None)
    progress(f"prefix blocks on cores {prefix_cores}")
    with pinned(prefix_cores):
        prefix = profile_blocks(model, Placement(placement.prefix_device, placement.prefix_dtype,
                                                 placement.prefix_dtype), frames)
    progress(f"suffix blocks (fp32, bf16) on cores {suffix_cores}")
    with pinned(suffix_cores):
        suffix = {name: profile_blocks(model, Placement(prefix_dtype=dtype, suffix_dtype=dtype), frames)
                  for name, dtype in (("fp32", torch.float32), ("bf16", torch.bfloat16))}
    state = PrefixStage(model, model.num_blocks // 2).run(synthetic_frame(model.spec, 0))
    progress("handover and bf16 accuracy")
    handover = handover_microbench(tokens=state.hidden.shape[1], hidden=state.hidden.shape[2], repeats=20)
    # Accuracy cost of the bf16 suffix: the same frames, unsplit fp32 vs suffix in bf16 at the middle cut.
    p = model.num_blocks // 2
    pre, suf = PrefixStage(model, p), SuffixStage(model, p, Placement(suffix_dtype=torch.bfloat16))
    diffs = []
    for seq in range(frames):
        frame = synthetic_frame(model.spec, seq)
        _, ref = reference_forward(model, frame)
        diffs.append(float(np.abs(suf.run(pre.run(frame)).points - ref.points).max()))
    fp32_ms, bf16_ms = sum(suffix["fp32"]["block_ms"]), sum(suffix["bf16"]["block_ms"])
    return {"preset": model.spec.name, "num_blocks": model.num_blocks, "tokens": state.hidden.shape[1],
            "devices": devices, "prefix": prefix, "suffix": suffix,
            "handover": {"boundary_bytes": handover["bytes"], **{k: v for k, v in handover.items() if k != "bytes"}},
            "cpu_backend": cpu_backend_report(torch.bfloat16),
            "suffix_bf16_speedup_vs_fp32": fp32_ms / bf16_ms,
            "bf16_trajectory_max_abs_diff": max(diffs),
            "balanced_partition": {f"{name}_suffix": balanced_partition(prefix, suffix[name]) for name in suffix}}


def balanced_partition(prefix_profile: dict, suffix_profile: dict, handover_ms: float = 0.0) -> int:
    """The p minimising the pipelined period for these per-side costs (the cost model's own formula)."""
    costs = CostModel.from_profiles(prefix_profile, suffix_profile, handover_ms, tokens=1)
    return min(range(costs.num_blocks + 1), key=costs.period_ms)
