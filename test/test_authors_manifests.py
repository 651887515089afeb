"""ORION and MindDrive as their authors' own code saves them (issue 56): checkpoints built from the manifests that
scripts/extract_manifest.py wrote from the authors' module trees (ORION: RenTianchi-cityu/Orion_25@2eddb62 with
transformers 4.31.0 / peft 0.12.0; MindDrive: xiaomi-mlab/MindDrive@1a4085d with transformers 4.45.2 / peft
0.12.0), not from this package's own modules. The tiny one converts with the shipped mapping, only its sizes
changed by `convert --set`, and verifies exact at every cut; the released one's keys and shapes meet the model the
shipped mapping describes, on the meta device."""

import json

import pytest
import torch

from hybrid_vla_ros.convert import convert_checkpoint, load_mapping
from hybrid_vla_ros.convert.route import route
from hybrid_vla_ros.engine.verify import verify_partitions
from hybrid_vla_ros.model.checkpoint import load_checkpoint
from hybrid_vla_ros.model.checkpoint_files import HEAD_PREFIX, SCENE_PREFIX
from hybrid_vla_ros.model.families import load_backbone_config, spec_fields
from hybrid_vla_ros.model.seeded import parameters_on_meta
from hybrid_vla_ros.model.spec import VLASpec
from hybrid_vla_ros.model.vla import VLAModel
from manifest_checkpoint import MANIFESTS, llm_config_dir, load_manifest, sets, write_pth

MODELS = sorted(n for n in ("minddrive", "orion") if (MANIFESTS / f"{n}_tiny.json.gz").is_file())
# the one-layer decoders the authors build with FlashMHA(embed_dims, num_heads, dropout=0.0): no attention bias
QT = {"orion": ("memory_decoder_cq", "memory_decoder_mq", "motion_decoder"),
      "minddrive": ("memory_decoder_cq", "memory_decoder_mq", "motion_decoder", "motion_map_decoder")}


def test_the_manifests_were_extracted_from_the_authors_code_at_the_named_commits():
    assert MODELS == ["minddrive", "orion"] or MODELS == ["orion"], MODELS
    commits = {"orion": "2eddb62", "minddrive": "1a4085d"}
    for name in MODELS:
        for size in ("tiny", "released"):
            manifest = load_manifest(f"{name}_{size}")
            assert manifest["snapshot"]["commit"].startswith(commits[name]) and manifest["size"] == size
            assert manifest["versions"]["peft"] == "0.12.0" and "flash_attn" in manifest["stubbed_modules"]
            shapes = {k: s for k, s, *_ in manifest["tensors"]}
            biased = [k for k in shapes if k.startswith(tuple(f"pts_bbox_head.{d}." for d in QT[name]))
                      and k.endswith(("in_proj_bias", "out_proj.bias"))]
            assert not biased and shapes["pts_bbox_head.traj_cls_branches.0.6.weight"][0] == 1


@pytest.mark.parametrize("name", MODELS)
def test_the_authors_tiny_checkpoint_converts_with_the_shipped_mapping_and_verifies_exact(name, tmp_path):
    manifest = load_manifest(f"{name}_tiny")
    state = write_pth(manifest, tmp_path / f"{name}.pth")
    report = convert_checkpoint("pth", tmp_path / f"{name}.pth", name, tmp_path / "out",
                                config_dir=llm_config_dir(manifest, tmp_path / "llm"), sets=sets(manifest))
    dropped = set(report.dropped)                      # MindDrive's RL critic value_net has LoRA keys of its own
    lora = sum(".lora_" in k for k in state if k not in dropped)   # merged (ORION) or kept apart (MindDrive)
    assert sum(report.counts.values()) + len(report.dropped) + lora == len(state)
    assert sum(report.adapters.values()) in (0, lora)
    assert not [k for k in report.unread if not k.startswith("scene_encoder.safetensors:")]
    model = load_checkpoint(tmp_path / "out")
    result = verify_partitions(model, frames=2)
    assert [r["partition"] for r in result["results"]] == list(range(model.num_blocks + 1))
    assert result["max_abs_diff"] == 0.0, result["results"]


def _spec(mapping, config, routed, name) -> VLASpec:
    fields = {k: v for k, v in mapping.action_head.items() if k not in ("plan_token",)}
    lora = {}
    for tensors in routed.adapters.values():
        a = next(t for k, t in tensors.items() if k.endswith("lora_A.weight"))
        lora = {"lora_rank": a.shape[0], "lora_alpha": float(mapping.adapters["lora_alpha"]),
                "lora_targets": sorted({k.rsplit(".", 3)[-3] for k in tensors})}
    return VLASpec(**{**spec_fields(config), **fields, **lora, "name": name, "real_size": True,
                      "scene_encoder": mapping.scene_encoder["plugin"], "scene_config": mapping.scene_encoder["config"]})


@pytest.mark.parametrize("name", MODELS)
def test_the_released_manifest_meets_the_shipped_mapping_on_the_meta_device(name, tmp_path):
    manifest = load_manifest(f"{name}_released")
    mapping = load_mapping(name)
    routed = route({k: torch.empty(s, dtype=getattr(torch, d), device="meta")
                    for k, s, d, *_ in manifest["tensors"]}, mapping)
    folder = llm_config_dir(manifest, tmp_path / "llm")
    config_json = {**json.loads((folder / "config.json").read_text()), **mapping.config_overrides}
    (folder / "config.json").write_text(json.dumps(config_json))
    config = load_backbone_config(folder)
    with parameters_on_meta():
        model = VLAModel(_spec(mapping, config, routed, name), backbone_config=config)
    parts, wrong = routed.parts, []
    for param, tensor in model.named_parameters():
        if param.startswith(HEAD_PREFIX):
            got = parts["action_head"].get(param[len(HEAD_PREFIX):])
        elif param.startswith(SCENE_PREFIX):
            got = parts["scene_encoder"].get(param[len(SCENE_PREFIX):])
        elif ".lora_" in param:
            continue                                       # the adapters' shapes: checked below
        else:
            ours = param[len("backbone."):]
            got = parts["backbone"].get(ours, parts["backbone"].get(ours.removeprefix("model.")))
        if got is None or tuple(got.shape) != tuple(tensor.shape):
            wrong.append((param, None if got is None else tuple(got.shape), tuple(tensor.shape)))
    assert wrong == []
    for adapter, tensors in routed.adapters.items():
        for key, a in tensors.items():
            if key.endswith("lora_A.weight"):
                base = parts["backbone"][key[len("base_model.model."):-len(".lora_A.weight")] + ".weight"]
                assert a.shape[1] == base.shape[1] and tensors[key.replace("lora_A", "lora_B")].shape[0] == base.shape[0]
