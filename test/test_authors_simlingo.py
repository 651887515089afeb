"""SimLingo as its authors' own code saves it (issue 56): `pytorch_model.pt` built from the manifests
scripts/extract_manifest.py wrote from their `DrivingModel` (RenzKa/simlingo@eb2b89a, composed from their hydra
config with experiment=simlingo_seed1; transformers 4.46.3, peft 0.13.2; InternVL2-1B's InternVLChatModel from
OpenGVLab/InternVL@2410d1d standing in for the remote code), not from this package's module tree. The file is the
bare state dict their agent's strict `load_state_dict` reads (shared modules saved under each name). The tiny one
converts with the shipped mapping (its LoRA r=32, alpha 64 merged) and verifies exact at every cut; the
released-size one (InternVL2-1B's config.json, on the meta device) routes onto the package's model, every
parameter in its shape and nothing left over."""

import json

import torch

from hybrid_vla_ros.convert import convert_checkpoint, load_mapping
from hybrid_vla_ros.convert.internvl_chat import native_config, native_tensors
from hybrid_vla_ros.convert.route import merge_adapters, route
from hybrid_vla_ros.engine.verify import verify_partitions
from hybrid_vla_ros.model.checkpoint import load_checkpoint
from hybrid_vla_ros.model.families import get_family, load_backbone_config, spec_fields
from hybrid_vla_ros.model.load import load_vla
from hybrid_vla_ros.model.seeded import parameters_on_meta
from hybrid_vla_ros.model.spec import VLASpec
from hybrid_vla_ros.model.vla import VLAModel
from manifest_checkpoint import load_manifest, meta_model_check, state_from_manifest
from test_published_simlingo import mapping_for_tiny

IMAGE_TOKEN = get_family("internvl").special_token_fields["image_token_id"]   # the built-in prompt's <IMG_CONTEXT>
LLM = "language_model.model.base_model.model."        # peft's wrap of the Qwen2 LLM inside DrivingModel
SHARED = {"adaptors.language.embed_tokens.weight": LLM + "model.embed_tokens.weight",      # one module, 3 names
          LLM + "embed_tokens.weight": LLM + "model.embed_tokens.weight",
          "adaptors.language.lm_head.weight": LLM + "lm_head.weight"}


def base_config_dir(manifest: dict, folder):
    """The base model's directory (--config): InternVL2-1B's remote-code config.json at the manifest's sizes."""
    folder.mkdir(parents=True, exist_ok=True)
    config = {**manifest["config_json"], "model_type": "internvl_chat", "architectures": ["InternVLChatModel"]}
    (folder / "config.json").write_text(json.dumps(config))
    return folder


def test_the_manifests_were_extracted_from_the_authors_code_at_the_named_commit():
    for size in ("tiny", "released"):
        manifest = load_manifest(f"simlingo_{size}")
        assert manifest["snapshot"]["commit"].startswith("eb2b89a") and manifest["size"] == size
        assert manifest["snapshot"]["internvl"]["commit"].startswith("2410d1d")
        assert manifest["versions"]["transformers"] == "4.46.3" and manifest["versions"]["peft"] == "0.13.2"
        assert manifest["model_cfg"]["language_model"]["lora_r"] == 32
        assert manifest["model_cfg"]["language_model"]["lora_alpha"] == 64
        aliases = {k: a for k, _, _, a, _ in manifest["tensors"] if a is not None}
        assert aliases == SHARED
    shapes = {k: s for k, s, *_ in load_manifest("simlingo_released")["tensors"]}
    assert shapes["adaptors.driving.query_embeds_wps"] == [1, 20, 896]
    assert shapes[LLM + "model.layers.23.mlp.down_proj.lora_A.default.weight"] == [32, 4864]
    assert shapes["vision_model.image_encoder.model.mlp1.1.weight"] == [896, 4096]


def test_the_authors_tiny_pt_converts_with_the_shipped_mapping_and_verifies_exact(tmp_path):
    manifest = load_manifest("simlingo_tiny")
    spec = load_vla(preset="tiny-simlingo").spec        # the sizes the tiny mapping takes (image, prompt)
    assert spec.hidden_size == manifest["config_json"]["llm_config"]["hidden_size"]
    state = state_from_manifest(manifest)
    pt = tmp_path / "checkpoints" / "epoch=013.ckpt" / "pytorch_model.pt"
    pt.parent.mkdir(parents=True)
    torch.save(state, pt)
    report = convert_checkpoint("pth", pt, str(mapping_for_tiny(tmp_path, IMAGE_TOKEN, spec)), tmp_path / "out",
                                config_dir=base_config_dir(manifest, tmp_path / "InternVL2-1B"))
    assert sorted(report.dropped) == sorted([*SHARED, LLM + "lm_head.weight"])
    assert report.counts["prompt_embeddings"] == 2 + 6 and report.counts["action_head"] == 5 + 3
    assert report.adapters == {} and report.unread == []
    converted = load_checkpoint(tmp_path / "out")
    result = verify_partitions(converted, frames=2)
    assert [r["partition"] for r in result["results"]] == list(range(converted.num_blocks + 1))
    assert result["max_abs_diff"] == 0.0, result["results"]


def test_the_released_manifest_meets_the_packages_model_on_the_meta_device(tmp_path):
    manifest = load_manifest("simlingo_released")
    mapping = load_mapping("simlingo")
    routed = route({k: torch.empty(s, dtype=getattr(torch, d), device="meta") for k, s, d, *_ in manifest["tensors"]},
                   mapping)
    merge_adapters(routed, float(mapping.adapters["lora_alpha"]))
    chat = json.loads((base_config_dir(manifest, tmp_path / "base") / "config.json").read_text())
    (tmp_path / "config.json").write_text(json.dumps({**native_config(chat, tmp_path), "image_token_id": IMAGE_TOKEN}))
    config = load_backbone_config(tmp_path)
    fields = {k: v for k, v in mapping.action_head.items() if k not in ("plan_token", "slot_token")}
    with parameters_on_meta():
        model = VLAModel(VLASpec(**{**spec_fields(config), **fields, "name": "simlingo", "real_size": True}),
                         backbone_config=config)
    parts = {"backbone": native_tensors(routed.parts["backbone"], config.vision_config.hidden_size),
             "action_head": routed.parts["action_head"], "prompt_embeddings": routed.parts["prompt_embeddings"]}
    wrong, left = meta_model_check(model, parts)
    assert wrong == [] and left == []
    assert config.text_config.vocab_size == 151655 and model.spec.hidden_size == 896
