"""Native (run_reference) vs split-serial Alpamayo, per phase, on a reduced model built from a config (seeded
weights, nothing read from disk): Qwen3-VL with 8 blocks of hidden 512 (the released 36 x 4096), DeepStack after
blocks 0-2, a 256-wide expert (2048), 64 waypoints, 4 cameras x 4 frames of 64 x 64 px (4 tokens each).

    python -m hybrid_vla_ros.engine.expert_split.bench --reasoning 16 --steps 10 [--guidance] [--serialise]

Native phases: prefill and each decode step (feed + sample) timed by calling run_reference's own functions
one by one for the tokens it sampled; expert per Euler step and the total from run_reference's timings.
Split phases: the prefix's plus the suffix's time per phase (serial: one side waits while the other works),
the transport's apart."""

from __future__ import annotations

import argparse
import json
import statistics
import tempfile
import time
from pathlib import Path

import torch

from ...model.plugins.alpamayo.config import SPECIAL_KEYS, parse
from ...model.plugins.alpamayo.decode import Sampling, feed, new_cache, prefill, sample
from ...model.plugins.alpamayo.flow import FlowSettings
from ...model.plugins.alpamayo.reference import AlpamayoInputs, fused_prompt, run_reference
from ...model.plugins.alpamayo.release import build
from .runner import run_split
from .wire import roundtrip

BASE_VOCAB, TRAJ_VOCAB, BINS = 4096, 1000, 500
VISION_START, VISION_END, IMAGE_PAD, VIDEO_PAD = 4090, 4091, 4092, 4093
SPECIAL = {k: BASE_VOCAB + TRAJ_VOCAB + i for i, k in enumerate(SPECIAL_KEYS)}
TEXT = dict(hidden_size=512, num_hidden_layers=8, num_attention_heads=8, num_key_value_heads=4, head_dim=64,
            intermediate_size=1536, vocab_size=BASE_VOCAB + TRAJ_VOCAB + len(SPECIAL_KEYS), rms_norm_eps=1e-6,
            max_position_embeddings=8192, rope_parameters={"rope_type": "default", "rope_theta": 5_000_000.0,
                                                           "mrope_interleaved": True, "mrope_section": [12, 10, 10]})
VISION = dict(depth=4, hidden_size=256, intermediate_size=512, num_heads=4, patch_size=16, spatial_merge_size=2,
              temporal_patch_size=2, out_hidden_size=512, num_position_embeddings=2304,
              deepstack_visual_indexes=[1, 2, 3])


def reduced_config() -> dict:
    """An alpamayo1_5 config.json at reduced size (the fields the release saves)."""
    ids = {k.replace("traj_", ""): SPECIAL[k] for k in ("traj_history", "traj_future", "traj_history_start",
                                                          "traj_future_start", "traj_history_end", "traj_future_end")}
    return {"model_type": "alpamayo1_5", "vlm_name_or_path": "vlm", "add_special_tokens": True,
            "traj_vocab_size": TRAJ_VOCAB, "vocab_size": TEXT["vocab_size"], "traj_token_start_idx": BASE_VOCAB,
            "traj_token_ids": ids, "traj_tokenizer_cfg": {"num_bins": BINS},
            "hist_traj_tokenizer_cfg": {"num_bins": BINS},
            "expert_cfg": {"hidden_size": 256, "intermediate_size": 768, "num_attention_heads": 4},
            "action_space_cfg": {"n_waypoints": 64, "dt": 0.1}, "diffusion_cfg": {"num_inference_steps": 10},
            "action_in_proj_cfg": {"num_enc_layers": 4, "hidden_size": 256, "max_freq": 100.0, "num_fourier_feats": 20}}


def reduced_model(seed: int = 0):
    from transformers.models.qwen3_vl import Qwen3VLConfig
    with tempfile.TemporaryDirectory() as tmp:
        Qwen3VLConfig(text_config=TEXT, vision_config=VISION, image_token_id=IMAGE_PAD, video_token_id=VIDEO_PAD,
                      vision_start_token_id=VISION_START, vision_end_token_id=VISION_END).save_pretrained(
            Path(tmp) / "vlm")
        config = parse(reduced_config(), Path(tmp))
    torch.manual_seed(seed)
    return build(config, meta=False).eval()


def reduced_inputs(route: bool = True, seed: int = 0) -> AlpamayoInputs:
    """16 images (4 x 4 patches of 16 px -> 4 tokens), 48 history pads, a route span, 16 poses at 5 m/s."""
    gen = torch.Generator().manual_seed(seed)
    ids = list(range(10, 30))
    for _ in range(16):
        ids += [VISION_START] + [IMAGE_PAD] * 4 + [VISION_END]
    ids += [SPECIAL["traj_history_start"]] + [SPECIAL["traj_history"]] * 48 + [SPECIAL["traj_history_end"]]
    ids += [SPECIAL["route_start"], 40, 41, 42, SPECIAL["route_end"]] if route else []
    ids += list(range(50, 60)) + [SPECIAL["cot_start"]]
    t = torch.arange(-15, 1, dtype=torch.float32) * 0.1                                       # (16,)
    xyz = torch.stack([5.0 * t, torch.zeros(16), torch.zeros(16)], -1)                        # (16, 3)
    return AlpamayoInputs(torch.tensor([ids]), torch.randn(16 * 16, 3 * 2 * 16 * 16, generator=gen) * 0.5,
                          torch.tensor([[1, 4, 4]] * 16), xyz.view(1, 1, 16, 3),
                          torch.eye(3).expand(1, 1, 16, 3, 3).clone())


def _reasoning_phases(model, frame, tokens: list[int], fed: int, sampling: Sampling) -> tuple[float, float]:
    """run_reference's own functions, timed one by one: prefill (+ the first sample), then per fed token its
    feed and the next sample -> (prefill ms, mean ms per fed token)."""
    cfg, generator = model.config, torch.Generator().manual_seed(0)
    banned = (cfg.traj_token_start_idx, cfg.traj_token_start_idx + cfg.traj_vocab_size)
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


def _native(model, frame, sampling, flow, guidance, seed) -> tuple[dict, object]:
    result = run_reference(model, frame, seed, sampling, flow, guidance)
    fed = len(result.tokens) - (0 if result.stopped else 1)
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


def bench(reasoning: int = 16, steps: int = 10, partitions=None, repeats: int = 3, guidance: bool = False,
          serialise: bool = False, seed: int = 0, out=print) -> dict:
    """Median of `repeats` frames per mode (after one warm-up); prints a table, returns the report."""
    model, frame = reduced_model(seed), reduced_inputs(route=True, seed=seed)
    blocks = model.config.vlm.text_config.num_hidden_layers
    partitions = list(partitions) if partitions is not None else [0, blocks // 2, blocks]
    sampling = Sampling(max_new_tokens=reasoning)
    flow = FlowSettings(steps=steps, guidance_weight=2.0 if guidance else 1.0)
    _native(model, frame, sampling, flow, guidance, seed)                                    # warm-up
    runs = [_native(model, frame, sampling, flow, guidance, seed) for _ in range(repeats)]
    native, reference = _median([r for r, _ in runs]), runs[-1][1]
    rows = {"native": dict(native, exact=True)}
    for p in partitions:
        split_runs = [_split(model, frame, p, sampling, flow, guidance, seed, serialise) for _ in range(repeats)]
        last = split_runs[-1][1].result
        exact = last.tokens == reference.tokens and torch.equal(last.xyz, reference.xyz)
        rows[f"split p={p}"] = dict(_median([r for r, _ in split_runs]), exact=exact)
    report = {"blocks": blocks, "prompt_tokens": int(frame.input_ids.shape[1]), "tokens": len(reference.tokens),
              "stopped": reference.stopped, "steps": steps, "guidance": guidance, "serialise": serialise,
              "threads": torch.get_num_threads(), "repeats": repeats, "rows": rows}
    out("\n".join(table(report)))
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


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--reasoning", type=int, default=16, help="max reasoning tokens (max_new_tokens)")
    parser.add_argument("--steps", type=int, default=10, help="Euler steps")
    parser.add_argument("--partitions", default="", help="comma-separated cuts (default 0, L/2, L)")
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--guidance", action="store_true", help="1.5's classifier-free guidance (weight 2)")
    parser.add_argument("--serialise", action="store_true", help="every crossing through wire.py bytes")
    parser.add_argument("--json", default="", help="write the report here")
    args = parser.parse_args(argv)
    cuts = [int(p) for p in args.partitions.split(",") if p] or None
    report = bench(args.reasoning, args.steps, cuts, args.repeats, args.guidance, args.serialise)
    if args.json:
        Path(args.json).write_text(json.dumps(report, indent=1))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
