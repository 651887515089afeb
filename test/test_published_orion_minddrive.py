"""ORION and MindDrive as released (issue 38): a whole mmcv `.pth` of each (test/published_mmcv.py: the perception
front end, the peft-wrapped LLM, the planner), written at toy size from tiny-orion-release / tiny-minddrive-release
(`orion_front` + LLM + `orion_vae` / `minddrive_vae`, model/plugins/vae_planners.py) and converted by the shipped
`orion` / `minddrive` mappings with only sizes overridden: the key layout, the released sizes' shapes, exact at every
cut, the same plan as the model written, and the route command choosing ORION's mode and MindDrive's path."""

import dataclasses

import numpy as np
import pytest
import torch
from safetensors import safe_open

from hybrid_vla_ros.context import FrameContext
from hybrid_vla_ros.convert import convert_checkpoint, load_mapping
from hybrid_vla_ros.convert.route import route
from hybrid_vla_ros.engine.stages import reference_forward
from hybrid_vla_ros.engine.verify import verify_partitions
from hybrid_vla_ros.errors import ConfigError
from hybrid_vla_ros.model.checkpoint import load_checkpoint, save_checkpoint
from hybrid_vla_ros.model.inputs import synthetic_frame
from hybrid_vla_ros.model.presets import get_preset
from hybrid_vla_ros.model.vla import build_model
from hybrid_vla_ros.types import Navigation
from published_mmcv import LLM, minddrive_pth, orion_pth

MERGE_TOLERANCE = 1e-4   # ORION's LoRA merged back into W - s B A: float32 rounding (test_published_simlingo.py)
PRESETS = {"orion": "tiny-orion-release", "minddrive": "tiny-minddrive-release"}
WRITERS = {"orion": orion_pth, "minddrive": minddrive_pth}


@pytest.fixture(scope="module", params=["orion", "minddrive"])
def published(request, tmp_path_factory):
    """(name, the package model, its saved directory (the LLM's config.json), the .pth state, the .pth)."""
    name = request.param
    model = build_model(get_preset(PRESETS[name]))
    saved = save_checkpoint(model, tmp_path_factory.mktemp(f"{name}_saved"))
    root = tmp_path_factory.mktemp(name)
    state = WRITERS[name](saved, root / f"{name}.pth", model.spec, model.scene_encoder.state_dict())
    return name, model, saved, state, root / f"{name}.pth"


def size_sets(shipped, tiny, prefix: str) -> list:
    """[(dotted key, the tiny value)] for every size (an int, a list of ints) the shipped section states that the
    tiny one holds otherwise: `convert --set`'s overrides."""
    out = []
    for key, value in shipped.items():
        if isinstance(value, dict) and isinstance(tiny.get(key), dict):
            out += size_sets(value, tiny[key], f"{prefix}{key}.")
        elif key in tiny and not isinstance(value, (bool, dict)) and isinstance(value, (int, list)) \
                and tiny[key] != value:
            out.append((f"{prefix}{key}", tiny[key]))
    return out


def tiny_sets(name, spec) -> list:
    """The shipped mapping's sizes changed to the tiny model's (images, patch, cameras, prompt length, the front
    end's widths and query counts, the vocabulary and MindDrive's speed-token ids in it): everything else as
    shipped, which the converted model's spec then shows."""
    shipped = load_mapping(name)
    head = {"num_cameras": spec.num_cameras, "image_height": spec.image_height, "image_width": spec.image_width,
            "patch_size": spec.patch_size, "text_tokens": spec.text_tokens, "head_config": spec.head_config}
    return (size_sets(shipped.action_head, head, "action_head.")
            + size_sets(shipped.scene_encoder["config"], spec.scene_config, "scene_encoder.config.")
            + size_sets(shipped.config_overrides, {"vocab_size": spec.vocab_size}, "config_overrides."))


def converted(published, tmp_path):
    name, model, saved, _, pth = published
    report = convert_checkpoint("pth", pth, name, tmp_path / "out", config_dir=saved, sets=tiny_sets(name, model.spec))
    return report, load_checkpoint(tmp_path / "out")


def with_command(frame, command: str):
    context = FrameContext.from_dict(frame.context.to_dict())
    nav = context.navigation
    context.navigation = Navigation(command, nav.distance_m, nav.goal_ego, nav.target_ego, "route")
    return dataclasses.replace(frame, context=context)


def plan(model, frame):
    model.reset_memory("test")
    return reference_forward(model, frame)[1]


def test_the_fixtures_hold_the_published_key_layout(published):
    name, model, _, state, _ = published
    shapes = {k: tuple(v.shape) for k, v in state.items()}
    h, vocab = model.spec.hidden_size, model.spec.vocab_size
    layer = LLM + "model.layers.0.self_attn."
    expected = {LLM + "model.embed_tokens.weight": (vocab, h), LLM + "lm_head.weight": (vocab, h),
                LLM + "weighted_mask": (vocab,), LLM + "model.norm.weight": (h,),
                layer + "q_proj.base_layer.weight": (h, h), "present_distribution.encoder.conv1.weight": (2 * h, h, 1),
                "present_distribution.encoder.conv3.weight": (h // 2, 2 * h, 1),
                "present_distribution.last_conv.1.weight": (64, h // 2, 1),
                "future_distribution.encoder.conv1.weight": (2 * (h + 12), h + 12, 1),
                "predict_model.gru.weight_ih_l0": (3 * h // 4, 32),
                "predict_model.gru.weight_hh_l3": (3 * h // 4, h // 4),
                "predict_model.linear3.weight": (h, h), "ego_fut_decoder.0.weight": (2 * h, 2 * h),
                "img_backbone.patch_embed.proj.weight": (32, 3, 14, 14), "query_pos.0.weight": (32, 396),
                "pts_bbox_head.output_projection.weight": (h, 32), "map_head.output_projection.weight": (h, 32),
                "map_head.instance_embedding_lane.weight": (18, 32), "position_range": (6,), "coords_d": (8,)}
    # the front end at the top level, as the release holds it: shared modules' keys share storage (mmcv's pickle)
    assert state["map_head.query_pos.0.weight"].data_ptr() == state["query_pos.0.weight"].data_ptr()
    if name == "orion":
        assert vocab == 264 + 1                                                     # one added token
        expected.update({layer + "q_proj.lora_A.default.weight": (16, h),
                         layer + "o_proj.lora_B.default.weight": (h, 16),
                         "ego_fut_decoder.4.weight": (12, 2 * h),
                         LLM + "model.layers.3.self_attn.rotary_emb.cos_cached": (1, 1, 64, h // 4)})
        assert not any(k.startswith("pw_") for k in state)
    else:
        kv = model.spec.num_kv_heads * h // model.spec.num_heads
        assert vocab == 264 + 15                                                    # the 15 added tokens
        expected.update({layer + "k_proj.lora_B.action_expert.weight": (kv, 16), layer + "q_proj.base_layer.bias": (h,),
                         layer + "v_proj.lora_A.decision_expert.weight": (16, h),
                         "ego_fut_decoder.4.weight": (14, 2 * h),
                         "pw_ego_fut_decoder.4.weight": (12, 2 * h),
                         "pw_future_distribution.encoder.conv1.weight": (2 * (h + 40), h + 40, 1),
                         "value_net_pro.weight": (1, h), "pts_bbox_head.pos_mlp.weight": (32, 2),
                         "pts_bbox_head.motion_mode_query.weight": (1, 32)})
        assert layer + "o_proj.base_layer.bias" not in state
        expected[LLM + "model.rotary_emb.inv_freq"] = (h // model.spec.num_heads // 2,)   # 4.45's model-level one
    assert {k: shapes.get(k) for k in expected} == expected


def test_the_released_sizes_give_the_published_shapes():
    """The heads at ORION's width (4096) and MindDrive-0.5B's (896, vocab 151680), on the meta device: the notes'
    shapes."""
    from hybrid_vla_ros.model.plugins.vae_planners import MindDriveVaeHead, OrionVaeHead
    with torch.device("meta"):
        orion = OrionVaeHead.from_config({"num_waypoints": 6, "query_tokens": 1}, 4096).state_dict()
        mind = MindDriveVaeHead.from_config({"num_waypoints": 6, "query_tokens": 2, "vocab_size": 151680,
                                             "decision_tokens": list(range(151665, 151672))}, 896).state_dict()
    assert {k: tuple(orion[k].shape) for k in ("present_distribution.encoder.conv1.weight",
            "present_distribution.encoder.conv2.weight", "present_distribution.encoder.conv3.weight",
            "present_distribution.last_conv.1.weight", "predict_model.gru.weight_ih_l0",
            "predict_model.gru.weight_hh_l2", "predict_model.gru.weight_ih_l3", "predict_model.linear1.weight",
            "predict_model.linear2.weight", "predict_model.linear3.weight", "ego_fut_decoder.4.weight")} == {
        "present_distribution.encoder.conv1.weight": (8192, 4096, 1), "present_distribution.encoder.conv2.weight":
        (8192, 8192, 1), "present_distribution.encoder.conv3.weight": (2048, 8192, 1),
        "present_distribution.last_conv.1.weight": (64, 2048, 1), "predict_model.gru.weight_ih_l0": (3072, 32),
        "predict_model.gru.weight_hh_l2": (3072, 1024), "predict_model.gru.weight_ih_l3": (3072, 1024),
        "predict_model.linear1.weight": (2048, 1024), "predict_model.linear2.weight": (4096, 2048),
        "predict_model.linear3.weight": (4096, 4096), "ego_fut_decoder.4.weight": (12, 8192)}
    assert {k: tuple(mind[k].shape) for k in ("present_distribution.encoder.conv3.weight",
            "pw_present_distribution.last_conv.1.weight", "pw_predict_model.gru.weight_hh_l0",
            "ego_fut_decoder.0.weight",
            "ego_fut_decoder.4.weight", "pw_ego_fut_decoder.4.weight", "lm_head.weight")} == {
        "present_distribution.encoder.conv3.weight": (448, 1792, 1), "pw_present_distribution.last_conv.1.weight":
        (64, 448, 1), "pw_predict_model.gru.weight_hh_l0": (672, 224), "ego_fut_decoder.0.weight": (1792, 1792),
        "ego_fut_decoder.4.weight": (14, 1792), "pw_ego_fut_decoder.4.weight": (12, 1792),
        "lm_head.weight": (151680, 896)}
    assert not any("future_distribution" in k for k in list(orion) + list(mind))   # training only: dropped


def test_the_pth_converts_verifies_exact_and_plans_as_written(published, tmp_path):
    name, model, _, state, _ = published
    report, out = converted(published, tmp_path)
    trained_only = [k for k in state if "future_distribution" in k or "weighted_mask" in k or "value_net" in k
                    or "rotary_emb" in k or (name == "orion" and k == LLM + "lm_head.weight")]
    assert sorted(report.dropped) == sorted(trained_only)
    # unread: a shared module's other names (read once, under the first) and EVA's rope buffers (recomputed)
    repeated = set(model.scene_encoder.state_dict()) - set(dict(model.scene_encoder.named_parameters()))
    assert report.unread == sorted(f"scene_encoder.safetensors:{k}" for k in repeated)
    assert report.notes["meta"] == ["epoch", "iter", "mmcv_version", "time"]
    assert report.counts["action_head"] == len(model.action_head.state_dict())
    assert report.counts["scene_encoder"] == len(model.scene_encoder.state_dict())   # every published name
    assert out.scene_encoder.plugin_name == "orion_front" and out.spec.scene_config == model.spec.scene_config
    assert sorted(report.adapters) == ([] if name == "orion" else ["action_expert", "decision_expert"])
    assert out.spec.head == model.spec.head and out.spec.passes == model.spec.passes
    result = verify_partitions(out, frames=3)                    # three route commands, three noise seeds
    assert [r["partition"] for r in result["results"]] == list(range(out.num_blocks + 1))
    assert result["max_abs_diff"] == 0.0, result["results"]
    for seq in range(3):
        frame = synthetic_frame(model.spec, seq)
        want, got = plan(model, frame), plan(out, frame)
        if name == "orion":                                      # its LoRA merged: equal up to float rounding
            assert np.abs(got.points - want.points).max() < MERGE_TOLERANCE and got.extras == want.extras
        else:                                                    # the adapters kept apart: the very same model
            assert np.array_equal(got.points, want.points) and got.extras == want.extras


def test_the_route_command_chooses_orion_s_mode_and_minddrive_s_path(published, tmp_path):
    name, model, _, _, _ = published
    _, out = converted(published, tmp_path)
    frame = synthetic_frame(model.spec, 1)
    plans = {c: plan(out, with_command(frame, c)) for c in ("turn left", "turn right", "follow lane", "arrive")}
    assert np.array_equal(plans["arrive"].points, plans["follow lane"].points)   # ORION / MindDrive: VOID -> follow
    if name == "orion":
        assert [plans[c].extras["mode"] for c in ("turn left", "turn right", "follow lane")] == [0, 1, 3]
        assert not np.allclose(plans["turn left"].points, plans["turn right"].points)
    else:   # the path, the command (PA_MAPPING order); the speed plan moves too: the command is in the front end's
        # can-bus memory row (orion_front/memory.py), so the LLM's hidden states differ
        assert [plans[c].extras["path_command"] for c in ("turn left", "turn right", "follow lane")] == \
            ["turn left", "turn right", "follow lane"]
        assert not np.array_equal(plans["turn left"].points, plans["turn right"].points)
        assert not np.allclose(plans["turn left"].extras["path"], plans["turn right"].extras["path"])


def test_minddrive_s_decision_is_the_log_softmax_of_its_speed_token_rows():
    model = build_model(get_preset("tiny-minddrive-vae"))
    head = model.action_head
    model.reset_memory("test")
    hidden, trajectory = reference_forward(model, synthetic_frame(model.spec, 2))     # (P, S, H)
    with torch.no_grad():
        logits = hidden[0, -2] @ head.lm_head.weight[264:271].t()                     # the decision pass, position -2
    assert np.allclose(trajectory.extras["decision_log_probs"], torch.log_softmax(logits, -1).tolist(), atol=1e-6)
    assert trajectory.extras["decision"] == head.labels[int(logits.argmax())]
    assert np.array(trajectory.extras["path"]).shape == (20, 2)
    # Another speed token's row made the winner: the decision and the speed plan it picks change, the path not.
    other = (int(logits.argmax()) + 3) % 7
    with torch.no_grad():
        head.lm_head.weight[264 + other] = hidden[0, -2] * 10
    flipped = plan(model, synthetic_frame(model.spec, 2))
    assert flipped.extras["decision"] == head.labels[other] and flipped.extras["path"] == trajectory.extras["path"]
    assert not np.allclose(flipped.points, trajectory.points)


@pytest.mark.parametrize("name", ["orion", "minddrive"])
def test_the_perception_keys_go_to_the_scene_encoder_part_under_their_published_names(name):
    keys = ["img_backbone.blocks.0.attn.q_proj.weight", "pts_bbox_head.output_projection.weight",
            "map_head.instance_embedding_lane.weight", "query_pos.0.weight", "time_embedding.1.weight",
            "ego_pose_pe.reduce.0.weight", "position_encoder.2.weight", "position_range", "coords_d"]
    routed = route({k: torch.zeros(1) for k in keys}, load_mapping(name))
    assert sorted(routed.parts["scene_encoder"]) == sorted(keys) and routed.dropped == []
    from hybrid_vla_ros.model.plugins.orion_front.encoder import RELEASED
    front = load_mapping(name).scene_encoder
    options = {"fut_mode": 1, "use_pe": True, "motion_map_decoder": True} if name == "minddrive" else {}
    assert front["plugin"] == "orion_front" and front["config"] == {**RELEASED, "det": {**RELEASED["det"], **options}}


def test_a_map_topk_above_its_one_to_one_lanes_is_refused_at_convert(published, tmp_path):
    """The map memory keeps the top-k of the one-to-one lanes: more than there are is refused at convert (before:
    converted, then `verify` failed in torch.topk), with the rule, and nothing is written."""
    name, model, saved, _, pth = published
    one2one = model.spec.scene_config["map"]["num_lanes_one2one"]
    sets = [s for s in tiny_sets(name, model.spec) if s[0] != "scene_encoder.config.map.topk_proposals"]
    with pytest.raises(ConfigError, match=f"map topk_proposals {one2one + 1} > num_lanes_one2one {one2one}"):
        convert_checkpoint("pth", pth, name, tmp_path / "out", config_dir=saved,
                           sets=sets + [("scene_encoder.config.map.topk_proposals", one2one + 1)])
    assert not (tmp_path / "out").exists()


def test_the_patch_size_the_mapping_states_must_be_the_front_end_s(published, tmp_path):
    """The head metadata's patch_size (a mapping's action_head) checks the images, and must be the front end's."""
    from hybrid_vla_ros.model.plugins.orion_front import OrionFrontEnd
    name, model, saved, _, pth = published
    sets = [s for s in tiny_sets(name, model.spec) if s[0] != "action_head.patch_size"]   # the shipped 16 kept
    with pytest.raises(ConfigError, match="image_height=56 must be a multiple of 16"):
        convert_checkpoint("pth", pth, name, tmp_path / "out", config_dir=saved, sets=sets)
    config = {**model.spec.scene_config, "image_height": 112, "image_width": 112}     # 8 x 14 = 7 x 16
    spec = dataclasses.replace(model.spec, image_height=112, image_width=112, patch_size=16, scene_config=config)
    with pytest.raises(ConfigError, match="backbone's patch_size is 14, the spec's 16: set patch_size: 14"):
        OrionFrontEnd.from_config(config, model.spec.hidden_size, spec)


def test_real_size_images_convert_for_the_patch_size_the_model_uses(tmp_path):
    """The shipped mappings' 640 x 640 images with EVA's 16-px patches (a tiny-width front end at that image size):
    converted with only the widths set, loaded, and planning as the model written (before: refused, '640 must be
    a multiple of 14 for scene_llama', and patch_size an unknown field)."""
    base = get_preset(PRESETS["orion"])
    front = {**base.scene_config, "image_height": 640, "image_width": 640,
             "backbone": {**base.scene_config["backbone"], "patch_size": 16}}
    spec = dataclasses.replace(base, name="tiny-orion-640", image_height=640, image_width=640, patch_size=16,
                               scene_config=front)
    model = build_model(spec)
    saved = save_checkpoint(model, tmp_path / "saved")
    orion_pth(saved, tmp_path / "orion.pth", spec, model.scene_encoder.state_dict())
    sets = tiny_sets("orion", spec)
    assert not [k for k, _ in sets if k.endswith(("image_height", "image_width", "patch_size"))]   # as shipped
    convert_checkpoint("pth", tmp_path / "orion.pth", "orion", tmp_path / "out", config_dir=saved, sets=sets)
    out = load_checkpoint(tmp_path / "out")
    assert (out.spec.image_height, out.spec.image_width, out.spec.patch_size) == (640, 640, 16)
    frame = synthetic_frame(spec, 0)
    assert np.abs(plan(out, frame).points - plan(model, frame).points).max() < MERGE_TOLERANCE
