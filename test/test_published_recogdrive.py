"""ReCogDrive as published (issue 38, item 5): its VLM as an OpenGVLab remote-code InternVL3 directory and its
planner as a Lightning `.ckpt` (`agent.action_head.*`: the DiT with RoPE / RMSNorm / SwiGLU blocks, the encoders,
the schedule's buffers; test/published_layouts.py), written at toy size from tiny-recogdrive (2 of the 16 DiT
blocks, D = 2 heads x 16) and converted together by the shipped `recogdrive` mapping (--from internvl_chat, --also
ckpt:): loads, verifies exact at every cut, and plans as the model it was written from; a planner tensor of the
wrong shape is refused, naming it, before anything is written (ReCogDrive's own loader skips it silently)."""

import math

import numpy as np
import pytest
import torch
import yaml
from safetensors.torch import load_file

from hybrid_vla_ros.convert import convert_checkpoint, load_mapping
from hybrid_vla_ros.engine.stages import reference_forward
from hybrid_vla_ros.engine.verify import verify_partitions
from hybrid_vla_ros.errors import ConfigError
from hybrid_vla_ros.model.checkpoint import load_checkpoint, save_checkpoint
from hybrid_vla_ros.model.inputs import synthetic_frame
from hybrid_vla_ros.model.load import load_vla
from published_layouts import INTERNVL3_FIELDS, RECOGDRIVE_PREFIX as P, internvl_chat_dir, recogdrive_ckpt

BUFFERS = 12 + 7 + 2   # ddpm_* (100,), ddim_* (5,), the RoPE frequencies, EtaFixed's logit


@pytest.fixture(scope="module")
def published(tmp_path_factory):
    """tiny-recogdrive, and the same weights as ReCogDrive's VLM directory and planner .ckpt."""
    model = load_vla(preset="tiny-recogdrive")
    saved = save_checkpoint(model, tmp_path_factory.mktemp("saved"))
    root = tmp_path_factory.mktemp("recogdrive")
    image_token = internvl_chat_dir(saved, root / "ReCogDrive-VLM-2B", **INTERNVL3_FIELDS)
    ckpt = root / "ReCogDrive-2B-IL" / "recogdrive_agent.ckpt"
    ckpt.parent.mkdir()
    state = recogdrive_ckpt(saved, ckpt)
    return model, state, root / "ReCogDrive-VLM-2B", ckpt, image_token


def mapping_for_tiny(tmp_path, image_token, spec, **fields):
    """The shipped mapping at the tiny model's sizes (image, prompt, DiT widths and depth, its noise seed), and
    any other action_head `fields`; its VLM directory has no tokenizer files for <IMG_CONTEXT>'s id. Everything
    else as shipped."""
    shipped = yaml.safe_load(open(load_mapping("recogdrive").source))
    head = {**shipped["action_head"], "image_height": spec.image_height, "image_width": spec.image_width,
            "text_tokens": spec.text_tokens, "head_hidden": spec.head_hidden,
            "head_config": {**shipped["action_head"]["head_config"], **spec.head_config}, **fields}
    path = tmp_path / "recogdrive_tiny.yaml"
    path.write_text(yaml.safe_dump({**shipped, "action_head": head, "config_overrides": {"image_token_id": image_token}}))
    return path


def test_the_fixture_holds_recogdrive_s_key_layout(published):
    model, state, vlm, _, _ = published
    shapes = {k[len(P):]: tuple(v.shape) for k, v in state.items()}
    assert all(k.startswith(P) for k in state)                                       # the planner only: no VLM
    block = "model.transformer_blocks.{}."
    expected = {"model.timestep_encoder.timestep_embedder.linear_1.weight": (32, 256),
                "model.timestep_encoder.timestep_embedder.linear_2.weight": (32, 32),
                block.format(0) + "norm1.weight": (32,), block.format(1) + "norm2.weight": (32,),
                block.format(0) + "attn.to_q.bias": (32,), block.format(1) + "attn.to_k.weight": (32, 32),
                block.format(1) + "attn.to_out.0.weight": (32, 32), block.format(0) + "attn.q_norm.weight": (16,),
                block.format(1) + "attn.k_norm.weight": (16,), block.format(0) + "ffn.w12.weight": (64, 32),
                block.format(0) + "ffn.w3.bias": (32,), block.format(1) + "adaLN_modulation.1.weight": (192, 32),
                "model.final_layer.norm_final.weight": (32,), "model.final_layer.linear.weight": (48, 32),
                "model.final_layer.modulation_proj.1.weight": (64, 32), "model.rotary_embedder.inv_freq": (8,),
                "his_traj_encoder.fc1.weight": (64, 12), "his_traj_encoder.norm.weight": (64,),
                "his_traj_encoder.fc2.weight": (32, 64), "ego_status_encoder.fc1.weight": (64, 8),
                "action_encoder.fc1.weight": (32, 3), "action_encoder.fc2.weight": (32, 64),
                "action_encoder.fc3.weight": (32, 32), "feature_encoder.weight": (32, model.spec.hidden_size),
                "fusion_projector.weight": (32, 96), "action_decoder.fc1.weight": (64, 48),
                "action_decoder.fc2.weight": (3, 64), "position_embedding.weight": (8, 32),
                "eta.eta_logit": (1,), "ddpm_alphas_cumprod": (100,), "ddim_t_schedule": (5,), "ddim_sigmas": (5,)}
    assert {k: shapes.get(k) for k in expected} == expected
    assert state[P + "ddim_t"].tolist() == [80, 60, 40, 20, 0] and state[P + "eta.eta_logit"].item() == math.inf
    assert len(state) == len(model.action_head.state_dict()) + BUFFERS
    chat = load_file(str(vlm / "model.safetensors"))
    assert "mlp1.1.weight" in chat and "language_model.model.layers.0.self_attn.q_proj.weight" in chat
    assert any(k.startswith("vision_model.encoder.layers.0.attn.qkv.") for k in chat)


def test_the_planner_samples_on_recogdrive_s_schedule(published):
    """alpha_bar at the 5 DDIM steps as the notes compute it from the cosine schedule (100 training steps)."""
    head = published[0].action_head
    assert head.timesteps() == [80, 60, 40, 20, 0]
    assert [round(head.alpha_bar[t], 3) for t in head.timesteps()] == [0.085, 0.326, 0.633, 0.889, 0.999]


def test_the_released_planner_config_gives_recogdrive_s_size():
    """The shipped mapping's head at the released size: ReCogDrive's "2B + 35M" / "8B + 35M" (its README)."""
    from hybrid_vla_ros.model.plugins.diffusion_head import DdimPlannerHead
    from hybrid_vla_ros.model.seeded import parameters_on_meta
    meta = yaml.safe_load(open(load_mapping("recogdrive").source))["action_head"]
    config = {k: meta[k] for k in ("num_waypoints", "head_hidden", "query_tokens")}
    sizes = []
    for vlm_hidden in (1536, 3584):                                                   # InternVL3-2B, -8B
        with parameters_on_meta():
            head = DdimPlannerHead.from_config({**config, **meta["head_config"]}, vlm_hidden)
        sizes.append(sum(p.numel() for p in head.parameters()))
        assert len(head.state_dict()) == 326 and head.state_dict()["feature_encoder.weight"].shape == (384, vlm_hidden)
    assert sizes == [34_329_219, 35_115_651]


def test_recogdrive_s_vlm_and_planner_convert_verify_exact_and_plan_as_written(published, tmp_path, capsys):
    from hybrid_vla_ros.cli import main
    model, state, vlm, ckpt, image_token = published
    out = tmp_path / "recogdrive"
    code = main(["convert", "--from", "internvl_chat", "--mapping", str(mapping_for_tiny(tmp_path, image_token,
                 model.spec)), "--also", f"ckpt:{ckpt}", str(vlm), str(out)])
    text = capsys.readouterr().out
    assert code == 0
    assert f"action_head    {len(model.action_head.state_dict()):>6} tensors" in text
    assert f"dropped        {BUFFERS + 1:>6} keys" in text and "source ckpt epoch: 9" in text
    assert "warning" not in text                                                     # every tensor is read
    converted = load_checkpoint(out)
    assert converted.spec.head == "ddim_planner" and converted.spec.num_cameras == 1
    result = verify_partitions(converted, frames=3)
    assert [r["partition"] for r in result["results"]] == list(range(converted.num_blocks + 1))
    assert result["max_abs_diff"] == 0.0, result["results"]                          # the split is exact at every cut
    for seq in range(3):                                                             # the same weights, the same plan
        frame = synthetic_frame(model.spec, seq)
        _, want = reference_forward(model, frame)
        _, got = reference_forward(converted, frame)
        assert np.array_equal(got.points, want.points)


def test_a_wrong_shaped_or_missing_planner_tensor_is_refused_before_anything_is_written(published, tmp_path):
    model, state, vlm, _, image_token = published
    mapping = str(mapping_for_tiny(tmp_path, image_token, model.spec))
    key = P + "feature_encoder.weight"
    bad = tmp_path / "8b_planner.ckpt"                          # a planner for another VLM width (8B: 3584)
    torch.save({"state_dict": {**state, key: torch.zeros(32, 3 * model.spec.hidden_size)}, "epoch": 0}, bad)
    with pytest.raises(ConfigError, match=rf"action_head\.safetensors: tensor 'feature_encoder\.weight' \(source key "
                                          rf"'{key}'\) has shape \(32, 192\), the config implies \(32, 64\); nothing "
                                          rf"was written to '{tmp_path / 'out'}'"):
        convert_checkpoint("internvl_chat", vlm, mapping, tmp_path / "out", also=[("ckpt", bad)])
    torch.save({"state_dict": {k: v for k, v in state.items() if "position_embedding" not in k}, "epoch": 0}, bad)
    with pytest.raises(ConfigError, match=r"no tensor 'position_embedding\.weight'.*nothing was written"):
        convert_checkpoint("internvl_chat", vlm, mapping, tmp_path / "out", also=[("ckpt", bad)])
    torch.save({"state_dict": {**state, "language_model.model.norm.weight": torch.ones(64)}, "epoch": 0}, bad)
    with pytest.raises(ConfigError, match=r"'language_model\.model\.norm\.weight' is in both"):
        convert_checkpoint("internvl_chat", vlm, mapping, tmp_path / "out", also=[("ckpt", bad)])
    assert sorted(p.name for p in tmp_path.iterdir()) == ["8b_planner.ckpt", "recogdrive_tiny.yaml"]   # no staging left


def test_the_accelerate_trainer_s_planner_file_converts_through_also_ckpt(published, tmp_path):
    """ReCogDrive's accelerate trainer saves {"state_dict": agent.state_dict()} and nothing else (keys
    `action_head.*`, no `agent.` prefix, no epoch): the documented `--also ckpt:` reads it, and the converted
    model plans as the one it was written from."""
    model, state, vlm, _, image_token = published
    planner = tmp_path / "recogdrive_agent_accelerate.ckpt"
    torch.save({"state_dict": {k[len("agent."):]: v for k, v in state.items()}}, planner)
    assert all(k.startswith("action_head.") for k in torch.load(planner, weights_only=True)["state_dict"])
    report = convert_checkpoint("internvl_chat", vlm, mapping_for_tiny(tmp_path, image_token, model.spec),
                                tmp_path / "out", also=[("ckpt", planner)])
    assert report.counts["action_head"] == len(model.action_head.state_dict()) and not report.unread
    converted = load_checkpoint(tmp_path / "out")
    frame = synthetic_frame(model.spec, 0)
    assert np.array_equal(reference_forward(converted, frame)[1].points, reference_forward(model, frame)[1].points)
