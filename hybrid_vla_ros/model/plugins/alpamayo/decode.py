"""The VLM's prefill and its sampled reasoning decode, as the releases run them through `generate`
(alpamayo_r1/models/alpamayo_r1.py: do_sample, temperature 0.6, top-p 0.98, no top-k; the discrete trajectory
tokens <i0> .. never sampled (ExpertLogitsProcessor; Alpamayo 2 Super also its text end ids); stop at
`<|traj_future_start|>`, which still enters the cache (StopAfterEOS) unless it is the max_new_tokens-th token). Sampling draws from a seeded CPU generator: one seed, one decode."""

from __future__ import annotations

from dataclasses import dataclass

import torch

from ....errors import ConfigError, expect


@dataclass(frozen=True)
class Sampling:
    temperature: float = 0.6
    top_p: float = 0.98
    max_new_tokens: int = 256

    def check(self) -> None:
        expect(self.temperature > 0, ConfigError, f"sampling: temperature={self.temperature}, expected > 0")
        expect(0 < self.top_p <= 1, ConfigError, f"sampling: top_p={self.top_p}, expected in (0, 1]")
        expect(self.max_new_tokens >= 1, ConfigError, f"sampling: max_new_tokens={self.max_new_tokens}, expected >= 1")


@dataclass
class Prompt:
    """One prompt's tensors as the Qwen3-VL processor gives them (history tokens already fused)."""
    input_ids: torch.Tensor        # (1, S)
    pixel_values: torch.Tensor     # (P, 3 * temporal_patch * patch^2): every image's patches
    image_grid_thw: torch.Tensor   # (images, 3)
    image_keys: tuple | None = None   # one key per image (camera, stamp): its encoding may be kept (VisionCache)


@dataclass
class Decoded:
    tokens: list[int]              # sampled after the prompt; ends with the stop token when `stopped`
    stopped: bool
    cache: object                  # DynamicCache over prompt + tokens (the stop token included)
    rope_delta: int                # M-RoPE position of sequence index s: s + rope_delta


def filtered_logits(logits: torch.Tensor, banned: tuple[tuple[int, int], ...], sampling: Sampling) -> torch.Tensor:
    """(V,) -> (V,) fp32: the banned id spans [lo, hi) at -inf (AlpamayoConfig.banned), divided by the temperature,
    outside the top-p nucleus -inf (the smallest set of most likely tokens whose mass reaches top_p; the most likely
    always kept)."""
    out = logits.float().clone()
    for lo, hi in banned:
        out[lo:hi] = float("-inf")
    out = out / sampling.temperature
    if sampling.top_p < 1.0:
        ordered, order = torch.sort(out, descending=False)
        cum = ordered.softmax(-1).cumsum(-1)
        drop = cum <= 1 - sampling.top_p
        drop[-1] = False
        out[order[drop]] = float("-inf")
    return out


def sample(logits: torch.Tensor, banned: tuple[tuple[int, int], ...], sampling: Sampling,
           generator: torch.Generator) -> int:
    probs = filtered_logits(logits, banned, sampling).softmax(-1)                      # (V,)
    return int(torch.multinomial(probs.cpu(), 1, generator=generator))


def mm_token_types(input_ids: torch.Tensor, image_token_id: int) -> torch.Tensor:
    return (input_ids == image_token_id).int()                                          # (1, S): 1 = image


def prompt_positions(vlm, prompt: Prompt, image_token_id: int) -> tuple[torch.Tensor, torch.Tensor, int]:
    """-> the token types (1, S), the M-RoPE ids (3, 1, S) and the prompt's delta (max position + 1 - S)."""
    types = mm_token_types(prompt.input_ids, image_token_id)
    positions, deltas = vlm.model.get_rope_index(prompt.input_ids, types, prompt.image_grid_thw)   # (3, 1, S)
    return types, positions, int(deltas.view(-1)[0])


def text_positions(start: int, count: int, rope_delta: int) -> torch.Tensor:
    """Text tokens at sequence indices start .. start + count - 1 -> (3, 1, count), all rows equal."""
    return (torch.arange(count) + start + rope_delta).view(1, 1, -1).expand(3, 1, -1)


def prefill(vlm, prompt: Prompt, image_token_id: int, cache) -> tuple[torch.Tensor, int]:
    """-> the last position's logits (V,) and the prompt's M-RoPE delta (max position + 1 - S)."""
    types, positions, delta = prompt_positions(vlm, prompt, image_token_id)
    out = vlm(input_ids=prompt.input_ids, attention_mask=torch.ones_like(prompt.input_ids), position_ids=positions,
              pixel_values=prompt.pixel_values, image_grid_thw=prompt.image_grid_thw, mm_token_type_ids=types,
              cache=cache, use_cache=True, logits_to_keep=1)
    return out.logits[0, -1], delta


def feed(vlm, tokens: list[int], start: int, rope_delta: int, cache) -> torch.Tensor:
    """Text tokens at sequence indices start .. into the cache -> the last one's logits (V,)."""
    ids = torch.tensor([tokens], dtype=torch.long)                                       # (1, T)
    positions = text_positions(start, len(tokens), rope_delta)                            # (3, 1, T)
    return vlm(input_ids=ids, position_ids=positions, cache=cache, use_cache=True, logits_to_keep=1).logits[0, -1]


def verdict(tokens: list[int], stop_id: int, max_new_tokens: int) -> tuple[bool, bool]:
    """After sampling tokens[-1]: (feed it into the cache, the decode ends). The stop token is fed, then the
    decode ends (the releases' StopAfterEOS lets `generate` run one step more); the max_new_tokens-th token is never
    fed, the stop token or not (`generate` ends at the length before feeding it)."""
    stopped = tokens[-1] == stop_id
    return len(tokens) < max_new_tokens, stopped or len(tokens) >= max_new_tokens


def fed_tokens(tokens: list[int], max_new_tokens: int) -> list[int]:
    """The sampled tokens `verdict` fed into the cache: all but one at max_new_tokens."""
    return tokens[:-1] if len(tokens) >= max_new_tokens else list(tokens)


def new_cache(vlm):
    from transformers import DynamicCache
    return DynamicCache(config=vlm.config.get_text_config())


def decode(vlm, prompt: Prompt, image_token_id: int, stop_id: int, banned: tuple[int, int], sampling: Sampling,
           generator: torch.Generator) -> Decoded:
    """Prefill, then sample until the stop token (fed into the cache, then stop) or max_new_tokens (the last
    token not fed, as `generate` leaves it)."""
    sampling.check()
    cache = new_cache(vlm)
    logits, delta = prefill(vlm, prompt, image_token_id, cache)
    length, tokens = prompt.input_ids.shape[1], []
    while True:
        tokens.append(sample(logits, banned, sampling, generator))
        fed, done = verdict(tokens, stop_id, sampling.max_new_tokens)
        if fed:
            logits = feed(vlm, tokens[-1:], length + len(tokens) - 1, delta, cache)
        if done:
            return Decoded(tokens, tokens[-1] == stop_id, cache, delta)
