"""ActionFlow's baseline and exactness reference: one frame at a time, plain prefill then decode steps of batch 1
by the same decode policy (engine/decode/: greedy or the frame's seeded draws, stop ids, max_tokens), through
transformers' own decoder layers and DynamicCache (what a user without ActionFlow runs). Every packed
arrangement, unsplit or cut at any p, must give exactly these tokens."""

from __future__ import annotations

import time

import torch

from ...model.vla import VLAModel
from ...types import Frame
from ...model.inputs import encode_frame
from ..decode.decoder import TokenDecoder
from ..decode.policy import DecodePolicy
from .packing import ActionResult


@torch.inference_mode()
def sequential_tokens(model: VLAModel, frame: Frame, decode: DecodePolicy | TokenDecoder | None = None) -> list[int]:
    """Plain prefill through the backbone's own HF forward (its vision encoder, DeepStack, M-RoPE), then one
    decode step of batch 1 per token through the HF decoder with a transformers DynamicCache, each token fed
    back, until the policy ends the frame (default: greedy over the action tokens, the model's action length)."""
    from transformers import DynamicCache
    tokens_of = decode if isinstance(decode, TokenDecoder) else TokenDecoder(model, decode)
    head = tokens_of.head(model)
    encoded = encode_frame(frame, model)
    ids = encoded.input_ids                                                             # (1, S)
    cache = DynamicCache(config=model.decoder.config)
    out = model.backbone(input_ids=ids, attention_mask=torch.ones_like(ids), cache=cache, use_cache=True,
                         **model.family.reference_kwargs(encoded.pixels, encoded.mm_token_type_ids))
    positions = model.family.position_ids(model.backbone, ids, encoded.mm_token_type_ids, encoded.pixels)
    hidden, position = out.last_hidden_state, int(positions.max()) + 1                  # normed (1, S, H)
    tokens: list[int] = []
    while True:
        logits = tokens_of.logits(head, hidden[:, -1])                                   # (1, V)
        tokens.append(tokens_of.choose(logits[0].float(), frame.stamp_ns, len(tokens)))
        if tokens_of.ended(tokens):
            return tokens
        step = torch.full(model.family.position_ids_shape(1), position, dtype=torch.long)  # (3, 1, 1) or (1, 1)
        hidden = model.decoder(inputs_embeds=model.decoder.embed_tokens(torch.tensor([[tokens[-1]]])),
                               position_ids=step, cache=cache, use_cache=True).last_hidden_state
        position += 1


def sequential_results(model: VLAModel, frames, decode: DecodePolicy | None = None) -> list[ActionResult]:
    tokens_of = TokenDecoder(model, decode)
    out = []
    for frame in frames:
        t0 = time.perf_counter()
        tokens = sequential_tokens(model, frame, tokens_of)
        out.append(tokens_of.result(tokens, frame.seq, frame.stamp_ns, model.num_blocks, time.perf_counter() - t0))
    return out
