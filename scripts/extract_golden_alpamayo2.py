#!/usr/bin/env python3
"""Golden inputs and outputs of Alpamayo 2 Super's own inference code at the tiny size (issue 55), for the package's
reading of that release (test/test_authors_alpamayo2.py).

    python scripts/extract_golden_alpamayo2.py --snapshot /path/to/alpamayo2@beb2977 OUT.json.gz

Run it with the same Python as extract_manifest.py (transformers 4.57.1, hydra-core). It builds the authors'
`Alpamayo2Super` from the tiny manifest's config as manifest/alpamayo2.py does (same stubs and stand-in tokenizer),
loads into it the values the package's tests give the tiny manifest's tensors (test/manifest_checkpoint.py, seeded
per key, at the spread SCALE), and runs their `sample_trajectories_from_data` on seeded inputs in the published
layout (6 cameras x 4 frames of one merged token each, 48 history placeholders, 16 history poses): the shared
prefill, `generate` with their logits processors and StopAfterEOS, the expert over the cache, their flow matching
and `action_to_traj`. top_p 1e-6 keeps only the most likely token (their TopPLogitsWarper and the package's
filter both keep at least that one), so the sampled reasoning does not depend on a random generator; the flow's
initial noise (their torch.randn) is recorded. Written as JSON (float32 values exact in JSON's doubles): the
inputs (the pixels as the seed and shape of the CPU torch.randn that drew them), the noise, each Euler step's x, t
and velocity (their step_fn), the sampled actions, the tokens `generate` returned after the prompt, and pred_xyz /
pred_rot. The steps are what a comparison can hold to float32's rounding: this random tiny expert's flow amplifies a
1e-6 difference in its first velocity to 0.2 in the actions after 10 steps (its Fourier features of x run to
frequency 100), so the whole sampled trajectory of another implementation cannot be held to it. Nothing here is the
package's."""

from __future__ import annotations

import argparse
import gzip
import json
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE / "manifest"))
sys.path.insert(0, str(HERE.parent / "test"))

from manifest_checkpoint import load_manifest, state_from_manifest  # noqa: E402

FORMAT, SEED, SCALE, MAX_TOKENS = "hybrid_vla_golden/1", 55, 0.15, 8
CAMERAS, FRAMES = 6, 4


def inputs(manifest: dict) -> dict:
    """Seeded inputs in the published layout, with the ids the authors' code assigned (traj_ids, the backbone's)."""
    import torch
    ids_of, vlm = manifest["traj_ids"], manifest["backbone_config"]
    gen = torch.Generator().manual_seed(SEED)
    ids = list(range(10, 22))
    for _ in range(CAMERAS * FRAMES):
        ids += [vlm["vision_start_token_id"], vlm["image_token_id"], vlm["vision_end_token_id"]]
    tokens = manifest["config_json"]["tokens_per_history_traj"]
    ids += [ids_of["history_start"]] + [ids_of["history_pad"]] * tokens + [ids_of["history_end"]] + list(range(50, 60))
    t = torch.arange(-15, 1, dtype=torch.float32) * 0.1
    xyz = torch.stack([5.0 * t, 0.3 * t * t, torch.zeros(16)], -1).view(1, 1, 16, 3)
    patch, images = vlm["vision_config"]["patch_size"], CAMERAS * FRAMES
    return {"input_ids": torch.tensor([ids]), "image_grid_thw": torch.tensor([[1, 2, 2]] * images),
            "pixel_values": torch.randn(images * 4, 3 * 2 * patch * patch, generator=gen),
            "ego_history_xyz": xyz, "ego_history_rot": torch.eye(3).expand(1, 1, 16, 3, 3).clone()}


def run(snapshot: Path, manifest: dict) -> dict:
    import torch
    import alpamayo2
    import alpamayo2_sizes
    import alpamayo as released
    model_cls, config_cls = alpamayo2.import_authors(snapshot)
    sizes = alpamayo2_sizes.TINY
    alpamayo2.patch_tokenizer(sizes["tokenizer_base"], sizes["vlm"])
    import tempfile
    work = Path(tempfile.mkdtemp(prefix="alpamayo2_golden_"))
    with released._working_dir(work):
        alpamayo2._write_backbone(work, sizes["release"]["vlm_name_or_path"], sizes["vlm"])
        model = model_cls(config_cls(**alpamayo2_sizes.release_kwargs(tiny=True))).eval()
    missing, unexpected = model.load_state_dict(state_from_manifest(manifest, SCALE), strict=False)
    assert not missing and not unexpected, (missing, unexpected)
    model.tokenizer.pad_token_id = 0   # the stand-in has none; generate pads only after the stop (not recorded)
    data = inputs(manifest)
    tokenized = {k: data[k] for k in ("input_ids", "image_grid_thw", "pixel_values")}
    tokenized["attention_mask"] = torch.ones_like(data["input_ids"])
    caught = {}
    generate = model.vlm.generate

    def recording_generate(*args, **kwargs):
        out = generate(*args, **kwargs)
        caught["sequences"] = out.sequences.clone()
        return out
    model.vlm.generate = recording_generate
    flow_module = sys.modules["alpamayo2_super.diffusion.flow_matching"]
    randn = flow_module.torch.randn

    def recording_randn(*args, **kwargs):
        caught["noise"] = randn(*args, **kwargs)
        return caught["noise"].clone()
    flow_module.torch.randn = recording_randn
    sample = model.expert.diffusion.sample

    def recording_sample(*args, step_fn, **kwargs):
        def recording_step(x, t):
            v = step_fn(x=x, t=t)
            caught.setdefault("steps", []).append({"x": x[0].tolist(), "t": float(t.flatten()[0]), "v": v[0].tolist()})
            return v
        caught["actions"] = sample(*args, step_fn=recording_step, **kwargs)
        return caught["actions"].clone()
    model.expert.diffusion.sample = recording_sample
    torch.manual_seed(SEED)
    try:
        xyz, rot, _ = model.sample_trajectories_from_data(
            {"tokenized_data": tokenized, "ego_history_xyz": data["ego_history_xyz"],
             "ego_history_rot": data["ego_history_rot"]}, top_p=1e-6, max_generation_length=MAX_TOKENS)
    finally:
        flow_module.torch.randn = randn
    prompt = data["input_ids"].shape[1]
    recorded = {k: v.tolist() for k, v in data.items() if k != "pixel_values"}
    recorded["pixel_values"] = {"seed": SEED, "shape": list(data["pixel_values"].shape)}   # torch.randn's, regenerated
    return {"inputs": recorded, "noise": caught["noise"].tolist(), "steps": caught["steps"],
            "actions": caught["actions"][0].tolist(),
            "tokens": caught["sequences"][0, prompt:].tolist(), "pred_xyz": xyz[0, 0, 0].tolist(),
            "pred_rot": rot[0, 0, 0].tolist()}


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--snapshot", type=Path, required=True, help="NVlabs/alpamayo2 at the manifest's commit")
    parser.add_argument("out", type=Path, help="the golden file (.json.gz)")
    args = parser.parse_args(argv)
    manifest = load_manifest("alpamayo2_super_tiny")
    golden = {"format": FORMAT, "model": "alpamayo2_super", "snapshot": manifest["snapshot"], "seed": SEED,
              "scale": SCALE, "top_p": 1e-6, "max_new_tokens": MAX_TOKENS, **run(args.snapshot, manifest)}
    text = json.dumps(golden, separators=(",", ":"))
    args.out.write_bytes(gzip.compress(text.encode(), mtime=0))
    print(f"{args.out}: {len(golden['tokens'])} tokens, trajectory of {len(golden['pred_xyz'])} points")
    return 0


if __name__ == "__main__":
    sys.exit(main())
