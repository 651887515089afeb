"""ActionFlow's baseline and exactness reference: one frame at a time, plain prefill then T - 1 greedy decode
steps of batch 1, through transformers' own decoder layers and DynamicCache (what a user without ActionFlow
runs). Every packed arrangement must give exactly these tokens."""

from __future__ import annotations

import time

import torch

from ...model.vla import VLAModel
from ...types import Frame, Trajectory
from ..stages import frame_embeddings
from .packing import ActionResult

@torch.inference_mode()
def sequential_tokens(model: VLAModel, frame: Frame) -> list[int]:
    """Plain prefill, then T - 1 greedy decode steps of batch 1, through the decoder layers with a
    transformers DynamicCache (what a user without ActionFlow runs)."""
    from transformers import DynamicCache
    from transformers.masking_utils import create_causal_mask
    decoder, tokenizer = model.decoder, model.action_tokenizer
    embeds, positions, ids = frame_embeddings(model, frame)                           # (1, S, H), (.., 1, S)
    cache = DynamicCache(config=decoder.config)
    mask = create_causal_mask(config=decoder.config, inputs_embeds=embeds, attention_mask=torch.ones_like(ids),
                              cache=None, position_ids=None)
    hidden, position = embeds, int(positions.max()) + 1
    tokens: list[int] = []
    while True:
        rope = decoder.rotary_emb(hidden, positions)
        for block in decoder.layers:
            hidden = block(hidden, attention_mask=mask, position_embeddings=rope, cache=cache, use_cache=True)
        logits = model.action_head(decoder.norm(hidden[:, -1]))                         # (1, bins)
        tokens.append(tokenizer.base + int(logits.argmax(dim=-1)))
        if len(tokens) == tokenizer.tokens_per_frame:
            return tokens
        hidden = decoder.embed_tokens(torch.tensor([[tokens[-1]]]))                     # (1, 1, H)
        positions = torch.full(model.family.position_ids_shape(1), position, dtype=torch.long)
        position, mask = position + 1, None                                            # one row sees all keys


def sequential_results(model: VLAModel, frames) -> list[ActionResult]:
    out = []
    for frame in frames:
        t0 = time.perf_counter()
        tokens = sequential_tokens(model, frame)
        points = model.action_tokenizer.waypoints(tokens)
        out.append(ActionResult(frame.seq, frame.stamp_ns, tokens,
                                Trajectory(points=points, seq=frame.seq, stamp_ns=frame.stamp_ns,
                                           partition=model.num_blocks), time.perf_counter() - t0))
    return out
