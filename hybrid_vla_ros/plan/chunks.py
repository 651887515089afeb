"""Chunked prefill across the cut, predicted (issue 29): period and latency at a cut p when a frame's tokens
flow through both stages in k chunks (engine/chunking.py), from the planner's cost model (predict.py).

Chunk i = 1..k holds n_i tokens with K_i = n_1 + ... + n_(i-1) keys before it (rows: n_i x passes):

    block_i  = the block's time at n_i tokens (max(FLOPs / rate, weight bytes / bandwidth), Rate.seconds), its
               attention over the K_i earlier keys added: + 4 x heads x head_dim x n_i x K_i x passes FLOPs
    a_i      = p x block_i on the prefix device (+ overhead for i > 1)
    x_i      = the chunk's boundary bytes / link rate + the link's fixed latency (the handover)
    s_i      = (L - p) x block_i on the suffix device (+ overhead for i > 1; + the head on the last chunk)
    P_i      = E_1 + a_1 + ... + E_i + a_i         (E_i: the embeddings due before chunk i: all of them before
                                                    the first, or camera by camera for a vision tower)
    C_i      = (x_1 + s_1) + ... + (x_i + s_i)     (the handover is charged to the suffix side, as in predict.py)

    period   = max(P_k, C_k)
    latency  = max over i of [P_i + C_k - C_(i-1)]

The latency is a two-stage flow shop over the chunks: the suffix ends chunk i at d_i = max(P_i, d_(i-1)) +
x_i + s_i (d_0 = 0); unrolled, d_k is the maximum above (from the last chunk the suffix waited for, it runs
back to back). That is the latency of a frame into an idle pipeline, and also of a saturated one whose
prefix starts each frame just in time:

- suffix-bound (C_k >= P_k): the previous frame holds the suffix until F; the prefix starts at s = F +
  min_i (C_(i-1) - P_i), the latest start at which no chunk keeps the suffix waiting (its first chunk ready
  as the suffix frees up, unless a later one would then be late); the prefix is free by then (the previous
  start was C_k >= P_k earlier). The head ends at F + C_k: latency = C_k - min_i (C_(i-1) - P_i), the maximum.
- prefix-bound (P_k > C_k): the prefix runs frames back to back (any later start would lose throughput);
  frame t's chunks meet the suffix busy until the previous frame's end, L_(t-1) - P_k after t's start, so
  L_t = max(L_idle, L_(t-1) - P_k + C_k), whose fixed point is L_idle.

With equal chunks (a, s per chunk, E, x and the head negligible): latency = k max(a, s) + min(a, s), the
slower stage + one chunk of the faster; equal stages: max(prefix, suffix) x (1 + 1/k). k = 1: E + a + x + s
+ head and max(E + a, x + s + head), predict.cut_row exactly. No torch here but in model_spans (a prompt).
"""

from __future__ import annotations

from dataclasses import dataclass

from .predict import Sides, StageTimes, boundary_bytes, stage_times
from .workload import Workload

ASSUMPTIONS = (
    "chunked: a side's rate at the frame's rows is taken for a chunk's rows; a small chunk loses efficiency only "
    "through the roofline (each chunk re-reads the block's weights) and the handover's fixed latency per chunk; "
    "a GEMM's lower FLOP/s at few rows beyond that is not modelled (it flatters tiny chunks)",
    "chunked: attention of chunk i reads the keys of chunks 1..i (per-frame KV on each side); a vision tower "
    "encodes camera by camera (each camera's 1/N of the embeddings before the chunk holding its first token), a "
    "scene encoder the whole frame before the first chunk; the head runs on the last chunk",
    "chunked: latency = a frame into an idle pipeline, equal to a saturated one's with a just-in-time prefix "
    "start (plan/chunks.py derives it); period = max(prefix, handovers + suffix) of one frame",
)
MEASURED_AT_CHUNK_ROWS = ("chunked: each side's blocks timed at each chunk's rows (in turn, as a stage runs "
                          "them, the other side running beside), so a small chunk's lower GEMM rate and its re-read weights "
                          "are in the rates; the per-chunk Python and synchronisation of a stage are not")


@dataclass(frozen=True)
class ChunkTimes:
    """One frame's chunks at a cut: the embeddings, then per chunk the prefix, handover and suffix ms."""
    spans: tuple
    embed_ms: float
    prefix_ms: tuple
    handover_ms: tuple
    suffix_ms: tuple      # the last includes the head


def chunk_flops(work: Workload, start: int, end: int) -> float:
    """One block on tokens [start, end) of a frame, attending to the `start` keys before them as well."""
    n = end - start
    return work.with_tokens(n).block_flops + 2.0 * 2.0 * work.heads * work.head_dim * n * start * work.passes


def _block_ms(rate, flops: float, weight_bytes: float) -> float:
    return rate.seconds(flops, weight_bytes)[0] * 1e3


def handover_ms(work: Workload, sides: Sides, tokens: int) -> float:
    bytes_ = boundary_bytes(work.with_tokens(tokens), sides.prefix_itemsize)
    return bytes_ / (sides.link_gbs * 1e9) * 1e3 + sides.link_latency_ms


def embed_shares(spans, camera_starts=None) -> list[float]:
    """The share of the frame's embeddings E done before each chunk: all of it before the first, or, where the
    prefix encodes camera by camera (engine/embedding.py FrameEmbedder), each camera's 1/N before the chunk that
    holds its first image token (camera_starts: those token indices)."""
    if not camera_starts:
        return [1.0] + [0.0] * (len(spans) - 1)
    shares = [0.0] * len(spans)
    for first in camera_starts:
        shares[next(i for i, (_, end) in enumerate(spans) if first < end)] += 1.0 / len(camera_starts)
    return shares


def chunk_times(work: Workload, sides: Sides, times: StageTimes, p: int, spans, overhead_ms: float = 0.0,
                camera_starts=None, rates_at=None) -> ChunkTimes:
    """overhead_ms: a fixed cost each stage pays per chunk beyond the first (dispatch, synchronisation);
    camera_starts: the first token of each camera's image block when the prefix encodes camera by camera;
    rates_at(rows) -> (prefix Rate, suffix Rate) measured at a chunk's rows (this machine: plan/run.py), else
    each side's rate at the frame's rows."""
    weights = work.params_per_block
    shares = embed_shares(spans, camera_starts)
    prefix, handover, suffix = [], [], []
    for index, (start, end) in enumerate(spans):
        flops, extra = chunk_flops(work, start, end), overhead_ms if index else 0.0
        embed = times.front_ms * shares[index] if index else 0.0      # cameras first reached here: prefix only
        pre, suf = rates_at((end - start) * work.passes) if rates_at else (sides.prefix, sides.suffix)
        prefix.append(p * _block_ms(pre, flops, weights * sides.prefix_itemsize) + extra + embed)
        suffix.append((work.num_blocks - p) * _block_ms(suf, flops, weights * sides.suffix_itemsize) + extra)
        handover.append(handover_ms(work, sides, end - start))
    suffix[-1] = suffix[-1] + times.head_suffix_ms
    return ChunkTimes(tuple(spans), times.front_ms * shares[0], tuple(prefix), tuple(handover), tuple(suffix))


def schedule(ct: ChunkTimes) -> dict:
    """The flow shop of the module doc: prefix_done P_i, suffix_done d_i, period and latency."""
    ready, done, prefix_done, suffix_done = ct.embed_ms, 0.0, [], []
    for a, x, s in zip(ct.prefix_ms, ct.handover_ms, ct.suffix_ms):
        ready = ready + a
        done = max(ready, done) + x + s
        prefix_done.append(ready)
        suffix_done.append(done)
    suffix_total = sum(x + s for x, s in zip(ct.handover_ms, ct.suffix_ms))
    return {"prefix_done_ms": prefix_done, "suffix_done_ms": suffix_done, "latency_ms": done,
            "period_ms": max(ready, suffix_total), "prefix_ms": ready, "suffix_ms": suffix_total}


def closed_form_latency(ct: ChunkTimes) -> float:
    """max over i of P_i + C_k - C_(i-1): the schedule's latency, written out (a check on schedule())."""
    best, prefix, before = 0.0, ct.embed_ms, 0.0
    total = sum(x + s for x, s in zip(ct.handover_ms, ct.suffix_ms))
    for a, x, s in zip(ct.prefix_ms, ct.handover_ms, ct.suffix_ms):
        prefix += a
        best = max(best, prefix + total - before)
        before += x + s
    return best


def kv_bytes(work: Workload, sides: Sides, p: int) -> dict:
    """One frame's keys and values of earlier chunks on each side (blocks [0, p) and [p, L))."""
    per_block = 2 * work.kv_heads * work.head_dim * work.rows
    return {"prefix": p * per_block * sides.prefix_itemsize,
            "suffix": (work.num_blocks - p) * per_block * sides.suffix_itemsize}


def chunked_row(work: Workload, sides: Sides, p: int, label: str, spans, overhead_ms: float = 0.0,
                camera_starts=None, rates_at=None) -> dict:
    ct = chunk_times(work, sides, stage_times(work, sides), p, spans, overhead_ms, camera_starts, rates_at)
    s = schedule(ct)
    return {"chunks": label, "k": len(spans), "p": p, "tokens": [end - start for start, end in spans],
            "period_ms": s["period_ms"], "latency_ms": s["latency_ms"], "prefix_ms": s["prefix_ms"],
            "suffix_ms": s["suffix_ms"], "first_chunk_ms": s["prefix_done_ms"][0],
            "bound": "prefix" if s["prefix_ms"] >= s["suffix_ms"] else "suffix",
            "kv_bytes": kv_bytes(work, sides, p) if len(spans) > 1 else {"prefix": 0, "suffix": 0},
            "chunk_ms": {"prefix": list(ct.prefix_ms), "handover": list(ct.handover_ms), "suffix": list(ct.suffix_ms)}}


def verdict(row: dict, base: dict) -> str:
    """Whether a chunking pays against the unchunked pipeline at the same cut."""
    if row["k"] == 1:
        return "- (unchunked)"
    if row["latency_ms"] >= base["latency_ms"]:
        return "no"
    return "yes" if row["period_ms"] <= base["period_ms"] * (1 + 1e-9) else "latency only (period longer)"


def chunk_report(work: Workload, sides: Sides, p: int, chunkings: dict, overhead_ms: float = 0.0,
                 camera_starts=None, rates_at=None) -> dict:
    """chunkings: label -> spans, or label -> the reason it cannot be chunked so. -> rows at cut p, each beside
    the unchunked one; the formula and its assumptions. camera_starts, rates_at: see chunk_times."""
    base = chunked_row(work, sides, p, "1", [(0, work.tokens)], overhead_ms)
    rows = []
    for label, spans in chunkings.items():
        if isinstance(spans, str):
            rows.append({"chunks": label, "refused": spans})
            continue
        row = chunked_row(work, sides, p, label, spans, overhead_ms, camera_starts, rates_at)
        row.update(latency_vs_unchunked=row["latency_ms"] / base["latency_ms"] - 1,
                   period_vs_unchunked=row["period_ms"] / base["period_ms"] - 1, pays=verdict(row, base))
        rows.append(row)
    return {"p": p, "rows": rows, "unchunked": base, "overhead_ms": overhead_ms,
            "formula": "period = max(P_k, C_k); latency = max_i [P_i + C_k - C_(i-1)] (plan/chunks.py)",
            "assumptions": [MEASURED_AT_CHUNK_ROWS if rates_at else ASSUMPTIONS[0], *ASSUMPTIONS[1:]]}


def model_spans(model, tokens: int, chunks) -> list[tuple[int, int]] | str:
    """The spans a model's prefix would cut a frame of `tokens` tokens into (engine/chunking.py chunk_spans),
    or why it cannot: per camera from the model's own prompt, k from the token count."""
    import torch
    from ..engine.chunking import PER_CAMERA, check_chunkable, chunk_spans, parse_chunks
    from ..errors import ConfigError
    try:
        chunks = parse_chunks(chunks)
        check_chunkable(model, chunks)
        ids = _prompt_ids(model) if chunks == PER_CAMERA else torch.zeros(1, tokens, dtype=torch.long)
        if ids.shape[1] != tokens:
            return f"the model's prompt has {ids.shape[1]} tokens, the plan {tokens}: per-camera spans need the prompt"
        return chunk_spans(model, ids, chunks)
    except ConfigError as error:
        return str(error)


def _prompt_ids(model):
    """The first pass's token ids (1, S) of the model's prompt (ids only: no image is drawn)."""
    from ..types import Frame
    spec = model.spec
    blocks, per_block = model.family.image_blocks(spec)
    instruction = model.instructions(Frame.__dataclass_fields__["instruction"].default)[0]
    return model.prompt.build(blocks, per_block, instruction, spec.text_tokens, 0.0, 0.0, spec.query_tokens,
                              spec.slot_tokens)[0]


def chunked_section(model, work: Workload, sides: Sides, p: int | None, chunks, overhead_ms: float = 0.0,
                    rates_at=None):
    """What plan_here / plan_described add for `--chunks`: None when only unchunked (or no cut fits)."""
    chunks = [str(c) for c in chunks or ()]
    if p is None or chunks in ([], ["1"]):
        return None
    return chunk_report(work, sides, p, {c: model_spans(model, work.tokens, c) for c in chunks}, overhead_ms,
                        camera_starts(model, work.tokens), rates_at)


def camera_starts(model, tokens: int) -> list[int] | None:
    """The first token of each camera's image block in the model's prompt, where the prefix encodes camera by
    camera (a vision tower; a scene encoder encodes the whole frame at once: None)."""
    import torch
    if model.family.scene_encoded:
        return None
    ids = _prompt_ids(model)[0]
    if ids.shape[0] != tokens:
        return None
    is_image = (ids == model.prompt.image_token_id).to(torch.int8)
    starts = (torch.nonzero(is_image[1:] - is_image[:-1] == 1).flatten() + 1).tolist()
    return ([0] if bool(is_image[0]) else []) + starts


__all__ = ["ASSUMPTIONS", "MEASURED_AT_CHUNK_ROWS", "ChunkTimes", "chunk_flops", "chunk_report", "chunk_times", "chunked_row",
           "chunked_section", "closed_form_latency", "handover_ms", "kv_bytes", "model_spans", "schedule"]
