"""ReCogDrive as its authors' own code saves it (issue 56), from the manifests scripts/extract_manifest.py wrote
(xiaomi-research/recogdrive@79a553b as NIyueeE/recogdrive holds it, transformers 4.37.2), not from this package's
module tree: the planner, `ReCogDriveAgent` in their `AgentLightningModule` written by a real Lightning Trainer, and
the VLM, their `InternVLChatModel` (internvl_chat/) saved by its own `save_pretrained`. The tiny VLM directory and
tiny planner .ckpt built from them (the DiT preset and feature_encoder's VLM width patched to the tiny sizes,
recorded in the manifests) convert together with the shipped mapping through the documented `--also ckpt:` and
verify exact at every cut; at the released size (the 2B VLM on InternVL3-2B's shapes, the 'small' planner) the
keys and shapes the shipped mapping routes are the package's model's, on the meta device."""

import json

import torch
import yaml

from hybrid_vla_ros.convert import convert_checkpoint, load_mapping
from hybrid_vla_ros.convert.internvl_chat import native_config, native_tensors
from hybrid_vla_ros.convert.route import route
from hybrid_vla_ros.engine.verify import verify_partitions
from hybrid_vla_ros.model.checkpoint import load_checkpoint
from hybrid_vla_ros.model.families import get_family, load_backbone_config, spec_fields
from hybrid_vla_ros.model.load import load_vla
from hybrid_vla_ros.model.plugins.diffusion_head import DdimPlannerHead
from hybrid_vla_ros.model.seeded import parameters_on_meta
from hybrid_vla_ros.model.spec import VLASpec
from hybrid_vla_ros.model.vla import VLAModel
from manifest_checkpoint import load_manifest, meta_model_check, state_from_manifest, write_pretrained
from test_published_recogdrive import mapping_for_tiny

IMAGE_TOKEN = get_family("internvl").special_token_fields["image_token_id"]   # the built-in prompt's <IMG_CONTEXT>


def test_the_manifests_were_extracted_from_the_authors_code_at_the_named_commit():
    for size in ("tiny", "released"):
        manifest = load_manifest(f"recogdrive_{size}")
        assert manifest["snapshot"]["commit"].startswith("79a553b") and manifest["size"] == size
        assert manifest["versions"]["transformers"] == "4.37.2" and "nuplan" in manifest["stubbed_modules"]
        assert {"state_dict", "epoch", "global_step", "pytorch-lightning_version"} <= set(
            manifest["container"]["top_level"])                        # a Lightning Trainer's file
        assert all(k.startswith("agent.action_head.") for k, *_ in manifest["tensors"])
    shapes = {k: s for k, s, *_ in load_manifest("recogdrive_released")["tensors"]}
    assert shapes["agent.action_head.feature_encoder.weight"] == [384, 1536]      # the 2B VLM's width, hard-coded


def test_the_vlm_manifests_were_extracted_from_the_authors_internvl_chat_model():
    for size in ("tiny", "released"):
        manifest = load_manifest(f"recogdrive_vlm_{size}")
        assert manifest["snapshot"]["commit"].startswith("79a553b") and manifest["size"] == size
        assert manifest["versions"]["transformers"] == "4.37.2"
        config = manifest["config_json"]
        assert config["model_type"] == "internvl_chat" and config["architectures"] == ["InternVLChatModel"]
        assert "config.json" in manifest["container"]["saved_files"]
    assert list(load_manifest("recogdrive_vlm_tiny")["container"]["files"]) == ["model.safetensors"]
    released = load_manifest("recogdrive_vlm_released")["container"]
    assert released["index"] == ["metadata", "weight_map"] and len(released["files"]) > 1   # sharded, with an index
    shapes = {k: s for k, s, *_ in load_manifest("recogdrive_vlm_released")["tensors"]}
    assert shapes["language_model.lm_head.weight"] == [151674, 1536]           # its own head: not tied
    assert shapes["vision_model.encoder.layers.23.attn.qkv.weight"] == [3072, 1024]
    assert shapes["mlp1.1.weight"] == [1536, 4096] and len(shapes) == 685


def test_the_authors_tiny_vlm_and_planner_convert_with_the_shipped_mapping_and_verify_exact(tmp_path):
    vlm, planner = load_manifest("recogdrive_vlm_tiny"), load_manifest("recogdrive_tiny")
    spec = load_vla(preset="tiny-recogdrive").spec          # the sizes the tiny mapping takes (image, DiT)
    assert spec.hidden_size == planner["vlm_hidden"] == vlm["config_json"]["llm_config"]["hidden_size"]
    chat = write_pretrained(vlm, tmp_path / "ReCogDrive-VLM-2B")
    state = state_from_manifest(planner)
    ckpt = tmp_path / "recogdrive_agent.ckpt"
    torch.save({**{k: 0 for k in planner["container"]["top_level"]}, "state_dict": state}, ckpt)
    report = convert_checkpoint("internvl_chat", tmp_path / "ReCogDrive-VLM-2B",
                                mapping_for_tiny(tmp_path, IMAGE_TOKEN, spec), tmp_path / "out",
                                also=[("ckpt", ckpt)])
    dropped = set(report.dropped)
    assert sorted(k for k in chat if k in dropped) == ["language_model.lm_head.weight"]   # the generation head
    assert report.counts["backbone"] == len(chat) - 1 + sum(1 for k in chat if ".attn.qkv." in k) * 2
    assert sum(1 for k in state if k.startswith("agent.")) == report.counts["action_head"] + len(dropped - set(chat))
    assert not report.unread
    converted = load_checkpoint(tmp_path / "out")
    result = verify_partitions(converted, frames=2)
    assert [r["partition"] for r in result["results"]] == list(range(converted.num_blocks + 1))
    assert result["max_abs_diff"] == 0.0, result["results"]


def test_the_released_planner_meets_the_shipped_mapping_on_the_meta_device():
    manifest = load_manifest("recogdrive_released")
    mapping = load_mapping("recogdrive")
    routed = route({k: torch.empty(s, dtype=getattr(torch, d), device="meta") for k, s, d, *_ in manifest["tensors"]},
                   mapping)
    head = yaml.safe_load(open(mapping.source))["action_head"]
    config = {**head["head_config"], "num_waypoints": head["num_waypoints"], "head_hidden": head["head_hidden"],
              "query_tokens": head["query_tokens"]}
    with parameters_on_meta():
        ours = DdimPlannerHead.from_config(config, hidden_size=manifest["vlm_hidden"])
    theirs = {k: tuple(v.shape) for k, v in routed.parts["action_head"].items()}
    wanted = {k: tuple(v.shape) for k, v in ours.state_dict().items()}
    assert {k: (theirs.get(k), s) for k, s in wanted.items() if theirs.get(k) != s} == {}
    assert sorted(set(theirs) - set(wanted)) == []


def test_the_released_vlm_and_planner_meet_the_packages_model_on_the_meta_device(tmp_path):
    """Both released manifests routed by the shipped mapping, the VLM's names and config.json converted as
    --from internvl_chat converts them: every parameter of the package's model (built from that config and the
    mapping's head, on the meta device) is there in its shape, and nothing routed is left over."""
    vlm, planner = load_manifest("recogdrive_vlm_released"), load_manifest("recogdrive_released")
    mapping = load_mapping("recogdrive")
    routed = route({k: torch.empty(s, dtype=getattr(torch, d), device="meta")
                    for m in (vlm, planner) for k, s, d, *_ in m["tensors"]}, mapping)
    config_json = {**native_config(vlm["config_json"], tmp_path), "image_token_id": IMAGE_TOKEN}
    (tmp_path / "config.json").write_text(json.dumps(config_json))
    config = load_backbone_config(tmp_path)
    backbone = native_tensors(routed.parts["backbone"], config.vision_config.hidden_size)
    fields = {k: v for k, v in mapping.action_head.items() if k != "plan_token"}
    with parameters_on_meta():
        model = VLAModel(VLASpec(**{**spec_fields(config), **fields, "name": "recogdrive", "real_size": True}),
                         backbone_config=config)
    wrong, left = meta_model_check(model, {"backbone": backbone, "action_head": routed.parts["action_head"]})
    assert wrong == [] and left == []
    assert config.text_config.vocab_size == 151674 and model.spec.hidden_size == 1536
