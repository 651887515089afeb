"""The paper's two models at the paper's hardware, and the comparison with its table (arXiv 2608.14586: NVIDIA
L20 + Intel Xeon Platinum 8470Q, Bench2Drive).

Both models are described from their published architecture, not fitted: ORION's front end is an EVA-02-L ViT
(ORION's public inference config: img_size 640, patch 16, window 16, 24 layers of width 1024, SwiGLU MLP of
4 x 2/3, global attention in layers 2, 5, ..., 23) on 6 cameras, then the QT-Former's query decoders; its
LLM is 32 Vicuna/LLaMA-7B blocks. MindDrive: the same front end and Qwen2.5-3B (36 blocks, hidden 2048, GQA
16/2, tied embeddings), two prefills per frame (decision, action; LoRA r=16 on q, k, v, o). The blocks' own
efficiency is measured here on blocks of exactly these shapes (presets orion-like and minddrive-like).
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass

from .workload import FrontEnd, Workload, vit_front_end

PAPER_SOURCE = "arXiv 2608.14586, NVIDIA L20 + Intel Xeon Platinum 8470Q (DESIGN.md section 1)"
DTYPE_REASONING = (
    "GPU dtype fp32: ORION's public inference config sets fp32_infer=True, and the paper's memory figures agree: "
    "moving blocks 16..31 off the GPU saved 16 GB, which is what 16 LLaMA-7B blocks weigh in fp32 (13 GB) plus "
    "the LM head, not in fp16 (6.5 GB); MindDrive's 7 GB saving is 18 Qwen2.5-3B blocks in fp32 (5.6 GB) plus "
    "its LM head copy, where the 0.5B variant could not save 7 GB at all (2 GB in fp32): the 3B backbone, fp32. "
    "CPU dtype bf16: the paper's suffix runs bf16 through oneDNN (AMX).")


@dataclass(frozen=True)
class PaperFigures:
    native_ms: float
    hybrid_period_ms: float
    native_gb: float
    hybrid_gb: float
    best_p: int | None = None
    serial_ms: float | None = None     # hybrid without the pipeline (latency of one frame through both sides)
    transfer_ms: float | None = None   # the boundary handover the paper measured


def query_decoder(layers: int, width: int, ffn: int, queries: int, memory: int, extra_keys: int = 0) -> tuple:
    """(FLOPs, params) of a DETR-style query decoder: self-attention over queries (+ extra_keys temporal keys),
    cross-attention to `memory` image tokens, FFN; per layer."""
    self_attn = 8.0 * queries * width ** 2 + 4.0 * queries * (queries + extra_keys) * width
    cross = 4.0 * queries * width ** 2 + 4.0 * memory * width ** 2 + 4.0 * queries * memory * width
    ffn_flops = 4.0 * queries * width * ffn
    return layers * (self_attn + cross + ffn_flops), layers * (8 * width ** 2 + 2 * width * ffn)


def orion_front_end() -> FrontEnd:
    """EVA-02-L on 6 x 640^2 (1600 patches each) + QT-Former (two 6-layer query decoders of width 256: detection
    600 queries + 256 scene tokens, map 1800 + 256, each with 600 temporal memory keys, cross-attending the
    9600 image tokens), input projections 1024 -> 256 and output projections 256 -> 4096."""
    image_tokens = 6 * 1600
    det = query_decoder(6, 256, 2048, 856, image_tokens, extra_keys=600)
    lanes = query_decoder(6, 256, 2048, 2056, image_tokens, extra_keys=600)
    proj_flops = 2 * (2.0 * image_tokens * 1024 * 256) + 2 * (2.0 * 256 * 256 * 4096)
    proj_params = 2 * 1024 * 256 + 2 * 256 * 4096
    return vit_front_end("EVA-02-L (6 cameras, 640x640) + QT-Former", depth=24, width=1024, mlp_hidden=2730,
                         mlp_matrices=3, patches=1600, images=6, window=16, global_layers=8,
                         extra_params=det[1] + lanes[1] + proj_params, extra_flops=det[0] + lanes[0] + proj_flops,
                         note="EVA-02-L from ORION's public config; QT-Former's query decoders approximated from "
                              "its config (6 layers, width 256, FFN 2048); post-processing (top-k, memory "
                              "update) and image decoding not counted")


def orion(tokens: int = 600) -> Workload:
    return Workload(name="ORION (paper)", num_blocks=32, hidden=4096, heads=32, kv_heads=32, intermediate=11008,
                    tokens=tokens, front=orion_front_end(), block_params=202_383_360, embed_params=32000 * 4096,
                    head_params=32000 * 4096 + 4096, head_flops=2.0 * 4096 * 1024,
                    notes=(f"{tokens} tokens per frame (the paper: about 600; ORION's code: 513-529 + the prompt)",
                           "LLM: Vicuna-7B blocks (hidden 4096, 32 heads, MLP 11008); the LM head is held "
                           "(config lm_head=...) on the suffix side; planner head (VAE + GRU) not counted",
                           "one prefill per frame, no KV cache kept (past_key_values=None)"))


def minddrive(tokens: int = 583, passes: int = 2) -> Workload:
    lora = 2 * 16 * (4096 + 2304 + 2304 + 4096)   # two adapters, r=16 on q, k, v, o
    return Workload(name="MindDrive (paper)", num_blocks=36, hidden=2048, heads=16, kv_heads=2, intermediate=11008,
                    tokens=tokens, passes=passes, front=orion_front_end(), block_params=77_076_992 + lora,
                    embed_params=151936 * 2048, head_params=151936 * 2048 + 2048, head_flops=2.0 * 151936 * 2048 * 2,
                    head_tied=True,
                    notes=(f"{passes} prefills of {tokens} tokens (decision, action: LoRA r=16 on q, k, v, o)",
                           "LLM: Qwen2.5-3B (36 blocks, hidden 2048, 16/2 heads, MLP 11008, tied embeddings: the "
                           "suffix keeps its own copy of the LM head); logits only at the query positions",
                           "front end: the same as ORION's (DESIGN.md section 7)"))


@dataclass(frozen=True)
class PaperModel:
    key: str
    workload: Workload
    block_preset: str           # a preset whose decoder block has exactly this shape (timed here)
    figures: PaperFigures


PAPER_MODELS = {
    "orion": PaperModel("orion", orion(), "orion-like", PaperFigures(521.0, 408.0, 45.0, 29.0, best_p=16,
                                                                       serial_ms=783.0, transfer_ms=0.41)),
    "minddrive": PaperModel("minddrive", minddrive(), "minddrive-like", PaperFigures(443.0, 306.2, 21.0, 14.0)),
}


def off(predicted: float | None, paper: float | None) -> float | None:
    """(predicted - paper) / paper."""
    return None if predicted is None or not paper else (predicted - paper) / paper


def compare(result: dict, figures: PaperFigures) -> dict:
    """The planner's numbers beside the paper's, each with its relative difference."""
    gib = 2 ** 30
    best = result["recommended"] or {}
    static = result["rows"][result["best_p"]] if result["best_p"] is not None else {}
    rows = {"native_ms": (result["native"]["period_ms"], figures.native_ms),
            "hybrid_period_ms": (static.get("period_ms"), figures.hybrid_period_ms),
            "hybrid_latency_ms": (static.get("latency_ms"), figures.serial_ms),
            "native_gpu_gib": (result["native"]["gpu_bytes"]["total"] / gib, figures.native_gb),
            "hybrid_gpu_gib": (static.get("gpu_bytes", {}).get("total", 0) / gib, figures.hybrid_gb),
            "transfer_ms": (result["times"]["transfer_ms"], figures.transfer_ms)}
    theirs = result["rows"][figures.best_p] if figures.best_p is not None else static
    if figures.best_p is not None:   # the same quantities at the paper's own cut: the memory model apart
        rows.update({"period_at_paper_p_ms": (theirs["period_ms"], figures.hybrid_period_ms),
                     "gpu_at_paper_p_gib": (theirs["gpu_bytes"]["total"] / gib, figures.hybrid_gb)})
    saved = (result["native"]["gpu_bytes"]["total"] - theirs.get("gpu_bytes", {}).get("total", 0)) / gib
    rows["gpu_saving_gib"] = (saved, figures.native_gb - figures.hybrid_gb)
    out = {k: {"predicted": v[0], "paper": v[1], "off": off(*v)} for k, v in rows.items()}
    out["best_p"] = {"predicted": result["best_p"], "paper": figures.best_p,
                     "blocks_off": None if figures.best_p is None else result["best_p"] - figures.best_p}
    native = result["native"]["gpu_bytes"]["total"]
    target = (figures.native_gb - figures.hybrid_gb) * gib
    out["p_matching_the_papers_saving"] = min(range(len(result["rows"])), key=lambda p: abs(
        native - result["rows"][p]["gpu_bytes"]["total"] - target))
    out["zone"] = result["zone"]
    out["recommended_zone_gpu_gib"] = best.get("gpu_bytes", {}).get("total", 0) / gib
    return out


def implied_by_paper(work: Workload, figures: PaperFigures, transfer_ms: float) -> dict | None:
    """What the paper's own ORION figures say about each side, if its best cut balanced the two: native = front
    + L GPU blocks; serial = prefix(p) + transfer + suffix(p); period = the larger of prefix(p), suffix(p)."""
    if figures.serial_ms is None or figures.best_p is None:
        return None
    p, L = figures.best_p, work.num_blocks
    out = {}
    for bound, prefix in (("prefix-bound", figures.hybrid_period_ms),
                          ("suffix-bound", figures.serial_ms - figures.hybrid_period_ms)):
        suffix = figures.serial_ms - prefix - transfer_ms
        gpu_block = (figures.native_ms - prefix) / (L - p)
        out[bound] = {"gpu_block_ms": gpu_block, "front_ms": prefix - p * gpu_block, "cpu_block_ms": suffix / (L - p),
                      "gpu_block_tflops": work.block_flops / gpu_block / 1e9,
                      "cpu_block_tflops": work.block_flops / (suffix / (L - p)) / 1e9}
    return out


def with_tokens(model: PaperModel, tokens: int | None) -> PaperModel:
    return model if not tokens else dataclasses.replace(model, workload=model.workload.with_tokens(tokens))


__all__ = ["DTYPE_REASONING", "PAPER_MODELS", "PAPER_SOURCE", "PaperFigures", "PaperModel", "compare",
           "implied_by_paper", "minddrive", "off", "orion", "orion_front_end", "query_decoder", "with_tokens"]
