"""ORION's / MindDrive's perception front end as published (issue 38), the `orion_front` scene encoder at toy size
(`tiny-orion-release`): its state-dict keys are the published prefixes and shapes (docs/sources/
published_orion_minddrive.md), shared modules repeated under every name; E + H + 1 detection tokens then E map
tokens at the LLM width; deterministic, reading each camera's lidar2img; a streaming memory in frame order;
exact at every cut; a tiny mmcv `.pth` of those keys converts and plans as the model it was written from."""

import math

import numpy as np
import pytest
import torch
import yaml
from safetensors import safe_open
from safetensors.torch import load_file

from hybrid_vla_ros.convert import convert_checkpoint
from hybrid_vla_ros.engine.stages import reference_forward
from hybrid_vla_ros.engine.verify import verify_partitions
from hybrid_vla_ros.errors import ConfigError
from hybrid_vla_ros.model.checkpoint import load_checkpoint, save_checkpoint
from hybrid_vla_ros.model.inputs import synthetic_frame
from hybrid_vla_ros.model.load import load_vla

PRESET = "tiny-orion-release"
QT_DECODERS = ("memory_decoder_cq", "memory_decoder_mq", "motion_decoder")
PUBLISHED_PREFIXES = ("img_backbone.", "query_pos.", "time_embedding.", "ego_pose_pe.", "pts_bbox_head.", "map_head.",
                      "position_encoder.", "position_range", "coords_d")
D, VIT, HIDDEN = 32, 32, 64   # PETR width (published 256), ViT width (1024), the LLM's (4096 / 896)


@pytest.fixture(scope="module")
def model():
    return load_vla(preset=PRESET)


@pytest.fixture()
def encoder(model):
    model.reset_memory("test")
    return model.scene_encoder


def encode(encoder, frame):
    images = torch.randn(2, 3, 56, 56, generator=torch.Generator().manual_seed(frame.seq))
    with torch.no_grad():
        return encoder.encode(images, torch.zeros(2), frame.stamp_ns, frame.context)


def test_keys_are_the_published_prefixes_and_shapes(encoder):
    shapes = {k: tuple(v.shape) for k, v in encoder.state_dict().items()}
    assert not [k for k in shapes if not k.startswith(PUBLISHED_PREFIXES)]
    vit = "img_backbone.blocks.0."
    expected = {
        "img_backbone.patch_embed.proj.weight": (VIT, 3, 14, 14), "img_backbone.pos_embed": (1, 3 * 3 + 1, VIT),
        "img_backbone.rope_win.freqs_cos": (9, 16), "img_backbone.rope_glb.freqs_sin": (16, 16),
        vit + "attn.q_proj.weight": (VIT, VIT), vit + "attn.k_proj.weight": (VIT, VIT), vit + "attn.q_bias": (VIT,),
        vit + "attn.v_bias": (VIT,), vit + "attn.proj.weight": (VIT, VIT), vit + "attn.rope.freqs_cos": (9, 16),
        vit + "mlp.w1.weight": (85, VIT), vit + "mlp.w2.weight": (85, VIT), vit + "mlp.ffn_ln.weight": (85,),
        vit + "mlp.w3.weight": (VIT, 85), vit + "norm1.weight": (VIT,),
        "query_pos.0.weight": (D, 396), "query_pos.2.weight": (D, D), "time_embedding.1.weight": (D,),
        "ego_pose_pe.reduce.0.weight": (D, 156), "ego_pose_pe.gamma.weight": (D, D), "ego_pose_pe.beta.bias": (D,),
        "position_range": (6,), "coords_d": (8,), "position_encoder.0.weight": (4 * D, 8 * 3),
        "position_encoder.2.weight": (D, 4 * D),
    }
    head = "pts_bbox_head."
    layer = head + "transformer.query_decoder._layers.5.transformer_layers."
    expected.update({
        head + "input_projection.weight": (D, VIT), head + "output_projection.weight": (HIDDEN, D),
        head + "reference_points.weight": (12, 3), head + "pseudo_reference_points.weight": (6, 3),
        head + "query_embedding.weight": (8, D), head + "memory_query.weight": (2, D),
        head + "can_bus_embed.0.weight": (4 * D, 89), head + "can_bus_embed.2.weight": (HIDDEN, 4 * D),
        layer + "0.attn.in_proj_weight": (3 * D, D), layer + "0.attn.in_proj_bias": (3 * D,),
        layer + "2.attn.out_proj.weight": (D, D), layer + "4._layers.0.weight": (64, D),
        layer + "4._layers.3.weight": (D, 64), layer + "5.weight": (D,),
        head + "memory_decoder_cq._layers.0.transformer_layers.0.attn.in_proj_weight": (3 * D, D),
        head + "memory_decoder_mq._layers.0.transformer_layers.2._layers.0.weight": (2 * D, D),
        head + "motion_decoder._layers.0.transformer_layers.3.weight": (D,), head + "motion_mode_query.weight": (6, D),
        head + "scene_time_embedding.0.weight": (D, D), head + "cls_branches.5.6.weight": (9, D),
        head + "cls_branches.0.4.weight": (D,), head + "reg_branches.5.4.weight": (10, D),
        head + "tl_branches.5.6.weight": (4, D), head + "traj_branches.0.4.weight": (12, 2 * D),
        head + "traj_cls_branches.0.6.weight": (1, 2 * D), head + "code_weights": (10,), head + "pc_range": (6,),
        "map_head.reference_points_lane.weight": (3, D), "map_head.points_embedding_lane.weight": (11, D),
        "map_head.instance_embedding_lane.weight": (18, D), "map_head.query_embedding.weight": (8, D),
        "map_head.reg_branches.5.4.weight": (33, D), "map_head.cls_branches.0.6.weight": (6, D),
        "map_head.output_projection.weight": (HIDDEN, D), "map_head.code_weights": (2,),
        "map_head.transformer.query_decoder._layers.0.transformer_layers.2.attn.in_proj_weight": (3 * D, D),
    })
    assert {k: shapes.get(k) for k in expected} == expected
    absent = [vit + "attn.q_proj.bias", vit + "attn.k_bias", vit + "attn.inner_attn_ln.weight", "ego_pose_pe.ln.weight",
              head + "can_bus_embed.1.weight", head + "reg_branches.0.1.weight"]
    # the one-layer decoders' FlashMHA(embed_dims, num_heads, dropout=0.0): dropout is its bias flag, so no bias
    absent += [f"{head}{d}._layers.0.transformer_layers.0.attn.{b}" for d in QT_DECODERS
               for b in ("in_proj_bias", "out_proj.bias")]
    assert not [k for k in absent if k in shapes]
    assert layer + "2.attn.out_proj.bias" in shapes      # the PETR decoders' (dropout 0.1: bias) are there


def test_the_released_config_gives_the_notes_shapes():
    """ORION's released sizes (built on the meta device): the shapes the reading notes list, 529 tokens of 4096."""
    from hybrid_vla_ros.model.plugins.orion_front.encoder import RELEASED, OrionFrontEnd
    with torch.device("meta"):
        released = OrionFrontEnd.from_config(RELEASED, 4096)
    shapes = {k: tuple(v.shape) for k, v in released.state_dict().items()}
    layer = "pts_bbox_head.transformer.query_decoder._layers.5.transformer_layers."
    assert {k: shapes[k] for k in (
        "img_backbone.patch_embed.proj.weight", "img_backbone.pos_embed", "img_backbone.rope_win.freqs_cos",
        "img_backbone.rope_glb.freqs_sin", "img_backbone.blocks.23.attn.q_proj.weight",
        "img_backbone.blocks.2.mlp.w1.weight",
        "img_backbone.blocks.0.mlp.ffn_ln.weight", "img_backbone.blocks.0.mlp.w3.weight", "query_pos.0.weight",
        "ego_pose_pe.reduce.0.weight", "position_encoder.0.weight", "position_encoder.2.weight", "coords_d",
        "pts_bbox_head.input_projection.weight", "pts_bbox_head.output_projection.weight",
        "pts_bbox_head.reference_points.weight", "pts_bbox_head.pseudo_reference_points.weight",
        "pts_bbox_head.query_embedding.weight", "pts_bbox_head.memory_query.weight",
        "pts_bbox_head.can_bus_embed.0.weight",
        "pts_bbox_head.can_bus_embed.2.weight", layer + "0.attn.in_proj_weight", layer + "4._layers.0.weight",
        "pts_bbox_head.memory_decoder_cq._layers.0.transformer_layers.2._layers.0.weight",
        "pts_bbox_head.traj_branches.0.4.weight", "pts_bbox_head.traj_cls_branches.0.6.weight",
        "map_head.instance_embedding_lane.weight",
        "map_head.reg_branches.0.4.weight", "map_head.output_projection.weight")} == {
        "img_backbone.patch_embed.proj.weight": (1024, 3, 16, 16), "img_backbone.pos_embed": (1, 197, 1024),
        "img_backbone.rope_win.freqs_cos": (256, 64), "img_backbone.rope_glb.freqs_sin": (1600, 64),
        "img_backbone.blocks.23.attn.q_proj.weight": (1024, 1024), "img_backbone.blocks.2.mlp.w1.weight": (2730, 1024),
        "img_backbone.blocks.0.mlp.ffn_ln.weight": (2730,), "img_backbone.blocks.0.mlp.w3.weight": (1024, 2730),
        "query_pos.0.weight": (256, 396), "ego_pose_pe.reduce.0.weight": (256, 156),
        "position_encoder.0.weight": (1024, 192), "position_encoder.2.weight": (256, 1024), "coords_d": (64,),
        "pts_bbox_head.input_projection.weight": (256, 1024), "pts_bbox_head.output_projection.weight": (4096, 256),
        "pts_bbox_head.reference_points.weight": (600, 3), "pts_bbox_head.pseudo_reference_points.weight": (300, 3),
        "pts_bbox_head.query_embedding.weight": (256, 256), "pts_bbox_head.memory_query.weight": (16, 256),
        "pts_bbox_head.can_bus_embed.0.weight": (1024, 89), "pts_bbox_head.can_bus_embed.2.weight": (4096, 1024),
        layer + "0.attn.in_proj_weight": (768, 256), layer + "4._layers.0.weight": (2048, 256),
        "pts_bbox_head.memory_decoder_cq._layers.0.transformer_layers.2._layers.0.weight": (512, 256),
        "pts_bbox_head.traj_branches.0.4.weight": (12, 512), "pts_bbox_head.traj_cls_branches.0.6.weight": (1, 512),
        "map_head.instance_embedding_lane.weight": (1800, 256),
        "map_head.reg_branches.0.4.weight": (33, 256), "map_head.output_projection.weight": (4096, 256)}
    assert OrionFrontEnd.tokens_for(RELEASED) == 529
    assert not [k for k in shapes if k.startswith(tuple(f"pts_bbox_head.{d}." for d in QT_DECODERS))
                and k.endswith(("in_proj_bias", "out_proj.bias"))]


def test_shared_modules_are_repeated_under_every_published_name(encoder):
    state = encoder.state_dict()
    for key in ("query_pos.0.weight", "time_embedding.1.bias", "ego_pose_pe.gamma.weight"):
        for owner in ("pts_bbox_head.", "map_head."):
            assert torch.equal(state[owner + key], state[key]), owner + key
    for i in range(6):   # one branch object per decoder layer
        assert torch.equal(state[f"pts_bbox_head.cls_branches.{i}.6.weight"],
                           state["pts_bbox_head.cls_branches.0.6.weight"])
        assert torch.equal(state[f"map_head.reg_branches.{i}.4.weight"], state["map_head.reg_branches.0.4.weight"])
    for block, table in ((0, "rope_win"), (1, "rope_glb")):   # block 0 windowed, block 1 global
        assert torch.equal(state[f"img_backbone.blocks.{block}.attn.rope.freqs_cos"],
                           state[f"img_backbone.{table}.freqs_cos"])
    i = torch.arange(8.0)   # PETR's linearly increasing depth bins from 1 m to position_range's far x (61.2 m)
    assert torch.allclose(state["coords_d"], 1 + 60.2 * i * (i + 1) / (8 * 9))
    assert state["position_range"].tolist() == pytest.approx([-61.2, -61.2, -10.0, 61.2, 61.2, 10.0])


def test_tokens_are_scene_history_can_bus_then_map_at_the_llm_width(model, encoder):
    assert encoder.plugin_name == "orion_front" and encoder.num_tokens == 8 + 2 + 1 + 8
    tokens = encode(encoder, synthetic_frame(model.spec, 0))
    assert tokens.shape == (19, HIDDEN) and torch.isfinite(tokens).all()
    assert model.image_tokens == 19
    with pytest.raises(ConfigError, match=r"lacks \['det.num_query'\]"):
        config = model.spec.scene_config
        type(encoder).from_config({**config, "det": {**config["det"], "num_query": 0}}, HIDDEN)


def test_deterministic_and_reads_each_camera_s_geometry(model, encoder):
    frame = synthetic_frame(model.spec, 0)
    first = encode(encoder, frame)
    encoder.reset_memory()
    assert torch.equal(encode(encoder, frame), first)
    moved = synthetic_frame(model.spec, 0)
    moved.context.cameras[1].cam_from_base[:3, 3] += (0.5, 0.0, 0.0)                  # camera 1 half a metre off
    encoder.reset_memory()
    other = encode(encoder, moved)
    scene, can_bus, lanes = slice(0, 8), 10, slice(11, 19)
    assert (other[scene] - first[scene]).abs().max() > 1e-6 and (other[lanes] - first[lanes]).abs().max() > 1e-6
    assert torch.equal(other[can_bus], first[can_bus])   # the can-bus token reads no image (first frame)


def test_the_can_bus_and_command_come_from_the_frame_context(encoder):
    # heading -90 degrees at (10, 20) in the map
    pose = torch.tensor([[0.0, 1.0, 0.0, 10.0], [-1.0, 0.0, 0.0, 20.0], [0.0, 0.0, 1.0, 0.0], [0, 0, 0, 1.0]])
    status = torch.tensor([5.0, 0.5, 0.1, 0.0])
    command = torch.zeros(7)
    command[1] = 1.0                                                                    # NAV_COMMANDS[1]: turn left
    frame = encoder.frame_inputs(0, pose, status, command, torch.device("cpu"))
    yaw = 1.5 * math.pi
    want = [10.0, 20.0, 0.0, math.cos(yaw / 2), 0, 0, math.sin(yaw / 2), 5.0, 0, 0, 0.5, 0, 0, 0, 0, 0.1, yaw, 270.0]
    assert frame["can_bus"].tolist() == pytest.approx(want, abs=1e-5)
    assert float(frame["command"]) == 0.0                                               # ORION's turn left
    assert float(encoder.frame_inputs(0, pose, status, torch.zeros(7), torch.device("cpu"))["command"]) == 3.0


def test_minddrive_s_head_options_add_its_keys_and_leave_the_tokens_alone(model, encoder):
    """MindDrive's detection head (fut_mode 1, use_pe; its 0.5B's DREAM map decoder and LaneNet): its extra keys, and
    the same tokens from the same shared weights (they serve the boxes' motion only)."""
    config = model.spec.scene_config
    det = {**config["det"], "fut_mode": 1, "use_pe": True, "motion_map_decoder": True}
    minddrive = type(encoder).from_config({**config, "det": det}, HIDDEN).eval()
    shapes = {k: tuple(v.shape) for k, v in minddrive.state_dict().items()}
    head = "pts_bbox_head."
    assert {k: shapes.get(head + k) for k in ("pos_mlp_sa.weight", "pos_mlp.weight", "motion_mode_query.weight",
                                              "lane_encoder.layer_seq.lmlp_2.mlp.1.weight",
                                              "motion_map_decoder._layers.0.transformer_layers.2._layers.0.weight")} \
        == {"pos_mlp_sa.weight": (D, 2), "pos_mlp.weight": (D, 2), "motion_mode_query.weight": (1, D),
            "lane_encoder.layer_seq.lmlp_2.mlp.1.weight": (D,),
            "motion_map_decoder._layers.0.transformer_layers.2._layers.0.weight": (2 * D, D)}
    state = {k: v for k, v in encoder.state_dict().items() if k != head + "motion_mode_query.weight"}   # 6 modes
    missing, unexpected = minddrive.load_state_dict(state, strict=False)
    assert not unexpected and all(k.startswith(head) for k in missing)
    frame = synthetic_frame(model.spec, 0)
    assert torch.equal(encode(minddrive, frame), encode(encoder, frame))


def test_the_memory_runs_in_frame_order_and_a_gap_forgets_it(model, encoder):
    frames = [synthetic_frame(model.spec, seq) for seq in range(3)]
    outputs = [encode(encoder, f) for f in frames]
    assert encoder.memory_length() == 3
    encoder.reset_memory()
    alone = encode(encoder, frames[2])
    assert (alone - outputs[2]).abs().max() > 1e-5                                       # the history mattered
    late = synthetic_frame(model.spec, 2, stamp_ns=frames[2].stamp_ns + 2_500_000_000)
    encoder.reset_memory()
    fresh = encode(encoder, late)
    encoder.reset_memory()
    encode(encoder, frames[0])
    assert torch.equal(encode(encoder, late), fresh)                                     # a 2.5 s gap: forgotten


def test_exact_at_every_cut_over_a_run_that_fills_the_memory(model):
    report = verify_partitions(model, frames=4)
    assert [r["partition"] for r in report["results"]] == list(range(model.num_blocks + 1))
    # split vs HF's forward: same kernels, same inputs, one thread (test_partition.py, EXACT)
    assert all(r["max_abs_diff"] == 0.0 for r in report["results"]), report["results"]


LLM = "lm_head.base_model.model.model."
FRONT = r"^(img_backbone|pts_bbox_head|map_head|query_pos|time_embedding|ego_pose_pe|position_encoder)\."


def orion_pth(model, saved, path):
    """The tiny model as an mmcv checkpoint of ORION's layout: the front end's keys at the top level, from its
    state_dict as mmcv's save_checkpoint takes it (a shared module's tensors share storage in the pickle), the LLM
    under peft's wrap (no LoRA here); the head under `head.` (a test-local mapping: the shipped one,
    test_published_orion_minddrive.py)."""
    state = dict(model.scene_encoder.state_dict())
    state.update({LLM + k: v for k, v in load_file(str(saved / "model.safetensors")).items()})
    state.update({"head." + k: v for k, v in load_file(str(saved / "action_head.safetensors")).items()})
    torch.save({"meta": {"mmcv_version": "1.7.0", "epoch": 6}, "state_dict": state}, path)
    return state


def test_a_tiny_mmcv_pth_of_the_published_keys_converts_and_plans_the_same(model, tmp_path):
    saved = save_checkpoint(model, tmp_path / "saved")
    state = orion_pth(model, saved, tmp_path / "Orion.pth")
    assert state["query_pos.0.weight"].data_ptr() == state["map_head.query_pos.0.weight"].data_ptr()
    with safe_open(str(saved / "action_head.safetensors"), "pt") as f:
        head = yaml.safe_load(f.metadata()["hybrid_vla"])
    mapping = {"format": "hybrid_vla_convert/1", "name": "orion-front-tiny", "provenance": "test",
               "unwrap": ["state_dict"],
               "rename": [[r"^module\.", ""], [r"^lm_head\.base_model\.model\.model\.", "llm."],
                          [FRONT, r"front.\1."], [r"^(position_range|coords_d)$", r"front.\1"]],
               "parts": [{"prefix": "head.", "to": "action_head"}, {"prefix": "front.", "to": "scene_encoder"},
                         {"prefix": "llm.", "to": "backbone"}],
               "action_head": head, "scene_encoder": {"plugin": "orion_front", "config": model.spec.scene_config}}
    (tmp_path / "orion_front.yaml").write_text(yaml.safe_dump(mapping))
    convert_checkpoint("pth", tmp_path / "Orion.pth", str(tmp_path / "orion_front.yaml"), tmp_path / "out",
                       config_dir=saved)
    converted = load_checkpoint(tmp_path / "out")
    assert converted.scene_encoder.plugin_name == "orion_front"
    model.reset_memory("test")
    converted.reset_memory("test")
    for seq in range(3):
        frame = synthetic_frame(model.spec, seq)
        assert np.array_equal(reference_forward(converted, frame)[1].points, reference_forward(model, frame)[1].points)
