"""The per-layer pieces both sides of a split Alpamayo frame run, each doing what transformers' Qwen3-VL forward
does over all layers (Qwen3VLModel.forward, Qwen3VLTextModel.forward), over one side's share: the prompt's
embeddings with the image features and DeepStack, a range of VLM blocks on that side's cache, the VLM's head,
a range of expert layers over that side's cache, the expert's head. Same modules, same inputs, same order of
operations as the unsplit model: the split's outputs equal the reference's bit for bit."""

from __future__ import annotations

import torch
from transformers.masking_utils import create_causal_mask

from ...model.plugins.alpamayo.decode import Prompt
from ...model.plugins.alpamayo.expert import expert_mask, expert_positions, restore
from ...types import DeepStack


def embed_prompt(vlm, prompt: Prompt, vision=None) -> tuple[torch.Tensor, DeepStack | None]:
    """-> the prompt's embeddings (1, S, H) with the image features in place, and DeepStack from block 0. vision: a
    VisionCache (vision_cache.py) keeping each keyed image's encoding; None or a prompt without keys: all encoded."""
    model = vlm.model
    embeds = model.get_input_embeddings()(prompt.input_ids)                                # (1, S, H)
    if vision is not None and prompt.image_keys is not None:
        features, additions = vision.encode(model, prompt)                                  # (n, H), k x (n, H)
    else:
        image = model.get_image_features(prompt.pixel_values, prompt.image_grid_thw, return_dict=True)
        features = torch.cat(image.pooler_output, dim=0)                                    # (n, H)
        additions = [torch.cat(per_layer, dim=0) for per_layer in image.deepstack_features]  # k x (n, H)
    features = features.to(embeds.device, embeds.dtype)
    mask, _ = model.get_placeholder_mask(prompt.input_ids, inputs_embeds=embeds, image_features=features)
    embeds = embeds.masked_scatter(mask, features)                                         # (1, S, H)
    if not additions:
        return embeds, None
    positions = mask[0, :, 0].nonzero().squeeze(-1)                                        # (n,)
    return embeds, DeepStack(positions, torch.stack(additions), 0)                          # (k, n, H)


def run_vlm_blocks(text_model, first: int, count: int, hidden: torch.Tensor, positions: torch.Tensor, cache,
                   prompt: bool, deepstack: DeepStack | None = None) -> torch.Tensor:
    """VLM blocks first .. first + count - 1 on hidden (1, T, H) at M-RoPE ids (3, 1, T), appending to their
    layers of `cache`; DeepStack added after the blocks it names. `prompt`: the prefill's all-ones padding mask
    (the reference passes one), else none (text fed on top)."""
    hidden = hidden.to(text_model.norm.weight.dtype)   # rows of a side in another dtype: this side's (meta or not)
    if count == 0:
        return hidden
    padding = torch.ones(hidden.shape[:2], dtype=torch.long) if prompt else None           # (1, T)
    mask = create_causal_mask(config=text_model.config, inputs_embeds=hidden, attention_mask=padding, cache=cache,
                              position_ids=None, layer_idx=first)   # sized against this side's first layer
    cos_sin = text_model.rotary_emb(hidden, positions)                                     # 2 x (1, T, head_dim)
    for index in range(first, first + count):
        hidden = text_model.layers[index](hidden, attention_mask=mask, position_ids=None, cache=cache,
                                          position_embeddings=cos_sin)                      # (1, T, H)
        if deepstack is not None:
            hidden = deepstack.after_block(index, hidden)
    return hidden


def vlm_logits(vlm, hidden: torch.Tensor) -> torch.Tensor:
    """hidden (1, T, H) after the last block -> the last position's logits (V,): norm, then lm_head."""
    normed = vlm.model.language_model.norm(hidden)                                          # (1, T, H)
    return vlm.lm_head(normed[:, -1:, :])[0, -1]                                           # (V,)


class ExpertSpan:
    """One cache as the expert sees it (expert.py ExpertContext's positions and mask): the action tokens at
    text positions offset + j, cached tokens from `offset` on hidden, the action tokens non-causal."""

    def __init__(self, cache, length: int, offset: int, rope_delta: int, n: int, dtype: torch.dtype,
                 device: torch.device | None = None):
        self.cache, self.length = cache, length
        self.positions = expert_positions(offset, rope_delta, n).to(device)               # (3, 1, n)
        self.mask = expert_mask(length, offset, n, dtype).to(device)                      # (1, 1, n, length + n)


def run_expert_blocks(expert, first: int, count: int, hidden: torch.Tensor, span: ExpertSpan) -> torch.Tensor:
    """Expert layers first .. first + count - 1 on hidden (1, n, H_e), layer i over the span's cache layer i;
    the cache back to its length afterwards."""
    hidden = hidden.to(expert.norm.weight.dtype)
    if count == 0:
        return hidden
    cos_sin = expert.rotary_emb(hidden, span.positions)                                    # 2 x (1, n, head_dim)
    try:
        for index in range(first, first + count):
            hidden = expert.layers[index](hidden, attention_mask=span.mask, position_ids=None, cache=span.cache,
                                          position_embeddings=cos_sin)                      # (1, n, H_e)
    finally:
        restore(span.cache, span.length)
    return hidden


def expert_velocity(model, hidden: torch.Tensor) -> torch.Tensor:
    """hidden (1, n, H_e) after the last expert layer -> velocity (1, n, 2) fp32: norm, action_out_proj."""
    return model.action_out_proj(model.expert.norm(hidden)).float()


class Stream:
    """One prompt's cache on one side: its prompt length, M-RoPE delta and current length (prompt + fed)."""

    def __init__(self, cache, prompt_len: int, rope_delta: int):
        self.cache, self.prompt_len, self.rope_delta, self.length = cache, prompt_len, rope_delta, prompt_len


def expert_spans(streams: dict, tokens: int, n: int, dtype: torch.dtype,
                 device: torch.device | None = None) -> list[ExpertSpan]:
    """The guided cache's span (offset: right after the `tokens` sampled), then 1.5's route-free one when
    present (the same offset past its own, shorter prompt), as reference.py builds their ExpertContexts; their
    positions and masks on `device` (the side's; None: where they are made, the CPU)."""
    guided = streams[0]
    offset = guided.prompt_len + tokens
    spans = [ExpertSpan(guided.cache, guided.length, offset, guided.rope_delta, n, dtype, device)]
    if 1 in streams:
        free = streams[1]
        spans.append(ExpertSpan(free.cache, free.length, offset - guided.prompt_len + free.prompt_len,
                                free.rope_delta, n, dtype, device))
    return spans
