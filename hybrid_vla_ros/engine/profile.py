"""Per-block timing of a model on the current thread, and the balanced partition it implies."""

from __future__ import annotations

import statistics
import time

import torch

from ..model.inputs import synthetic_frame
from ..model.vla import VLAModel
from .placement import Placement
from .stages import PrefixStage, SuffixStage


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


def balanced_partition(profile: dict, handover_ms: float = 0.0) -> int:
    """The p minimising the pipelined period max(prefix, handover + suffix) for these costs."""
    blocks = profile["block_ms"]
    def period(p: int) -> float:
        return max(profile["embed_ms"] + sum(blocks[:p]), handover_ms + sum(blocks[p:]) + profile["head_ms"])
    return min(range(len(blocks) + 1), key=period)
