"""The action expert (alpamayo_r1/models/alpamayo_r1.py): a Qwen3-VL text decoder built from the VLM's text config
with `expert_cfg` set on it, without token embeddings (its inputs are the projected noisy actions). Its layer i
appends the action tokens' keys/values to the VLM's layer-i cache and attends over both: the prompt + reasoning up
to `<|traj_future_start|>` and all N action tokens (no causal mask among them); the cache is cropped back after
every call. Positions continue the text after `<|traj_future_start|>` on all three M-RoPE rows."""

from __future__ import annotations

import torch
from torch import nn


def build_expert(config) -> nn.Module:
    """Qwen3VLTextModel(config) without `embed_tokens` (keys: expert.layers.*, expert.norm.weight)."""
    from transformers.models.qwen3_vl.modeling_qwen3_vl import Qwen3VLTextModel
    expert = Qwen3VLTextModel(config)
    del expert.embed_tokens
    return expert


def expert_positions(offset: int, rope_delta: int, n: int) -> torch.Tensor:
    """Action token j sits at text position offset + j (+ the prompt's M-RoPE delta) -> (3, 1, n)."""
    return (torch.arange(n) + offset + rope_delta).view(1, 1, n).expand(3, 1, n).clone()


def expert_mask(cache_len: int, offset: int, n: int, dtype: torch.dtype) -> torch.Tensor:
    """(1, 1, n, cache_len + n) additive mask: 0 = attend; cached tokens after `<|traj_future_start|>` (index >=
    offset) hidden; the action tokens see each other both ways."""
    mask = torch.zeros(1, 1, n, cache_len + n, dtype=dtype)
    mask[..., offset:cache_len] = torch.finfo(dtype).min
    return mask


def restore(cache, length: int) -> None:
    """Every layer of the cache back to `length` tokens (the expert's own keys/values dropped), whatever layers
    a failed call reached."""
    for layer in cache.layers:
        extra = layer.get_seq_length() - length if layer.is_initialized else 0
        if extra > 0:
            layer.crop(-extra)


class ExpertContext:
    """One prompt's cache and the expert's positions and mask over it: the velocity of the flow at (x, t)."""

    def __init__(self, model, cache, offset: int, rope_delta: int):
        self.model, self.cache = model, cache
        self.prefix_len = cache.get_seq_length()
        n = model.action_space.n_waypoints
        self.positions = expert_positions(offset, rope_delta, n)                          # (3, 1, n)
        self.mask = expert_mask(self.prefix_len, offset, n, model.expert_dtype)           # (1, 1, n, L + n)

    def velocity(self, x: torch.Tensor, t: torch.Tensor) -> torch.Tensor:
        """x (B, n, 2), t (B, 1, 1) -> (B, n, 2); the cache is as before afterwards."""
        b, n = x.shape[0], x.shape[1]
        embeds = self.model.action_in_proj(x, t)                                           # (B, n, H_e)
        try:
            out = self.model.expert(inputs_embeds=embeds, position_ids=self.positions.expand(3, b, n),
                                    attention_mask=self.mask.expand(b, -1, -1, -1), cache=self.cache,
                                    use_cache=True)
        finally:
            restore(self.cache, self.prefix_len)
        hidden = out.last_hidden_state[:, -n:]                                             # (B, n, H_e)
        return self.model.action_out_proj(hidden).float()                                  # (B, n, 2)
