"""ActionFlow's baseline and exactness reference: one frame at a time, plain prefill then T - 1 greedy decode
steps of batch 1, through transformers' own decoder layers and DynamicCache (what a user without ActionFlow
runs). Every packed arrangement must give exactly these tokens."""

from __future__ import annotations

import time

import torch

from ...model.vla import VLAModel
from ...types import Frame, Trajectory
from ...model.inputs import encode_frame
from .packing import ActionResult

@torch.inference_mode()
def sequential_tokens(model: VLAModel, frame: Frame) -> list[int]:
    """Plain prefill through the backbone's own HF forward (its vision encoder, DeepStack, M-RoPE), then T - 1
    greedy decode steps of batch 1 through the HF decoder with a transformers DynamicCache (what a user
    without ActionFlow runs)."""
    from transformers import DynamicCache
    tokenizer = model.action_tokenizer
    encoded = encode_frame(frame, model)
    ids = encoded.input_ids                                                             # (1, S)
    cache = DynamicCache(config=model.decoder.config)
    out = model.backbone(input_ids=ids, attention_mask=torch.ones_like(ids), cache=cache, use_cache=True,
                         **model.family.reference_kwargs(encoded.pixels, encoded.mm_token_type_ids))
    positions = model.family.position_ids(model.backbone, ids, encoded.mm_token_type_ids, encoded.pixels)
    hidden, position = out.last_hidden_state, int(positions.max()) + 1                  # normed (1, S, H)
    tokens: list[int] = []
    while True:
        logits = model.action_head(hidden[:, -1])                                        # (1, bins)
        tokens.append(tokenizer.base + int(logits.argmax(dim=-1)))
        if len(tokens) == tokenizer.tokens_per_frame:
            return tokens
        step = torch.full(model.family.position_ids_shape(1), position, dtype=torch.long)  # (3, 1, 1) or (1, 1)
        hidden = model.decoder(inputs_embeds=model.decoder.embed_tokens(torch.tensor([[tokens[-1]]])),
                               position_ids=step, cache=cache, use_cache=True).last_hidden_state
        position += 1


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
