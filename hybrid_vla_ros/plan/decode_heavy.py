"""A decode-heavy model on described hardware (Alpamayo: `alpamayo-r1-like`): per phase and side, the prefill,
n reasoning tokens decoded one at a time, and K Euler steps of the flow-matching expert whose layer i attends to
the VLM's layer-i keys/values; the cut that gives the least period for each reasoning length, and whether the
split pays as n grows. No torch beyond one sampler timing; the rates come from the plan (predict.py, run.py).

    prefill    the plan's own per-block times at the prompt's rows (compute-bound); the suffix adds lm_head
               for one row and the sampler
    decode     per token, each VLM block at batch 1: max(FLOPs / rate, (weights + KV read) / bandwidth) + a
               per-layer dispatch cost; the suffix adds lm_head (the vocabulary x hidden matrix, read per token)
               and the sampler (top-p over the vocabulary)
    expert     per Euler step, each expert layer over the 64 action tokens: the same max(), + dispatch; layer
               i on the side of VLM block i (layers [0, p) on the prefix); x2 with guidance (two caches)
    crossings  prefill boundary (+ DeepStack features before block 3), 1 token state each way per decode step,
               the action tokens each way per Euler step: bytes / link + one copy's latency each

    native     all of it on the GPU, one frame at a time: period = latency
    split      latency = both sides' work + every crossing (the chain of one frame)
               period = max(prefix busy, suffix busy, latency / frames in flight)  (2 frames in flight)
"""

from __future__ import annotations

import time
from dataclasses import dataclass, replace

from .efficiency import LINK_LATENCY_MS, LINK_OF_PEAK

ITEMSIZE = {"fp32": 4, "bf16": 2, "fp16": 2, "int8": 1}
GPU_DISPATCH_MS = (0.05, "assumed: eager PyTorch launches ~10 kernels per layer at ~5 us each on the GPU "
                         "(CUDA graphs would remove most of it)")
CPU_DISPATCH_MS = (0.15, "assumed: eager PyTorch's per-op overhead for ~30 ops per layer on a server core "
                         "(bench --preset alpamayo-bench measures the whole step at reduced size)")
GPU_SAMPLER_MS = (0.2, "assumed: top-p sort over the vocabulary on the GPU plus one device-to-host sync")
LENGTHS = (0, 32, 128, 256, 512)
IN_FLIGHT = 2
FRAMES_PER_WINDOW = 4   # a window: the cameras x their last 4 frames; one new frame per camera each window
KEPT_WINDOWS = 2        # engine/expert_split/vision_cache.py keeps the images of the last 2 windows


@dataclass(frozen=True)
class Shapes:
    blocks: int
    prompt: int               # prompt tokens S (images + history + text)
    image_tokens: int
    deepstack: int            # VLM blocks that take DeepStack additions (a cut before them carries features)
    hidden: int
    kv_heads: int
    heads: int
    head_dim: int
    block_params: int
    vocab: int
    expert_layers: int
    expert_hidden: int
    expert_heads: int
    expert_params: int        # one expert layer
    actions: int              # action tokens per Euler step


def shapes_of(model, workload: dict) -> Shapes:
    spec = model.spec
    head_dim = spec.attention_head_dim
    expert = (spec.head_config or {}).get("expert", {})
    eh, ei = expert.get("hidden_size", spec.hidden_size), expert.get("intermediate_size", spec.intermediate_size)
    e_heads = expert.get("num_attention_heads", spec.num_heads)
    e_params = 2 * eh * e_heads * head_dim + 2 * eh * spec.num_kv_heads * head_dim + 3 * eh * ei + 4 * eh
    images, per_image = model.family.image_blocks(spec)
    return Shapes(spec.num_blocks, workload["tokens"], images * per_image, spec.deepstack_blocks, spec.hidden_size,
                  spec.num_kv_heads, spec.num_heads, head_dim, workload["params_per_block"], spec.vocab_size,
                  expert.get("num_hidden_layers", spec.num_blocks), eh, e_heads, e_params, spec.num_waypoints)


@dataclass(frozen=True)
class Side:
    gflops: float
    gbs: float
    itemsize: int
    dispatch_ms: float
    sampler_ms: float

    def ms(self, flops: float, nbytes: float) -> float:
        return max(flops / (self.gflops * 1e9), nbytes / (self.gbs * 1e9)) * 1e3


def sampler_ms_here(vocab: int, repeats: int = 10) -> float:
    """The sampler as suffix.py runs it (top-p filter + multinomial over the vocabulary) on one torch thread of
    this CPU: the best of `repeats` in this thread's CPU time (a competing load on this shared machine takes
    wall time, not this thread's CPU time)."""
    import torch
    from ..engine.cpu import pinned
    from ..model.plugins.alpamayo.decode import Sampling, sample
    logits, gen = torch.randn(vocab, generator=torch.Generator().manual_seed(0)), torch.Generator().manual_seed(0)
    times = []
    with pinned(None, 1):
        sample(logits, ((0, 1),), Sampling(), gen)
        for _ in range(repeats):
            t0 = time.thread_time()
            sample(logits, ((0, 1),), Sampling(), gen)
            times.append((time.thread_time() - t0) * 1e3)
    return min(times)


def window_times(times: dict, encode_once: bool) -> dict:
    """The plan's stage times for one window: with each image encoded once (vision_cache.py) the vision tower runs
    on the newest frame of each camera only, 1 / FRAMES_PER_WINDOW of the images (the front end's time scaled so:
    a tower's work is per image)."""
    return {**times, "front_ms": times["front_ms"] / FRAMES_PER_WINDOW} if encode_once else times


def kept_rows_gib(s: Shapes, itemsize: int, encode_once: bool) -> float:
    """What encode-once keeps on the prefix's device: KEPT_WINDOWS windows of image rows and DeepStack rows."""
    return KEPT_WINDOWS * s.image_tokens * s.hidden * (1 + s.deepstack) * itemsize / 2 ** 30 if encode_once else 0.0


def per_call(s: Shapes, side: Side, context: int) -> dict:
    """One call's ms on a side: a VLM block's decode step at `context` cached tokens, lm_head for one row, an
    expert layer over the action tokens at `context`."""
    kv_read = 2 * s.kv_heads * s.head_dim * context * side.itemsize
    block = side.ms(2 * s.block_params + 4 * s.heads * s.head_dim * context, s.block_params * side.itemsize + kv_read)
    head = side.ms(2 * s.vocab * s.hidden, s.vocab * s.hidden * side.itemsize)
    attention = 4 * s.expert_heads * s.head_dim * s.actions * (context + s.actions)
    expert = side.ms(2 * s.actions * s.expert_params + attention, s.expert_params * side.itemsize + kv_read)
    return {"decode_block": block + side.dispatch_ms, "lm_head": head, "sampler": side.sampler_ms,
            "expert_layer": expert + side.dispatch_ms}


def _calls(s: Shapes, side: Side, n: int) -> dict:
    """Per-call ms at reasoning length n: decode steps at the mean context (prompt + n / 2), the expert after
    the whole reasoning (prompt + n)."""
    calls = per_call(s, side, s.prompt + n // 2)
    calls["expert_layer"] = per_call(s, side, s.prompt + n)["expert_layer"]
    return calls


def crossing_ms(nbytes: float, link_gbs: float) -> float:
    return nbytes / (link_gbs * 1e9) * 1e3 + LINK_LATENCY_MS


def _side_phases(s: Shapes, calls: dict, prefill: float, blocks: int, layers: int, n: int, steps: int,
                 guidance: bool, head: bool) -> dict:
    """ms per frame by phase on one side holding `blocks` VLM blocks and `layers` expert layers."""
    token = blocks * calls["decode_block"] + (calls["lm_head"] + calls["sampler"] if head else 0.0)
    caches = 2 if guidance else 1
    phases = {"prefill": prefill, "decode": n * token, "expert": steps * caches * layers * calls["expert_layer"]}
    if guidance:   # the route-free prompt again, then the n tokens fed in one call (weights read once)
        phases["unguided"] = prefill - (calls["lm_head"] + calls["sampler"] if head else 0.0) + \
            (blocks * calls["decode_block"] if n else 0.0)
    return phases


def split_row(s: Shapes, times: dict, gpu: Side, cpu: Side, link_gbs: float, p: int, n: int, steps: int,
              guidance: bool = False) -> dict:
    """One cut at reasoning length n: phases per side, crossings, busy, latency and period (see the module doc)."""
    g, c = _calls(s, gpu, n), _calls(s, cpu, n)
    layers_p = min(p, s.expert_layers)
    pre_p = times["front_ms"] + p * times["block_prefix_ms"]
    pre_s = (s.blocks - p) * times["block_suffix_ms"] + c["lm_head"] + c["sampler"]
    prefix = _side_phases(s, g, pre_p, p, layers_p, n, steps, guidance, head=False)
    suffix = _side_phases(s, c, pre_s, s.blocks - p, s.expert_layers - layers_p, n, steps, guidance, head=True)
    b, caches = gpu.itemsize, 2 if guidance else 1
    boundary = s.prompt * s.hidden * b + max(s.deepstack - p, 0) * s.image_tokens * s.hidden * b
    crossings = {"prefill": crossing_ms(boundary, link_gbs) * caches,
                 "decode": n * (crossing_ms(s.hidden * b, link_gbs) + crossing_ms(8, link_gbs)),
                 "expert": steps * (crossing_ms(caches * s.actions * s.expert_hidden * b, link_gbs)
                                    + crossing_ms(s.actions * 2 * 4, link_gbs))}
    busy = {"prefix": sum(prefix.values()), "suffix": sum(suffix.values())}
    latency = busy["prefix"] + busy["suffix"] + sum(crossings.values())
    return {"p": p, "prefix": prefix, "suffix": suffix, "crossings": crossings, "busy": busy, "latency_ms": latency,
            "period_ms": max(busy["prefix"], busy["suffix"], latency / IN_FLIGHT)}


def native_row(s: Shapes, times: dict, gpu: Side, n: int, steps: int, guidance: bool = False) -> dict:
    g = _calls(s, gpu, n)
    prefill = times["front_ms"] + s.blocks * times["block_prefix_ms"] + g["lm_head"] + g["sampler"]
    phases = _side_phases(s, g, prefill, s.blocks, s.expert_layers, n, steps, guidance, head=True)
    total = sum(phases.values())
    return {"phases": phases, "latency_ms": total, "period_ms": total, "decode_share": phases["decode"] / total}


def is_decode_heavy(model) -> bool:
    return getattr(model.spec, "head", None) == "alpamayo_expert"


def sides_of_plan(result: dict, sampler_ms: float) -> tuple[Side, Side, float]:
    """(GPU side, CPU side, link GB/s) from a described plan's rates, dtypes and link."""
    rates, dtypes = result["rates"], result["dtypes"]
    gpu = Side(rates["gpu"]["gflops"], rates["gpu"]["gbs"], ITEMSIZE[dtypes["gpu"]], GPU_DISPATCH_MS[0],
               GPU_SAMPLER_MS[0])
    cpu = Side(rates["cpu"]["gflops"], rates["cpu"]["gbs"], ITEMSIZE[dtypes["cpu"]], CPU_DISPATCH_MS[0], sampler_ms)
    return gpu, cpu, result["gpu"]["link_gbs"] * LINK_OF_PEAK[0]


def best_split(s: Shapes, times, gpu, cpu, link, n, steps, guidance, cuts=None) -> dict | None:
    """The cut of least period among `cuts` (default: every cut); None when cuts is empty."""
    cuts = range(s.blocks + 1) if cuts is None else cuts
    rows = [split_row(s, times, gpu, cpu, link, p, n, steps, guidance) for p in cuts]
    return min(rows, key=lambda r: (round(r["period_ms"], 9), r["p"])) if rows else None


def _stops_paying(s, times, gpu, cpu, link, steps, guidance, cut: int | None = None, most: int = 4096) -> dict:
    """The first reasoning length (steps of 8) where the split's period (at the best cut for each n, or at a
    fixed `cut`) is no shorter than native's; where none, the gain at `most` tokens."""
    def split(n):
        if cut is None:
            return best_split(s, times, gpu, cpu, link, n, steps, guidance)
        return split_row(s, times, gpu, cpu, link, cut, n, steps, guidance)
    for n in range(0, most + 1, 8):
        if split(n)["period_ms"] >= native_row(s, times, gpu, n, steps, guidance)["period_ms"]:
            return {"n": n, "cut": cut, "searched_to": most}
    far = split(most)
    return {"n": None, "cut": cut, "searched_to": most, "p_at_most": far["p"],
            "ratio_at_most": native_row(s, times, gpu, most, steps, guidance)["period_ms"] / far["period_ms"]}


def _gpu_gib(s: Shapes, result: dict, p: int, itemsize: int) -> float | None:
    """The plan's GPU bytes at cut p (zone [p, p]) plus the expert layers [0, p) the plan counts on the CPU."""
    rows = result.get("rows")
    if not rows:
        return None
    return (rows[p]["gpu_bytes"]["total"] + min(p, s.expert_layers) * s.expert_params * itemsize) / 2 ** 30


def decode_heavy_section(model, result: dict, lengths=LENGTHS, steps: int = 10, guidance: bool = False,
                         sampler_ms: float | None = None, encode_once: bool = True) -> dict:
    """The per-length table for a described plan (result of run.py plan_described); sampler_ms: the CPU's
    sampler, timed here when not given; encode_once: each image through the vision tower once (window_times)."""
    if "rates" not in result:
        return {"refused": "the decode-heavy prediction needs described hardware (--gpu PART --cpu PART)"}
    s = shapes_of(model, result["workload"])
    sampler = sampler_ms_here(s.vocab) if sampler_ms is None else sampler_ms
    where = "this machine's thread CPU time, one thread (taken as the described CPU's)" if sampler_ms is None else "as given"
    gpu, cpu, link = sides_of_plan(result, sampler)
    times, cut = window_times(result["times"], encode_once), result.get("best_p")
    rows = []
    for n in lengths:
        native, split = native_row(s, times, gpu, n, steps, guidance), best_split(s, times, gpu, cpu, link, n, steps,
                                                                                 guidance)
        fixed = split_row(s, times, gpu, cpu, link, cut, n, steps, guidance) if cut is not None else None
        rows.append({"n": n, "native": native, "split": split, "at_plan_cut": fixed,
                     "gpu_gib": _gpu_gib(s, result, split["p"], gpu.itemsize),
                     "period_vs_native": native["period_ms"] / split["period_ms"],
                     "latency_vs_native": split["latency_ms"] / native["latency_ms"],
                     "pays": split["period_ms"] < native["period_ms"]})
    per_call_at = {"gpu": per_call(s, gpu, s.prompt), "cpu": per_call(s, cpu, s.prompt)}
    return {"shapes": s.__dict__, "steps": steps, "guidance": guidance, "in_flight": IN_FLIGHT, "rows": rows,
            "encode_once": encode_once, "front_ms": {"whole_window": result["times"]["front_ms"],
                                                     "per_window": times["front_ms"]},
            "per_call_ms_at_prompt": per_call_at, "prefill_block_ms": {"gpu": times["block_prefix_ms"],
                                                                       "cpu": times["block_suffix_ms"]},
            "native_gpu_gib": (result["native"]["gpu_bytes"]["total"] + s.vocab * s.hidden * gpu.itemsize) / 2 ** 30
            if "native" in result else None,   # + lm_head, which the plan's workload leaves out (its head: the expert)
            "plan_cut": cut, "stops_paying": _stops_paying(s, times, gpu, cpu, link, steps, guidance),
            "stops_paying_at_plan_cut": _stops_paying(s, times, gpu, cpu, link, steps, guidance, cut)
            if cut is not None else None,
            "stops_paying_without_cpu_sampler": _stops_paying(s, times, gpu, replace(cpu, sampler_ms=0.0), link,
                                                              steps, guidance),
            "assumptions": [encode_once_assumption(encode_once),
                            f"GPU dispatch {GPU_DISPATCH_MS[0]} ms per layer per step ({GPU_DISPATCH_MS[1]})",
                            f"CPU dispatch {CPU_DISPATCH_MS[0]} ms per layer per step ({CPU_DISPATCH_MS[1]})",
                            f"GPU sampler {GPU_SAMPLER_MS[0]} ms ({GPU_SAMPLER_MS[1]})",
                            f"CPU sampler {sampler:.2f} ms: top-p (a full sort) over {s.vocab} logits, {where}",
                            "every sampled token runs to the length n (no early stop); decode context = prompt "
                            "+ n / 2 on average; weights are read once per token (batch 1, no speculative decoding)",
                            f"period with {IN_FLIGHT} frames in flight: max(prefix busy, suffix busy, chain / "
                            f"{IN_FLIGHT}); a frame's output lags by up to {IN_FLIGHT} periods",
                            "no real GPU here: the GPU side is its datasheet x published GEMM / bandwidth shares"]}


def encode_once_assumption(encode_once: bool) -> str:
    if not encode_once:
        return "every window's images through the vision tower (--no-encode-once)"
    return (f"each image encoded once: the vision tower on the newest of {FRAMES_PER_WINDOW} frames per camera, "
            f"1/{FRAMES_PER_WINDOW} of the front end's time a window, its rows for {KEPT_WINDOWS} windows kept on "
            f"the GPU (the prefix turns it off where its first window's probe finds the rows inexact: "
            f"engine/expert_split/vision_cache.py)")
