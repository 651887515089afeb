"""Alpamayo 1 (R1) and 1.5 as released, at toy size (published_alpamayo.py): the layout loads, the unsplit
reference runs end to end, its sampling is seeded, 1.5's guidance acts, bad inputs are refused; the real-size
preset is sized without allocating."""

import dataclasses

import pytest
import torch
from safetensors import safe_open

from published_alpamayo import SPECIAL, TRAJ_VOCAB, WAYPOINTS, release_inputs, release_tensors, write_release
from hybrid_vla_ros.errors import ConfigError, InputError, NonFiniteError
from hybrid_vla_ros.model.load import load_vla
from hybrid_vla_ros.model.plugins import alpamayo
from hybrid_vla_ros.model.plugins.alpamayo.action_space import UnicycleActionSpace
from hybrid_vla_ros.model.plugins.alpamayo.expert import ExpertContext
from hybrid_vla_ros.model.plugins.alpamayo.reference import history_tokens

SHORT = alpamayo.Sampling(max_new_tokens=10)


@pytest.fixture(scope="module")
def releases(tmp_path_factory):
    root = tmp_path_factory.mktemp("alpamayo")
    return {"r1": write_release(root / "r1", "alpamayo_r1"), "1.5": write_release(root / "r15", "alpamayo1_5", seed=3)}


@pytest.fixture(scope="module")
def r1(releases):
    return load_vla(checkpoint=str(releases["r1"]))


@pytest.fixture(scope="module")
def r15(releases):
    return alpamayo.load_release(releases["1.5"])


def inputs(**kw):
    return alpamayo.AlpamayoInputs(**release_inputs(**kw))


def test_the_released_r1_layout_loads_every_tensor_from_its_file(releases, r1):
    assert isinstance(r1, alpamayo.AlpamayoModel) and r1.config.model_type == "alpamayo_r1"
    index = releases["r1"] / "model-00002-of-00002.safetensors"
    with safe_open(str(index), framework="pt") as f:
        assert torch.equal(r1.expert.layers[3].mlp.down_proj.weight, f.get_tensor("expert.layers.3.mlp.down_proj.weight"))
        assert torch.equal(r1.action_in_proj.encoder.trunk[6].weight, f.get_tensor("action_in_proj.encoder.trunk.6.weight"))
        assert float(r1.action_space.accel_std) == pytest.approx(f.get_tensor("action_space.accel_std").item())
    assert not any(p.device.type == "meta" for p in r1.parameters())
    assert r1.expert.config.hidden_size == 48 and r1.expert.config.num_hidden_layers == 4   # expert_cfg over text
    assert not hasattr(r1.expert, "embed_tokens")
    assert r1.config.hist_token_start_idx == 300 + 24      # past the future tokenizer's bins


def test_the_released_1_5_layout_loads_without_fourier_buffers(r15):
    assert r15.config.model_type == "alpamayo1_5" and "route_start" in r15.config.special_ids
    assert "action_in_proj.sinus.0.freqs" not in r15.published_keys()


def test_a_missing_or_foreign_tensor_is_refused(tmp_path):
    tensors = release_tensors("alpamayo_r1")
    del tensors["expert.layers.1.self_attn.q_proj.weight"]
    with pytest.raises(ConfigError, match="expert.layers.1.self_attn.q_proj.weight"):
        alpamayo.load_release(write_release(tmp_path / "missing", tensors=tensors))
    tensors = release_tensors("alpamayo_r1")
    tensors["expert.layers.4.mlp.up_proj.weight"] = torch.zeros(96, 48)
    with pytest.raises(ConfigError, match="no place"):
        alpamayo.load_release(write_release(tmp_path / "foreign", tensors=tensors))


def test_an_expert_that_cannot_share_the_vlm_cache_is_refused(tmp_path):
    import json
    directory = write_release(tmp_path / "kv")
    config = json.loads((directory / "config.json").read_text())
    config["expert_cfg"] = {**config["expert_cfg"], "num_key_value_heads": 4}
    (directory / "config.json").write_text(json.dumps(config))
    with pytest.raises(ConfigError, match="num_key_value_heads"):
        alpamayo.load_release(directory)


def test_the_expert_is_non_causal_over_action_tokens_and_leaves_the_cache_as_it_was(r1):
    from hybrid_vla_ros.model.plugins.alpamayo.decode import new_cache, prefill
    from hybrid_vla_ros.model.plugins.alpamayo.reference import fused_prompt
    prompt = fused_prompt(r1, inputs())
    cache = new_cache(r1.vlm)
    _, delta = prefill(r1.vlm, prompt, r1.image_token_id, cache)
    context = ExpertContext(r1, cache, prompt.input_ids.shape[1], delta)
    x, t = torch.randn(1, WAYPOINTS, 2), torch.full((1, 1, 1), 0.3)
    with torch.inference_mode():
        v = context.velocity(x, t)
        x2 = x.clone()
        x2[:, -1] += 1.0                                       # only the last action token changes
        v2 = context.velocity(x2, t)
    assert not torch.allclose(v[:, 0], v2[:, 0])                # the first token sees the last one
    assert cache.get_seq_length() == prompt.input_ids.shape[1]
    assert all(layer.get_seq_length() == prompt.input_ids.shape[1] for layer in cache.layers)


def test_the_reference_runs_end_to_end_and_repeats_for_a_fixed_seed(r1):
    one = alpamayo.run_reference(r1, inputs(), seed=7, sampling=SHORT)
    two = alpamayo.run_reference(r1, inputs(), seed=7, sampling=SHORT)
    assert one.xyz.shape == (WAYPOINTS, 3) and one.rotation.shape == (WAYPOINTS, 3, 3)
    assert torch.isfinite(one.xyz).all() and one.tokens == two.tokens and torch.equal(one.xyz, two.xyz)
    assert {"reasoning_ms", "flow_ms", "total_ms"} <= set(one.timings)
    banned = range(300, 300 + TRAJ_VOCAB)
    assert len(one.tokens) == SHORT.max_new_tokens and not set(one.tokens) & set(banned)


def test_a_different_seed_changes_the_sampled_decode(r1):
    runs = [alpamayo.run_reference(r1, inputs(), seed=s, sampling=SHORT) for s in (1, 2)]
    assert runs[0].tokens != runs[1].tokens


def test_guidance_changes_the_1_5_trajectory_and_weight_one_is_no_guidance(r15):
    frame = inputs(route=True)
    plain = alpamayo.run_reference(r15, frame, seed=0, sampling=SHORT)
    mixed = alpamayo.run_reference(r15, frame, seed=0, sampling=SHORT, guidance=True,
                                   flow=alpamayo.FlowSettings(guidance_weight=3.0))
    unit = alpamayo.run_reference(r15, frame, seed=0, sampling=SHORT, guidance=True,
                                  flow=alpamayo.FlowSettings(guidance_weight=1.0))
    assert plain.tokens == mixed.tokens                       # guidance acts on the flow, not the reasoning
    assert (plain.xyz - mixed.xyz).abs().max() > 1e-3
    assert torch.equal(plain.xyz, unit.xyz)


def test_guidance_needs_a_route_span(r15):
    with pytest.raises(InputError, match="route"):
        alpamayo.run_reference(r15, inputs(route=False), seed=0, sampling=SHORT, guidance=True)


@pytest.mark.parametrize("field, value, error, match", [
    ("ego_history_xyz", torch.zeros(1, 16, 3), InputError, "ego_history_xyz: shape"),
    ("ego_history_rot", torch.eye(3).expand(1, 1, 15, 3, 3), InputError, "ego_history_rot: shape"),
    ("pixel_values", torch.zeros(63, 1536), InputError, "pixel_values: shape"),
    ("image_grid_thw", torch.tensor([[1, 2, 2]] * 15), InputError, "pixel_values: shape"),
    ("input_ids", torch.zeros(2, 5, dtype=torch.long), InputError, "input_ids: shape"),
])
def test_a_wrong_shaped_input_is_refused(r1, field, value, error, match):
    frame = dataclasses.replace(inputs(), **{field: value})
    with pytest.raises(error, match=match):
        alpamayo.run_reference(r1, frame, sampling=SHORT)


def test_a_non_finite_input_is_refused(r1):
    frame = inputs()
    frame.ego_history_xyz[0, 0, 3, 1] = float("nan")
    with pytest.raises(NonFiniteError, match="ego_history_xyz"):
        alpamayo.run_reference(r1, frame, sampling=SHORT)
    frame = inputs()
    frame.pixel_values[5, 5] = float("inf")
    with pytest.raises(NonFiniteError, match="pixel_values"):
        alpamayo.run_reference(r1, frame, sampling=SHORT)


def test_a_prompt_without_the_48_history_placeholders_is_refused(r1):
    frame = inputs()
    ids = frame.input_ids.clone()
    ids[ids == SPECIAL["traj_history"]] = 55
    with pytest.raises(InputError, match="traj_history"):
        alpamayo.run_reference(r1, dataclasses.replace(frame, input_ids=ids), sampling=SHORT)


def test_zero_actions_keep_the_history_speed_straight_ahead():
    space = UnicycleActionSpace({"n_waypoints": 8, "dt": 0.1})
    frame = release_inputs()
    xyz, rot = space.to_trajectory(torch.zeros(1, 8, 2), frame["ego_history_xyz"][:, 0], frame["ego_history_rot"][:, 0])
    assert xyz[0, :, 0] == pytest.approx([0.5 * (k + 1) for k in range(8)], abs=1e-3)     # 5 m/s from the history
    assert xyz[0, :, 1].abs().max() < 1e-6 and torch.allclose(rot[0], torch.eye(3).expand(8, 3, 3))


def test_history_deltas_become_bins_after_the_start_id():
    xyz = torch.tensor([[[0.0, 0.0, 0.0], [4.0, -4.0, 10.0]]])
    tokens = history_tokens(xyz, {"num_bins": 1000, "ego_xyz_min": [-4, -4, -10], "ego_xyz_max": [4, 4, 10]}, 7)
    assert tokens.tolist() == [[7 + 500, 7 + 500, 7 + 500, 7 + 999, 7 + 0, 7 + 999]]


def test_the_real_size_preset_is_sized_without_allocating():
    from hybrid_vla_ros.engine.stages import partition_report
    model = load_vla(preset="alpamayo-r1-like", shapes_only=True)
    assert all(p.device.type == "meta" for p in model.parameters())
    expert = sum(p.numel() for p in model.action_head.parameters())
    assert 2.2e9 < expert < 2.4e9                              # the model card's "Action Expert: 2.3B"
    report = partition_report(model, 18, None)
    assert report["total_params"] > 1e10 and report["suffix_params"] > expert


def test_the_preset_builds_lazily_on_meta_as_real_size_presets_do():
    model = load_vla(preset="alpamayo-r1-like", lazy=True)
    assert all(p.device.type == "meta" for p in model.parameters())
    with pytest.raises(ConfigError, match="per-layer keys"):
        model.action_head(torch.zeros(1, 1, 4096))


def test_engine_commands_refuse_a_release_by_name(r1):
    with pytest.raises(ConfigError, match="runs unsplit"):
        r1.spec


def test_top_p_keeps_the_smallest_nucleus_and_never_the_banned_range():
    from hybrid_vla_ros.model.plugins.alpamayo.decode import filtered_logits
    logits = torch.tensor([0.0, 5.0, 3.0, 9.0, 1.0])
    kept = filtered_logits(logits, ((3, 4),), alpamayo.Sampling(temperature=1.0, top_p=0.9)).isfinite()
    assert kept.tolist() == [False, True, True, False, False]   # 9.0 is banned; 5, 3 reach 0.9 of the rest


def test_the_decode_stops_after_feeding_traj_future_start(r1, monkeypatch):
    from hybrid_vla_ros.model.plugins.alpamayo import decode
    stop = SPECIAL["traj_future_start"]
    script = iter([61, 62, stop, 63])
    monkeypatch.setattr(decode, "sample", lambda *a, **k: next(script))
    result = alpamayo.run_reference(r1, inputs(), sampling=SHORT)
    assert result.stopped and result.tokens == [61, 62, stop] and torch.isfinite(result.xyz).all()
