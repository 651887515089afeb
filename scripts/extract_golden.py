#!/usr/bin/env python3
"""Golden outputs of ORION's / MindDrive's own planner code at the tiny size (issue 56), for the converted model.

    python scripts/extract_golden.py --model orion --snapshot /path/to/Orion_25@2eddb62 OUT.json.gz

Run it with the same Python as extract_manifest.py (the versions the authors pin). It builds the authors' tiny
detector exactly as extract_manifest.py does (their `build_model`, same stubs and size patches), loads into it
the values the package's tests give the tiny manifest's tensors (test/manifest_checkpoint.py, seeded per key, at
the spread SCALE), and
runs the authors' own planner methods on seeded inputs, in eval mode, one sample at a time (their h0 reshape in
`future_states_predict` assumes batch 1):
- both: `distribution_forward` (the latent noise passed in, as their `noise` argument allows), then
  `future_states_predict`, then `ego_fut_decoder` per step (ORION orion.py L798-819; MindDrive minddrive.py
  L1042-1072): every mode's per-step offsets (M, T, 2);
- MindDrive also its path branch (`pw_distribution_forward`, `pw_future_states_predict`, `pw_ego_fut_decoder`,
  minddrive.py L1053-1078) at the second query feature, and its speed decision: their
  `inference_action_distribution` (llava_qwen.py L488-558) with the `decision_expert` adapter set, on seeded
  token ids and scene tokens (spliced at their image placeholder by llava_arch.py L49-; with no scene tokens their
  call passes both ids and embeddings to the Qwen2 model, which refuses it); the LLM's final hidden states it computed (caught by a hook on their Qwen2 model) are saved as
  the input the package's head reads, its 7 log-probabilities as the output.
Inputs and outputs are written as JSON (float32 values, exact in JSON's doubles). Nothing here is the package's."""

from __future__ import annotations

import argparse
import gzip
import json
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
sys.path.insert(0, str(HERE.parent / "test"))

import extract_manifest  # noqa: E402
from manifest_checkpoint import load_manifest, state_from_manifest  # noqa: E402

FORMAT, SEED, CASES = "hybrid_vla_golden/1", 56, 3
# the seeded values' spread: at manifest_checkpoint's default 0.05 the tiny planner's output hardly depends on its
# latent (noise x 1.1 moves it by 2e-7) or its first GRU layer, so a comparison could not tell them wrong; at 0.15
# the offsets are metres and every part moves them (measured: docs/CHECKPOINTS.md, ORION and MindDrive)
SCALE = 0.15
LATENT = 32
IMAGE_TOKEN = -200            # their IMAGE_TOKEN_INDEX: where prepare_inputs_labels_for_multimodal splices
# the detector's modules the golden runs read, loaded from the manifest's seeded state
MODULES = {"orion": ["present_distribution", "predict_model", "ego_fut_decoder"],
           "minddrive": ["present_distribution", "predict_model", "ego_fut_decoder", "pw_present_distribution",
                         "pw_predict_model", "pw_ego_fut_decoder", "lm_head"]}
FOLLOWS = {"orion": ["mmcv/models/detectors/orion.py L798-819 (simple_test_pts, VAE branch)",
                     "mmcv/models/detectors/orion.py L1171-1188 (future_states_predict)",
                     "mmcv/models/detectors/orion.py L1388-1421 (distribution_forward)"],
           "minddrive": ["mmcv/models/detectors/minddrive.py L1042-1078 (simple_test_pts, both branches)",
                         "mmcv/models/detectors/minddrive.py L1846-1900 (future_states_predict, pw_)",
                         "mmcv/models/detectors/minddrive.py L1965-2075 (distribution_forward, pw_)",
                         "mmcv/utils/llava_qwen.py L488-558 (inference_action_distribution)"]}


def load_seeded(detector, model: str, manifest: dict) -> None:
    """The manifest's seeded values into the modules the golden runs read; every key of theirs must be there."""
    state = state_from_manifest(manifest, SCALE)
    for name in MODULES[model]:
        module, prefix = getattr(detector, name), name + "."
        part = {k[len(prefix):]: v for k, v in state.items() if k.startswith(prefix)}
        result = module.load_state_dict(part, strict=False)
        persistent = set(module.state_dict())
        unexpected = [k for k in result.unexpected_keys if k in persistent]
        assert not result.missing_keys and not unexpected, (name, result.missing_keys[:5], unexpected[:5])


def branch(detector, feature, noise, prefix: str, steps: int, modes: int):
    """The authors' VAE branch on one feature (1, H) and latent noise (1, 1, L) -> offsets (M, T, 2)."""
    import torch
    current = feature.unsqueeze(1)                                                   # (1, 1, H)
    distribution = getattr(detector, f"{prefix}distribution_forward")
    predict = getattr(detector, f"{prefix}future_states_predict")
    decode = getattr(detector, f"{prefix}ego_fut_decoder")
    sample, _ = distribution(current, None, noise)
    states, _ = predict(1, sample, current, current)
    query = states[:, :, 0, :].unsqueeze(1).permute(0, 2, 1, 3)
    per_step = [decode(query[i]).reshape(1, modes, 2) for i in range(steps)]
    return torch.stack(per_step, dim=2)[0]


def plan_cases(detector, model: str, generator, width: int) -> list:
    """CASES seeded features through the authors' branches; each case's latent noise drawn from its own seed
    (N(0, 1) of (1, 1, L) from torch.Generator().manual_seed(seed), the speed branch's first), so a head that draws
    its noise from a frame's seed that way can be run whole on it."""
    import torch
    detector.fut_ts = 6
    cases = []
    for index in range(CASES):
        seed = SEED + 1 + index
        features = torch.randn(2 if model == "minddrive" else 1, width, generator=generator)
        draws = torch.Generator().manual_seed(seed)
        noise = torch.randn(1, 1, LATENT, generator=draws)
        case = {"noise_seed": seed, "feature": features[0].tolist(), "noise": noise.flatten().tolist(),
                "offsets": branch(detector, features[:1], noise, "", 6, detector.ego_fut_mode).tolist()}
        if model == "minddrive":
            path_noise = torch.randn(1, 1, LATENT, generator=draws)
            case.update(path_feature=features[1].tolist(), path_noise=path_noise.flatten().tolist(),
                        path_offsets=branch(detector, features[1:], path_noise, "pw_", detector.fut_ps,
                                            detector.pw_ego_fut_mode).tolist())
        cases.append(case)
    return cases


def decision_case(detector, generator, length: int = 12, image_tokens: int = 4) -> dict:
    """Their decision on a seeded prompt: token ids with their image placeholder (-200) at the second place, the
    scene tokens spliced there (seeded), a speed token and a closing token last, as their QA ends; with the final
    hidden states their LLM computed for it."""
    import torch
    lm = detector.lm_head
    lm.set_adapter("decision_expert")
    vocab = lm.get_input_embeddings().weight.shape[0]
    ids = torch.randint(0, vocab, (1, length), generator=generator)
    ids[0, 1], ids[0, -2] = IMAGE_TOKEN, detector.meta_action_token_idx[0]
    scene = torch.randn(1, image_tokens, lm.get_input_embeddings().weight.shape[1], generator=generator)
    caught = {}

    def catch(module, args, out) -> None:           # returns None: the output goes on unchanged
        caught["hidden"] = out[0].detach()
    hook = lm.get_base_model().get_model().register_forward_hook(catch)
    try:
        log_probs, _, _ = lm.inference_action_distribution(inputs=ids, images=scene)
    finally:
        hook.remove()
    return {"adapter": "decision_expert", "input_ids": ids[0].tolist(), "scene_tokens": scene[0].tolist(),
            "tokens": list(lm.config.meta_action_token_idx[:7]), "hidden": caught["hidden"][0].tolist(),
            "log_probs": log_probs[0].tolist()}


def golden(model: str, snapshot: Path, commit: str | None) -> dict:
    import torch
    manifest = load_manifest(f"{model}_tiny")
    _mmcv, detector, _cfg, patches = extract_manifest.build(model, snapshot, tiny=True)
    load_seeded(detector, model, manifest)
    detector.eval()
    generator = torch.Generator().manual_seed(SEED)
    width = manifest["llm_config"]["hidden_size"]
    with torch.no_grad():
        data = {"format": FORMAT, "model": model, "manifest": f"{model}_tiny", "scale": SCALE, "seed": SEED,
                "snapshot": {"config": extract_manifest.CONFIG[model],
                             "commit": commit or extract_manifest.snapshot_commit(snapshot)},
                "versions": extract_manifest.versions(), "follows": FOLLOWS[model],
                "size_patches": [{"regex": p, "replacement": r} for p, r in patches],
                "cases": plan_cases(detector, model, generator, width)}
        if model == "minddrive":
            data["decision"] = decision_case(detector, generator)
    return data


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--model", choices=sorted(extract_manifest.CONFIG), required=True)
    parser.add_argument("--snapshot", type=Path, required=True, help="the authors' repository at the named commit")
    parser.add_argument("--commit", default=None, help="the snapshot's commit (when it is not a git work tree)")
    parser.add_argument("out", type=Path, help="the golden data (.json, or .json.gz)")
    args = parser.parse_args(argv)
    data = golden(args.model, args.snapshot, args.commit)
    text = json.dumps(data, separators=(",", ":"))
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_bytes(gzip.compress(text.encode(), mtime=0) if args.out.suffix == ".gz" else text.encode())
    print(f"{args.out}: {len(data['cases'])} planner cases" + (", a decision" if "decision" in data else ""))
    return 0


if __name__ == "__main__":
    sys.exit(main())
