"""Alpamayo 2 Super as its authors' own code builds and saves it (issue 55): manifests scripts/extract_manifest.py
wrote from `Alpamayo2Super` and its `ExpertModel` (NVlabs/alpamayo2 @beb2977, read through its lucamodica/alpamayo2
mirror; transformers 4.57.1, hydra-core), not from this package's module tree. The released-size one (built on the
meta device) holds every tensor of the `alpamayo2-super-like` preset the fit table plans, at the same shape; the
authors' tokenizer code gives the vocabulary and trajectory-token ids the preset assumes. A tiny release directory
written from the tiny one loads (its nested expert keys read into the package's model), runs as the authors'
`sample_trajectories_from_data` runs it (golden outputs their code recorded: scripts/extract_golden_alpamayo2.py) and
splits exactly at every cut."""

import gzip
import json
import math
from pathlib import Path

import pytest
import torch

from hybrid_vla_ros.engine.expert_split import run_split
from hybrid_vla_ros.model.load import load_vla
from hybrid_vla_ros.model.plugins import alpamayo
from manifest_checkpoint import load_manifest, write_safetensors_release

GOLDEN = Path(__file__).resolve().parent / "data" / "golden" / "alpamayo2_super_tiny.json.gz"
TOL = 1e-5   # x the largest coordinate: float32 in another operation order
# the preset's parameter names -> the release's keys (its Qwen3-VL under vlm.model, the expert's LLM under
# expert.expert, the projections beside it)
ROUTES = (("backbone.", "vlm.model."), ("action_head.expert.", "expert.expert."),
          ("action_head.action_in_proj.", "expert.action_in_proj."),
          ("action_head.action_out_proj.", "expert.action_out_proj."))
# what the release saves and the preset does not hold: the VLM's lm_head (the preset's head is the expert; the
# suffix's decode needs it: plan/decode_heavy.py counts it), the action space's statistics and the Fourier tables
NOT_PARAMETERS = ("vlm.lm_head.weight", "expert.action_space.", "expert.action_in_proj.sinus.",
                  "expert.action_in_proj.timestep_fourier_encoder.")


@pytest.fixture(scope="module")
def released():
    return load_manifest("alpamayo2_super_released")


def release_key(name: str) -> str:
    prefix, to = next((p, t) for p, t in ROUTES if name.startswith(p))
    return to + name[len(prefix):]


def test_the_authors_module_tree_holds_every_tensor_of_the_preset_at_its_shape(released):
    tensors = {key: shape for key, shape, *_ in released["tensors"]}
    model = load_vla(preset="alpamayo2-super-like", shapes_only=True)
    wrong = [(name, tensors.get(release_key(name)), list(p.shape)) for name, p in model.named_parameters()
             if tensors.get(release_key(name)) != list(p.shape)]
    assert not wrong, wrong[:5]
    read = {release_key(name) for name, _ in model.named_parameters()}
    left = sorted(k for k in tensors if k not in read)
    assert left and all(k.startswith(NOT_PARAMETERS) for k in left), left
    vlm = sum(math.prod(s) for k, s in tensors.items() if k.startswith("vlm.model."))
    expert = sum(math.prod(s) for k, s in tensors.items() if k.startswith("expert.expert."))
    assert 2.3e9 < expert < 2.5e9 and 32e9 < vlm < 33e9   # the card: a 32B backbone, a 2.3B expert


def test_the_authors_tokenizer_code_gives_the_vocabulary_and_ids_the_preset_assumes(released):
    from hybrid_vla_ros.model.presets import get_preset
    config, ids = released["config_json"], released["traj_ids"]
    vocab = config["vlm_config"]["text_config"]["vocab_size"]
    assert vocab == get_preset("alpamayo2-super-like").vocab_size == 155776
    # Qwen3-VL's 151669 + <i0>..<i3999> + 28 added special tokens (<|image_pad|> is Qwen's own), padded to 128
    assert released["tokenizer_length"] == 151669 + 4000 + 28 and vocab == -(-released["tokenizer_length"] // 128) * 128
    assert (ids["history_id0"], ids["future_id0"]) == (151669, 151669 + 1000)
    assert (ids["history_start"], ids["future_start"], ids["future_pad"]) == (155674, 155681, 155685)
    assert config["tokens_per_history_traj"] == 48 and config["tokens_per_future_traj"] == 128


def golden_inputs(golden: dict) -> alpamayo.AlpamayoInputs:
    data = golden["inputs"]
    pixels = data["pixel_values"]   # the script's CPU torch.randn, drawn again from its seed
    return alpamayo.AlpamayoInputs(
        input_ids=torch.tensor(data["input_ids"]), image_grid_thw=torch.tensor(data["image_grid_thw"]),
        pixel_values=torch.randn(pixels["shape"], generator=torch.Generator().manual_seed(pixels["seed"])),
        ego_history_xyz=torch.tensor(data["ego_history_xyz"]), ego_history_rot=torch.tensor(data["ego_history_rot"]))


@pytest.fixture(scope="module")
def golden_release(tmp_path_factory):
    """(golden, the tiny release written with the values the golden's run loaded, its model)."""
    golden = json.loads(gzip.decompress(GOLDEN.read_bytes()))
    folder = tmp_path_factory.mktemp("alpamayo2_super")
    write_safetensors_release(load_manifest("alpamayo2_super_tiny"), folder, scale=golden["scale"])
    return golden, folder, alpamayo.load_release(folder)


def close(ours: torch.Tensor, theirs: torch.Tensor) -> bool:
    return float((ours - theirs).abs().max()) <= TOL * max(1.0, float(theirs.abs().max()))


def test_the_package_runs_the_release_as_its_authors_code_does(golden_release):
    """Their sample_trajectories_from_data on the tiny release (scripts/extract_golden_alpamayo2.py): the same
    reasoning tokens (the most likely each step: top_p 1e-6); at each of their 10 Euler steps, the package's
    velocity at their x and t equals theirs (the expert over the cache the reasoning left: positions, mask, the
    action projections); their sampled actions integrate to their trajectory. Each within float32's reordering
    (transformers 4.57.1 there, this package's version here): the whole sampled trajectory of the random tiny
    expert is not comparable (a 1e-6 velocity difference grows to 0.2 over 10 steps: the script's docstring)."""
    from hybrid_vla_ros.model.plugins.alpamayo.decode import decode
    from hybrid_vla_ros.model.plugins.alpamayo.expert import ExpertContext
    from hybrid_vla_ros.model.plugins.alpamayo.reference import fused_prompt, offset_of
    golden, _, model = golden_release
    cfg, inputs = model.config, golden_inputs(golden)
    sampling = alpamayo.Sampling(top_p=golden["top_p"], max_new_tokens=golden["max_new_tokens"])
    prompt = fused_prompt(model, inputs)
    with torch.inference_mode():
        decoded = decode(model.vlm, prompt, model.image_token_id, cfg.traj_token_ids["future_start"], cfg.banned,
                         sampling, torch.Generator().manual_seed(0))
        assert decoded.tokens == golden["tokens"]
        context = ExpertContext(model, decoded.cache, offset_of(decoded, prompt.input_ids.shape[1]), decoded.rope_delta)
        for i, step in enumerate(golden["steps"]):
            x, t = torch.tensor([step["x"]]), torch.full((1, 1, 1), step["t"])
            assert close(context.velocity(x, t)[0], torch.tensor(step["v"])), i
        actions = torch.tensor([golden["actions"]])
        xyz, _ = model.action_space.to_trajectory(actions, inputs.ego_history_xyz[:, 0], inputs.ego_history_rot[:, 0])
    assert close(xyz[0], torch.tensor(golden["pred_xyz"]))


def test_the_split_equals_the_unsplit_release_on_the_published_layout_at_every_cut(golden_release):
    """6 cameras x 4 frames, 48 history tokens (the golden's inputs), decode and expert across every cut."""
    golden, _, model = golden_release
    sampling = alpamayo.Sampling(top_p=golden["top_p"], max_new_tokens=golden["max_new_tokens"])
    inputs = golden_inputs(golden)
    ours = alpamayo.run_reference(model, inputs, sampling=sampling)
    assert ours.tokens == golden["tokens"] and torch.isfinite(ours.xyz).all()
    for p in range(model.num_blocks + 1):
        split = run_split(model, inputs, p, sampling=sampling)
        assert split.result.tokens == ours.tokens and torch.equal(split.result.xyz, ours.xyz), p


def test_hybrid_vla_verify_splits_the_authors_layout_exactly_at_every_cut(golden_release, capsys):
    from hybrid_vla_ros.cli import main
    _, folder, _ = golden_release
    assert main(["verify", "--checkpoint", str(folder)]) == 0
    out = capsys.readouterr().out
    assert "alpamayo2_super" in out and out.count("max_abs_diff=0.000e+00") == 5   # p = 0 .. 4


def tiny_config(**changes) -> dict:
    """The tiny release's config.json as the authors' code wrote it, with nested `changes` ("a.b": value)."""
    import copy
    raw = copy.deepcopy(load_manifest("alpamayo2_super_tiny")["config_json"])
    for path, value in changes.items():
        *parents, leaf = path.split(".")
        node = raw
        for key in parents:
            node = node[key]
        node[leaf] = value
    return raw


@pytest.mark.parametrize("change, why", [
    ({"expert_config.llm_config.rms_norm_eps": 1e-5}, "differs from the VLM's text config in \\['rms_norm_eps'\\]"),
    ({"hist_traj_tokenizer_cfg.predict_yaw": True}, "predict_yaw"),
    ({"expert_config.expert_non_causal_attention": False}, "causal mask"),
    ({"traj_ids.future_id0": 999}, "future_id0"),
])
def test_a_config_this_reading_would_get_wrong_is_refused_naming_the_field(change, why):
    from hybrid_vla_ros.errors import ConfigError
    from hybrid_vla_ros.model.plugins.alpamayo.config import parse
    with pytest.raises(ConfigError, match=why):
        parse(tiny_config(**change))


def test_guidance_is_refused_for_alpamayo_2_super(golden_release):
    from hybrid_vla_ros.engine.expert_serve.prefix_server import check_settings
    from hybrid_vla_ros.errors import ConfigError
    golden, _, model = golden_release
    with pytest.raises(ConfigError, match="no classifier-free guidance"):
        alpamayo.run_reference(model, golden_inputs(golden), sampling=alpamayo.Sampling(max_new_tokens=2), guidance=True)
    with pytest.raises(ConfigError, match="no classifier-free guidance"):
        check_settings(model, alpamayo.Sampling(), alpamayo.FlowSettings(), guidance=True)


def test_without_the_origin_pad_the_history_is_45_tokens_the_48_less_the_step_from_the_origin():
    from hybrid_vla_ros.model.plugins.alpamayo.config import parse
    from hybrid_vla_ros.model.plugins.alpamayo.reference import history_tokens
    padded = parse(tiny_config())
    config = parse(tiny_config(**{"hist_traj_tokenizer_cfg.pad_origin_at_beginning": False}))
    assert (padded.history_tokens, config.history_tokens) == (48, 45)
    t = torch.arange(-15, 1, dtype=torch.float32) * 0.1
    xyz = torch.stack([5.0 * t, 0.3 * t * t, torch.zeros(16)], -1).view(1, 16, 3)
    ours = history_tokens(xyz, config.history, config.hist_token_start_idx)
    assert ours.shape == (1, 45) and torch.equal(ours, history_tokens(xyz, padded.history, 300)[:, 3:])


def test_the_text_end_ids_are_never_sampled_and_the_stop_token_at_the_cap_is_not_fed():
    from hybrid_vla_ros.model.plugins.alpamayo.config import parse
    from hybrid_vla_ros.model.plugins.alpamayo.decode import filtered_logits, verdict
    config = parse(tiny_config(**{"vlm_config.text_config.eos_token_id": [7, 352]}))   # 352: <|traj_future_start|>
    assert config.masked_ids == (7,) and config.banned == ((300, 340), (7, 8))
    logits = torch.zeros(384)
    logits[7], logits[352] = 50.0, 40.0
    kept = filtered_logits(logits, config.banned, alpamayo.Sampling(top_p=1e-6))
    assert int(kept.argmax()) == 352 and torch.isinf(kept[7]) and torch.isinf(kept[300:340]).all()
    stop = config.traj_token_ids["future_start"]
    assert verdict([5, stop], stop, 8) == (True, True)          # stopped early: fed (StopAfterEOS's extra step)
    assert verdict([5] * 7 + [stop], stop, 8) == (False, True)  # at max_new_tokens: generate never feeds it
    assert verdict([5] * 8, stop, 8) == (False, True) and verdict([5], stop, 8) == (True, False)
