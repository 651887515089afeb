"""SimLingo as published (issue 38, item 5): a tiny `pytorch_model.pt` in its DrivingModel's layout
(test/published_layouts.py: peft-wrapped LLM with a `default` LoRA, InternViT under OpenGVLab's remote-code names,
the driving adaptor's (1, n, H) query tables and heads, `wp_encoder`), converted by the shipped `simlingo` mapping
with the remote-code config.json as --config: loads, merges the LoRA, verifies exact at every cut, and plans as the
model it was written from."""

import json

import numpy as np
import pytest
import torch
import yaml

from hybrid_vla_ros.convert import convert_checkpoint, load_mapping
from hybrid_vla_ros.engine.stages import reference_forward
from hybrid_vla_ros.engine.verify import verify_partitions
from hybrid_vla_ros.errors import ConfigError
from hybrid_vla_ros.model.checkpoint import load_checkpoint, save_checkpoint
from hybrid_vla_ros.model.inputs import synthetic_frame
from hybrid_vla_ros.model.load import load_vla
from published_layouts import SIMLINGO_LLM, simlingo_state

MERGE_TOLERANCE = 1e-4   # W - s B A written, W' = that + s B A merged back: float32 rounding of each weight (~1e-7)


@pytest.fixture(scope="module")
def published(tmp_path_factory):
    """tiny-simlingo in the package's layout, the same weights as SimLingo's .pt, and its base model's config."""
    model = load_vla(preset="tiny-simlingo")
    saved = save_checkpoint(model, tmp_path_factory.mktemp("saved"))
    state, chat_config, image_token = simlingo_state(saved)
    root = tmp_path_factory.mktemp("simlingo")
    (root / "InternVL2-1B").mkdir()
    (root / "InternVL2-1B" / "config.json").write_text(json.dumps(chat_config))
    pt = root / "checkpoints" / "epoch=013.ckpt" / "pytorch_model.pt"   # where SimLingo's agent reads it
    pt.parent.mkdir(parents=True)
    torch.save(state, pt)
    return model, state, pt, root / "InternVL2-1B", image_token


def mapping_for_tiny(tmp_path, image_token, spec):
    """The shipped mapping, but for the tiny model's image size and prompt length (its base model has no
    tokenizer files for <IMG_CONTEXT>'s id): everything else as shipped."""
    shipped = yaml.safe_load(open(load_mapping("simlingo").source))
    head = {**shipped["action_head"], "image_height": spec.image_height, "image_width": spec.image_width,
            "text_tokens": spec.text_tokens}
    path = tmp_path / "simlingo_tiny.yaml"
    path.write_text(yaml.safe_dump({**shipped, "action_head": head,
                                    "config_overrides": {"image_token_id": image_token}}))
    return path


def test_the_fixture_holds_simlingo_s_key_layout(published):
    _, state, _, _, _ = published
    assert state["adaptors.driving.query_embeds_wps"].shape[:2] == (1, 20)
    assert state["adaptors.driving.query_embeds_speed"].shape[:2] == (1, 10)
    assert "adaptors.driving.route_head.4.weight" in state and "adaptors.driving.route_head.4.bias" not in state
    assert "wp_encoder.mlp.4.weight" in state and "vision_model.image_encoder.model.mlp1.1.weight" in state
    assert SIMLINGO_LLM + "model.layers.0.mlp.down_proj.lora_A.default.weight" in state
    assert SIMLINGO_LLM + "model.layers.0.self_attn.q_proj.base_layer.bias" in state
    assert any(k.startswith("vision_model.image_encoder.model.vision_model.encoder.layers.0.attn.qkv") for k in state)


def test_simlingo_s_pt_converts_verifies_exact_and_plans_as_written(published, tmp_path):
    model, _, pt, base, image_token = published
    report = convert_checkpoint("pth", pt, str(mapping_for_tiny(tmp_path, image_token, model.spec)),
                                tmp_path / "out", config_dir=base)
    assert report.counts["prompt_embeddings"] == 2 + 6 and report.counts["action_head"] == 5 + 3
    assert report.adapters == {} and report.unread == []
    assert sorted(report.dropped) == ["adaptors.language.embed_tokens.weight", "adaptors.language.lm_head.weight",
                                      SIMLINGO_LLM + "embed_tokens.weight", SIMLINGO_LLM + "lm_head.weight"]
    converted = load_checkpoint(tmp_path / "out")
    assert converted.spec.query_embeddings == [20, 10] and converted.spec.slot_tokens == 2
    result = verify_partitions(converted, frames=2)
    assert result["max_abs_diff"] == 0.0, result["results"]          # the split is exact at every cut
    for seq in range(3):   # the merged LoRA gives the model the .pt was written from, up to float rounding
        frame = synthetic_frame(model.spec, seq)
        _, want = reference_forward(model, frame)
        _, got = reference_forward(converted, frame)
        assert np.abs(got.points - want.points).max() < MERGE_TOLERANCE
        assert np.abs(np.array(got.extras["route"]) - np.array(want.extras["route"])).max() < MERGE_TOLERANCE


def test_a_one_pass_lora_left_unmerged_is_refused_before_anything_is_written(published, tmp_path):
    model, _, pt, base, image_token = published
    path = mapping_for_tiny(tmp_path, image_token, model.spec)
    mapping = yaml.safe_load(path.read_text())
    path.write_text(yaml.safe_dump({**mapping, "adapters": {"lora_alpha": 64}}))   # merge left out
    with pytest.raises(ConfigError, match=r"adapter\(s\) \['default'\] are named by no pass.*merge: true"):
        convert_checkpoint("pth", pt, str(path), tmp_path / "out", config_dir=base)
    assert not (tmp_path / "out").exists()
