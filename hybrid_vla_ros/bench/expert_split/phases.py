"""`hybrid-vla bench --preset alpamayo-bench --scenario split-phases`: native (run_reference) vs split-serial, per
phase, on the reduced Alpamayo 1.5 of reduced.py, one frame at a time, at each cut asked for.

Native phases: prefill and each decode step (feed + sample) timed by calling run_reference's own functions
one by one for the tokens it sampled; expert per Euler step and the total from run_reference's timings.
Split phases: the prefix's plus the suffix's time per phase (serial: one side waits while the other works),
the transport's apart."""

from __future__ import annotations

import statistics
import time

import torch

from ...engine.expert_split.runner import run_split
from ...engine.expert_split.crossings import roundtrip
from ...model.plugins.alpamayo.decode import Sampling, fed_tokens, feed, new_cache, prefill, sample
from ...model.plugins.alpamayo.flow import FlowSettings
from ...model.plugins.alpamayo.reference import fused_prompt, run_reference
from .reduced import reduced_inputs, reduced_model


def _reasoning_phases(model, frame, tokens: list[int], fed: int, sampling: Sampling) -> tuple[float, float]:
    """run_reference's own functions, timed one by one: prefill (+ the first sample), then per fed token its
    feed and the next sample -> (prefill ms, mean ms per fed token)."""
    cfg, generator = model.config, torch.Generator().manual_seed(0)
    banned = cfg.banned
    with torch.inference_mode():
        prompt = fused_prompt(model, frame)
        cache, start = new_cache(model.vlm), time.perf_counter()
        logits, delta = prefill(model.vlm, prompt, model.image_token_id, cache)
        sample(logits, banned, sampling, generator)
        prefill_ms, start = (time.perf_counter() - start) * 1e3, time.perf_counter()
        for i, token in enumerate(tokens[:fed]):
            logits = feed(model.vlm, [token], prompt.input_ids.shape[1] + i, delta, cache)
            sample(logits, banned, sampling, generator)
    return prefill_ms, (time.perf_counter() - start) * 1e3 / max(fed, 1)


def native_phases(model, frame, sampling, flow, guidance, seed) -> tuple[dict, object]:
    """run_reference on one frame -> (ms per phase: prefill, per decode step, unguided, per Euler step, total;
    the result)."""
    result = run_reference(model, frame, seed, sampling, flow, guidance)
    fed = len(fed_tokens(result.tokens, sampling.max_new_tokens))
    prefill_ms, decode_ms = _reasoning_phases(model, frame, result.tokens, fed, sampling)
    t = result.timings
    return {"prefill": prefill_ms, "decode": decode_ms, "unguided": t["unguided_ms"],
            "expert": t["flow_ms"] / flow.steps, "transport": 0.0, "total": t["total_ms"]}, result


def _split(model, frame, p, sampling, flow, guidance, seed, serialise) -> tuple[dict, object]:
    out = run_split(model, frame, p, seed, sampling, flow, guidance, roundtrip if serialise else None)
    fed = len(out.timings["prefix"].get("decode", []))

    def both(phase):
        return out.phase_ms("prefix", phase) + out.phase_ms("suffix", phase)

    row = {"prefill": both("prefill"), "decode": both("decode") / max(fed, 1), "unguided": both("unguided"),
           "expert": both("expert") / flow.steps, "transport": out.result.timings["transport_ms"],
           "total": out.result.timings["total_ms"],
           "prefix_share": {ph: out.phase_ms("prefix", ph) / max(both(ph), 1e-9) for ph in ("prefill", "decode",
                                                                                            "expert")}}
    return row, out


def _median(rows: list[dict]) -> dict:
    keys = [k for k in rows[0] if isinstance(rows[0][k], float)]
    med = {k: statistics.median(r[k] for r in rows) for k in keys}
    return {**rows[-1], **med}


def run_phases(reasoning: int = 16, steps: int = 10, partitions=None, repeats: int = 3, guidance: bool = False,
               serialise: bool = False, seed: int = 0) -> dict:
    """Median of `repeats` frames per mode (after one warm-up) -> the report (JSON-ready; table() prints it)."""
    model, frame = reduced_model(seed), reduced_inputs(route=True, seed=seed)
    blocks = model.config.vlm.text_config.num_hidden_layers
    partitions = list(partitions) if partitions is not None else [0, blocks // 2, blocks]
    sampling = Sampling(max_new_tokens=reasoning)
    flow = FlowSettings(steps=steps, guidance_weight=2.0 if guidance else 1.0)
    native_phases(model, frame, sampling, flow, guidance, seed)                              # warm-up
    runs = [native_phases(model, frame, sampling, flow, guidance, seed) for _ in range(repeats)]
    native, reference = _median([r for r, _ in runs]), runs[-1][1]
    rows = {"native": dict(native, exact=True)}
    for p in partitions:
        split_runs = [_split(model, frame, p, sampling, flow, guidance, seed, serialise) for _ in range(repeats)]
        last = split_runs[-1][1].result
        exact = last.tokens == reference.tokens and torch.equal(last.xyz, reference.xyz)
        rows[f"split p={p}"] = dict(_median([r for r, _ in split_runs]), exact=exact)
    report = {"blocks": blocks, "prompt_tokens": int(frame.input_ids.shape[1]), "tokens": len(reference.tokens),
              "stopped": reference.stopped, "steps": steps, "guidance": guidance, "serialise": serialise,
              "threads": torch.get_num_threads(), "repeats": repeats, "rows": rows,
              "exact": all(row["exact"] for row in rows.values())}
    return report


def table(report: dict) -> list[str]:
    lines = [f"reduced Alpamayo 1.5: {report['blocks']} blocks, prompt {report['prompt_tokens']} tokens, "
             f"{report['tokens']} reasoning tokens, {report['steps']} Euler steps, guidance {report['guidance']}, "
             f"{report['threads']} thread(s), median of {report['repeats']} (ms)",
             f"{'mode':<12}{'prefill':>9}{'decode/tok':>11}{'unguided':>9}{'expert/step':>12}{'transport':>10}"
             f"{'total':>9}  exact  prefix share (prefill/decode/expert)"]
    for name, r in report["rows"].items():
        share = r.get("prefix_share")
        shares = "/".join(f"{share[k]:.2f}" for k in ("prefill", "decode", "expert")) if share else "-"
        lines.append(f"{name:<12}{r['prefill']:>9.1f}{r['decode']:>11.2f}{r['unguided']:>9.1f}{r['expert']:>12.2f}"
                     f"{r['transport']:>10.2f}{r['total']:>9.1f}  {'yes' if r['exact'] else 'NO':<5}  {shares}")
    return lines
