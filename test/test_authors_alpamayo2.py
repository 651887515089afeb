"""Alpamayo 2 Super as its authors' own code builds and saves it (issue 55): manifests scripts/extract_manifest.py
wrote from `Alpamayo2Super` and its `ExpertModel` (NVlabs/alpamayo2 @beb2977, read through its lucamodica/alpamayo2
mirror; transformers 4.57.1, hydra-core), not from this package's module tree. The released-size one (built on the
meta device) holds every tensor of the `alpamayo2-super-like` preset the fit table plans, at the same shape; the
authors' tokenizer code gives the vocabulary and trajectory-token ids the preset assumes; a tiny release directory
written from the tiny one is refused in one line that says what serves it (the layout is not served yet)."""

import math

import pytest

from hybrid_vla_ros.errors import ConfigError
from hybrid_vla_ros.model.load import load_vla
from manifest_checkpoint import load_manifest, write_safetensors_release

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


def test_a_tiny_alpamayo_2_super_directory_is_refused_in_one_line_naming_what_serves(tmp_path, capsys):
    from hybrid_vla_ros.cli import main
    write_safetensors_release(load_manifest("alpamayo2_super_tiny"), tmp_path)
    with pytest.raises(ConfigError, match="Alpamayo 2 Super release .* not served yet"):
        load_vla(checkpoint=str(tmp_path))
    assert main(["verify", "--checkpoint", str(tmp_path)]) != 0
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and "--fit" in err and "Traceback" not in err
