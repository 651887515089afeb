"""Several passes per frame with LoRA adapters of their own (MindDrive's decision and action passes, over the same
scene tokens; model/lora.py): exact at every cut, each adapter and each pass's prompt matters, the adapters are
LoRA (== the merged weight, up to rounding), and they are read from peft's layout or refused with the reason."""

import dataclasses
import json
import shutil

import numpy as np
import pytest
import torch
from safetensors.torch import load_file, save_file

from hybrid_vla_ros.engine.stages import PrefixStage, SuffixStage, reference_forward
from hybrid_vla_ros.errors import ConfigError
from hybrid_vla_ros.model.checkpoint import load_checkpoint, save_checkpoint
from hybrid_vla_ros.model.inputs import encode_frame, synthetic_frame
from hybrid_vla_ros.model.load import load_vla
from hybrid_vla_ros.model.spec import VLASpec
from hybrid_vla_ros.model.presets import get_preset
from hybrid_vla_ros.model.vla import build_model

PRESET = "tiny-scene"


@pytest.fixture()
def model():
    return load_vla(preset=PRESET)


def points(model, seq=0):
    model.reset_memory("test")
    return reference_forward(model, synthetic_frame(model.spec, seq))[1].points


def test_both_passes_run_as_one_batch_with_their_own_prompt(model):
    encoded = encode_frame(synthetic_frame(model.spec, 0), model)
    assert encoded.input_ids.shape == (2, model.sequence_length)
    decision, action = encoded.input_ids
    assert not torch.equal(decision, action)                            # the decision pass has its own instruction
    state = PrefixStage(model, 2).run(synthetic_frame(model.spec, 0))
    assert state.hidden.shape == (2, model.sequence_length, model.spec.hidden_size)
    assert state.nbytes() > 2 * state.hidden[0].numel() * 4


def test_each_adapter_matters_and_none_is_merged_into_the_shared_weights(model):
    base = points(model)
    q_proj = model.decoder.layers[1].self_attn.q_proj
    weight = q_proj.weight.detach().clone()
    for name in ("decision", "action"):
        b = q_proj.lora_adapters[name].lora_B.weight
        saved = b.detach().clone()
        with torch.no_grad():
            b.zero_()
        assert np.abs(points(model) - base).max() > 1e-6, name
        with torch.no_grad():
            b.copy_(saved)
    assert np.array_equal(points(model), base) and torch.equal(q_proj.weight, weight)


def test_an_adapter_is_lora_the_hook_equals_the_merged_weight(model):
    q_proj = model.decoder.layers[0].self_attn.q_proj
    x = torch.randn(2, 5, q_proj.in_features)
    with torch.no_grad():
        out = q_proj(x)
        for row, name in enumerate(("decision", "action")):
            a, b = q_proj.lora_adapters[name].lora_A.weight, q_proj.lora_adapters[name].lora_B.weight
            merged = q_proj.weight + (b @ a) * (model.spec.lora_alpha / model.spec.lora_rank)
            torch.testing.assert_close(out[row], torch.nn.functional.linear(x[row], merged, q_proj.bias),
                                       rtol=1e-5, atol=1e-5)


def test_a_pass_without_an_adapter_runs_the_shared_weights():
    spec = get_preset(PRESET)
    plain = build_model(dataclasses.replace(spec, passes=[{"name": "decision"}, {"name": "action"}]))
    assert not hasattr(plain.decoder.layers[0].self_attn.q_proj, "lora_adapters")
    mixed = build_model(dataclasses.replace(spec, passes=[{"name": "decision"}, {"name": "action", "adapter": "a"}]))
    assert mixed.decoder.layers[0].self_attn.q_proj.lora_rows == (None, "a")
    for m in (plain, mixed):
        from hybrid_vla_ros.engine.verify import verify_partitions
        # split vs HF's forward: same kernels, same inputs, one thread (test_partition.py, EXACT)
        assert verify_partitions(m, frames=2)["max_abs_diff"] == 0.0


def test_adapters_are_read_from_peft_layout_including_a_causal_lm_s_key_names(model, tmp_path):
    save_checkpoint(model, tmp_path / "ckpt", max_shard_size="60KB")
    weights = tmp_path / "ckpt" / "adapters" / "action" / "adapter_model.safetensors"
    tensors = load_file(str(weights))
    assert all(k.startswith("base_model.model.layers.") and (".lora_A." in k or ".lora_B." in k) for k in tensors)
    save_file({k.replace("base_model.model.", "base_model.model.model.", 1): v for k, v in tensors.items()},
              str(weights))   # as peft saves an adapter of a causal LM (its decoder under .model)
    loaded = load_checkpoint(tmp_path / "ckpt")
    assert loaded.spec == model.spec
    expected = [points(model, s) for s in range(1)]
    loaded.reset_memory("test")
    prefix, suffix = PrefixStage(loaded, 1), SuffixStage(loaded, 1)
    # weights read back bit-equal; split vs HF's forward: same kernels, one thread (test_partition.py, EXACT)
    assert np.array_equal(suffix.run(prefix.run(synthetic_frame(model.spec, 0))).points, expected[0])


def test_missing_or_unlike_adapters_are_refused_with_the_reason(model, tmp_path):
    save_checkpoint(model, tmp_path / "ckpt")
    gone = tmp_path / "gone"
    shutil.copytree(tmp_path / "ckpt", gone)
    shutil.rmtree(gone / "adapters" / "decision")
    with pytest.raises(ConfigError, match="names adapter 'decision'.*peft's layout"):
        load_checkpoint(gone)
    unlike = tmp_path / "unlike"
    shutil.copytree(tmp_path / "ckpt", unlike)
    config = unlike / "adapters" / "decision" / "adapter_config.json"
    config.write_text(json.dumps({**json.loads(config.read_text()), "r": 8}))
    with pytest.raises(ConfigError, match="one rank, alpha and target set for every adapter"):
        load_checkpoint(unlike)
    config.write_text(json.dumps({**json.loads(config.read_text()), "r": 4, "use_dora": True}))
    with pytest.raises(ConfigError, match="only plain LoRA"):
        load_checkpoint(unlike)


def test_passes_are_refused_where_they_are_not_served():
    scene = get_preset(PRESET).to_dict()
    with pytest.raises(ConfigError, match="scene-encoded families with a waypoint head"):
        VLASpec.from_dict({**get_preset("tiny").to_dict(), "passes": [{"name": "a"}, {"name": "b"}]}, "test")
    with pytest.raises(ConfigError, match="unique non-empty 'name'"):
        VLASpec.from_dict({**scene, "passes": [{"name": "a"}, {"name": "a"}]}, "test")
    with pytest.raises(ConfigError, match="unknown keys \\['lora'\\]"):
        VLASpec.from_dict({**scene, "passes": [{"name": "a", "lora": "x"}]}, "test")
    with pytest.raises(ConfigError, match="adapters need lora_rank >= 1"):
        VLASpec.from_dict({**scene, "lora_rank": 0}, "test")
