"""Chunked prefill across the cut (ROS-free): a frame's tokens cut into chunks that flow through both stages
like a pipeline inside the frame. The LLM is causal, so chunk i's blocks need only the keys and values of
chunks 0..i (a per-frame KV store on each side of the cut, `FrameKV`); the prefix hands over chunk i's
boundary state as soon as its blocks are done and goes on with chunk i + 1, the suffix runs its blocks on
chunk i and the head on the last chunk, which holds the query tokens.

    chunks = 1          today's unchunked path, bit-exact
    chunks = k (2..64)  k spans of near-equal token counts (the last holds the q query tokens)
    chunks = "camera"   a span per camera's image block (the last camera's with the text and query after it)

Latency then tends to max(prefix, suffix) x (1 + 1/k) instead of prefix + suffix.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import torch

from ..errors import ConfigError, expect
from ..types import DeepStack

PER_CAMERA = "camera"
MAX_CHUNKS = 64


def parse_chunks(value) -> int | str:
    """A `chunks` parameter value -> 1..MAX_CHUNKS or "camera"; anything else is refused with the reason."""
    if isinstance(value, str) and value.strip().lower() in (PER_CAMERA, "per_camera", "cameras"):
        return PER_CAMERA
    if isinstance(value, str) and value.strip().isdigit():
        value = int(value.strip())
    expect(isinstance(value, int) and not isinstance(value, bool) and 1 <= value <= MAX_CHUNKS, ConfigError,
           f"chunks={value!r}: expected an integer in 1..{MAX_CHUNKS} (token chunks per frame; 1 = unchunked) "
           f"or '{PER_CAMERA}' (one chunk per camera)")
    return value


def check_chunkable(model, chunks) -> None:
    """Chunked prefill needs a prompt the LLM attends to causally: a family whose mask lets earlier tokens see
    later ones (a prefix-LM mask over the image) cannot start the suffix before the whole prompt is there."""
    family = model.family
    expect(parse_chunks(chunks) == 1 or family.causal_prompt, ConfigError,
           f"chunks={chunks!r}: family '{family.name}' attends bidirectionally over part of its prompt (a prefix-LM "
           f"mask), so a chunk's hidden state depends on later chunks; keep chunks: 1")


def chunk_spans(model, input_ids: torch.Tensor, chunks) -> list[tuple[int, int]]:
    """input_ids (P, S) of a frame -> [(start, end), ...] covering [0, S) in order; the last span holds the head's
    q query tokens. Per camera: a span ends after each image block (a run of image tokens) but the last."""
    chunks = parse_chunks(chunks)
    seq_len, q = input_ids.shape[1], model.query_tokens
    if chunks == 1:
        return [(0, seq_len)]
    if chunks == PER_CAMERA:
        ends = image_block_ends(input_ids[0], model.prompt.image_token_id)
        expect(len(ends) >= 2, ConfigError,
               f"chunks='{PER_CAMERA}': the prompt of '{model.spec.name}' has {len(ends)} separate image block(s) (a "
               f"scene encoder fuses the cameras into one token set; a tokenizer without image start/end tokens "
               f"leaves the cameras' tokens adjacent); give a chunk count instead")
        cuts = ends[:-1]
    else:
        expect(seq_len - q + 1 >= chunks, ConfigError,
               f"chunks={chunks}: the prompt of '{model.spec.name}' has {seq_len} tokens, of which the last {q} "
               f"(query) must stay in one chunk; at most {seq_len - q + 1} chunks")
        cuts = [min(round(seq_len * i / chunks), seq_len - q - (chunks - 1 - i)) for i in range(1, chunks)]
    bounds = [0, *cuts, seq_len]
    return [(a, b) for a, b in zip(bounds, bounds[1:]) if b > a]


def chunk_count(model, chunks) -> int:
    """Boundary states per frame for this model and chunking (buffers and rings are sized by it)."""
    chunks = parse_chunks(chunks)
    check_chunkable(model, chunks)
    if chunks == 1:
        return 1
    spec = model.spec
    blocks, per_block = model.family.image_blocks(spec)
    ids, _ = model.prompt.build(blocks, per_block, "drive", spec.text_tokens, 0.0, 0.0, spec.query_tokens,
                                spec.slot_tokens)  # (1, S)
    return len(chunk_spans(model, ids, chunks))   # the model's own prompt: its layout is the same every frame


def image_block_ends(ids: torch.Tensor, image_token: int) -> list[int]:
    """ids (S,) -> the index after each maximal run of image tokens."""
    is_image = (ids == image_token).to(torch.int8)
    edges = is_image[1:] - is_image[:-1]                                               # -1 where a run ends
    ends = (torch.nonzero(edges == -1).flatten() + 1).tolist()
    return ends + ([ids.shape[0]] if ids.numel() and bool(is_image[-1]) else [])


def chunk_mask(attention_mask: torch.Tensor, start: int, end: int, dtype=torch.bool) -> torch.Tensor:
    """attention_mask (P, >= end) of the frame so far -> the chunk's 4-D mask (P, 1, end - start, end): query
    token start + i attends keys 0 .. start + i that are not padding."""
    keys = torch.arange(end, device=attention_mask.device)
    queries = torch.arange(start, end, device=attention_mask.device)
    causal = keys[None, :] <= queries[:, None]                                         # (C, end)
    return (causal[None] & attention_mask[:, None, :end].bool())[:, None].to(dtype)    # (P, 1, C, end)


class FrameKV:
    """One frame's keys and values of a range of layers, for chunked prefill: the blocks' attention calls
    `update(key, value, layer)` with a chunk's keys (P, kv_heads, C, D) and gets every key so far back. The
    store is allocated at the first chunk for the whole frame (seq_len tokens), so later chunks copy only
    their own keys, never the earlier ones (a torch.cat per chunk would)."""

    def __init__(self, seq_len: int):
        self.seq_len = seq_len
        self._keys: dict[int, torch.Tensor] = {}
        self._values: dict[int, torch.Tensor] = {}
        self._filled: dict[int, int] = {}

    def update(self, key: torch.Tensor, value: torch.Tensor, layer_idx: int, *args, **kwargs):
        if layer_idx not in self._keys:
            shape = (*key.shape[:2], self.seq_len, key.shape[-1])                       # (P, kv_heads, S, D)
            self._keys[layer_idx] = key.new_empty(shape)
            self._values[layer_idx] = value.new_empty(shape)
            self._filled[layer_idx] = 0
        start = self._filled[layer_idx]
        end = start + key.shape[2]
        expect(end <= self.seq_len, ConfigError, f"layer {layer_idx}: chunk keys beyond the frame's {self.seq_len} tokens")
        self._keys[layer_idx][:, :, start:end] = key
        self._values[layer_idx][:, :, start:end] = value
        self._filled[layer_idx] = end
        return self._keys[layer_idx][:, :, :end], self._values[layer_idx][:, :, :end]

    def nbytes(self) -> int:
        return sum(t.numel() * t.element_size() for t in (*self._keys.values(), *self._values.values()))


def run_blocks_chunk(decoder, blocks, hidden: torch.Tensor, position_ids: torch.Tensor, mask: torch.Tensor,
                     kv: FrameKV, first: int, deepstack: DeepStack | None = None) -> torch.Tensor:
    """Blocks first, first + 1, ... on one chunk: hidden (P, C, H), position_ids (.., P, C), mask (P, 1, C, end)
    from chunk_mask; keys and values of earlier chunks come from (and this chunk's go to) `kv`."""
    if len(blocks) == 0:
        return hidden
    if decoder.config._attn_implementation != "sdpa":   # eager attention adds its mask: 0 / -inf, not bool
        mask = torch.zeros(mask.shape, dtype=hidden.dtype).masked_fill(~mask, torch.finfo(hidden.dtype).min)
    position_embeddings = decoder.rotary_emb(hidden, position_ids)                     # cos, sin: (P, C, head_dim)
    for index, block in enumerate(blocks, start=first):
        hidden = block(hidden, attention_mask=mask, position_embeddings=position_embeddings, position_ids=None,
                       cache=kv, use_cache=True)
        if deepstack is not None:
            hidden = deepstack.after_block(index, hidden)
    return hidden


@dataclass
class OpenFrame:
    """The suffix's frame whose chunks are arriving: the next chunk it takes and the keys of those before."""
    seq: int
    stamp_ns: int
    partition: int
    count: int
    kv: FrameKV
    masks: list
    next_index: int = 0
    next_start: int = 0
    suffix_ms: float = 0.0
    rows: list = field(default_factory=list)   # each chunk's final normed rows (P, C, H), for a sequence-reading head

    def attention_mask(self) -> torch.Tensor:
        return torch.cat(self.masks, dim=1)                                            # (P, tokens so far)
