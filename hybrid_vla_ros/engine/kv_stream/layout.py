"""Streaming KV (issue 53, Deliver 3; opt-in, approximate): the layout of one window when past frames' KV are kept.

A window's prompt is the full layout (model/tokenize/prompt.py: [BOS] the image slots, camera-major, oldest first,
then the text, ego and query tokens). Each image slot's tokens form a *segment*. A segment computed in an earlier
window (when its frame was newer) may be *kept*: its keys and values, per block, stand in for computing its tokens
again. The window then computes only its *new* tokens (the images not kept, every marker and text token), each
attending to exactly the layout tokens before it (kept or new), as in the full layout: with nothing kept, the window
is the full recompute, bit for bit in its arithmetic order (the test checks it equal).

Where a kept segment sits now is not where it was computed (its frame has moved towards the oldest slot): its keys,
stored after the rotary embedding, are turned by the position difference (RoPE rotations add: R(a + d) = R(d) R(a),
M-RoPE's three components each), so attention sees every kept frame at its present position. What stays
approximate is the context: a kept frame's states were computed attending to the frames of its own window (older
ones, now dropped), not to those before it in this one, which is what FlashDrive's streaming layout accepts too.
"""

from __future__ import annotations

import torch

from ...errors import ConfigError, expect

ADDITIVE_ROPE = ("default", "linear", "llama3")   # rope types whose rotation by a + d equals d's after a's


def image_spans(input_ids: torch.Tensor, image_token_id: int, slots: int) -> list[tuple[int, int]]:
    """input_ids (S,) -> each image slot's token span [start, end), in prompt order (contiguous runs of the image
    token; `slots` of them)."""
    is_image = (input_ids == image_token_id).to(torch.int8)
    edges = torch.diff(is_image, prepend=is_image.new_zeros(1), append=is_image.new_zeros(1))
    starts, ends = (edges == 1).nonzero().squeeze(-1).tolist(), (edges == -1).nonzero().squeeze(-1).tolist()
    expect(len(starts) == slots, ConfigError,
           f"streaming KV: the prompt holds {len(starts)} runs of image tokens, the model has {slots} image slots")
    return list(zip(starts, ends))


def prompt_spans(model) -> list[tuple[int, int]]:
    """Each image slot's token span in the model's prompt (the same for every frame: a fixed layout)."""
    spec = model.spec
    blocks, per_block = model.family.image_blocks(spec)
    ids, _ = model.prompt.build(blocks, per_block, "", spec.text_tokens, 0.0, 0.0, spec.query_tokens,
                                spec.slot_tokens)
    return image_spans(ids[0], model.prompt.image_token_id, spec.image_slots)


def new_token_index(seq_len: int, kept_spans: list[tuple[int, int]]) -> torch.Tensor:
    """-> (n_new,) ascending indices of the tokens outside the kept spans."""
    new = torch.ones(seq_len, dtype=torch.bool)
    for start, end in kept_spans:
        new[start:end] = False
    return new.nonzero().squeeze(-1)


def span_index(spans: list[tuple[int, int]]) -> torch.Tensor:
    """-> (n,) the token indices of the spans, in order."""
    return torch.cat([torch.arange(a, b) for a, b in spans]) if spans else torch.zeros(0, dtype=torch.long)


def layout_mask(key_index: torch.Tensor, query_index: torch.Tensor, config, dtype: torch.dtype) -> torch.Tensor:
    """Layout-causal attention of the new tokens (query_index (q,)) over keys at key_index (k,) (kept then new):
    a query sees every key at or before it in the full layout -> (1, 1, q, k) as the attention implementation takes
    it (boolean for sdpa; additive for eager)."""
    allowed = key_index.unsqueeze(0) <= query_index.unsqueeze(1)                      # (q, k)
    if config._attn_implementation == "sdpa":
        return allowed[None, None]
    blocked = torch.full(allowed.shape, torch.finfo(dtype).min, dtype=dtype)
    return torch.where(allowed, torch.zeros((), dtype=dtype), blocked)[None, None]


def check_attention(config, where: str) -> None:
    """The layout mask is handed to the attention as a tensor: sdpa or eager (flash attention takes none)."""
    expect(config._attn_implementation in ("sdpa", "eager"), ConfigError,
           f"{where}: attention implementation {config._attn_implementation!r}: streaming KV hands the attention a "
           f"layout mask, which sdpa and eager take")


def check_rotary(decoder, where: str) -> None:
    """Kept keys are turned by a position difference: the rotary embedding must be a pure rotation that adds."""
    rotary = decoder.rotary_emb
    rope_type = getattr(rotary, "rope_type", "default")
    expect(rope_type in ADDITIVE_ROPE and float(getattr(rotary, "attention_scaling", 1.0)) == 1.0, ConfigError,
           f"{where}: rope type {rope_type!r} with scaling {getattr(rotary, 'attention_scaling', 1.0)}: streaming KV "
           f"turns kept keys by a position difference, which needs a plain rotation ({', '.join(ADDITIVE_ROPE)})")


def turning(decoder, computed_at: torch.Tensor, now_at: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """The rotation from positions computed_at to now_at ((3, 1, n) or (1, n)) -> (cos, sin), each (1, 1, n, D) in
    fp32, for turn(); computed once per kept segment and window, used by every block."""
    probe = torch.empty(0, dtype=torch.float32, device=now_at.device)
    cos, sin = decoder.rotary_emb(probe, now_at - computed_at)                         # (1, n, D) each
    return cos.unsqueeze(1), sin.unsqueeze(1)


def turn(key: torch.Tensor, rotation: tuple[torch.Tensor, torch.Tensor]) -> torch.Tensor:
    """key (1, kv_heads, n, D), rotated at the positions a turning() starts from -> rotated at where it ends (the
    arithmetic in fp32, the result in the key's dtype)."""
    cos, sin = rotation
    k = key.float()
    half = k.shape[-1] // 2
    turned = torch.cat((-k[..., half:], k[..., :half]), dim=-1)                      # rotate_half
    return (k * cos + turned * sin).to(key.dtype)


def rerotate(decoder, key: torch.Tensor, computed_at: torch.Tensor, now_at: torch.Tensor) -> torch.Tensor:
    """key (1, kv_heads, n, D), rotated at positions computed_at -> rotated at now_at."""
    return turn(key, turning(decoder, computed_at, now_at))
