"""A plain HF LLM fed by a scene encoder plugin with cross-frame memory (the ORION / MindDrive shape,
model/families/scene_llm.py + model/plugins/): exact at every cut over a run of frames (the memory included),
the memory kept in frame order across partition moves, reset by a time jump and on request; heads as plugins
reading several query tokens; plugins saved with the checkpoint and refused by name when unknown."""

import dataclasses

import numpy as np
import pytest

from hybrid_vla_ros.engine.stages import PrefixStage, SuffixStage, reference_forward
from hybrid_vla_ros.engine.verify import verify_partitions
from hybrid_vla_ros.errors import ConfigError
from hybrid_vla_ros.model.checkpoint import SCENE_FILE, load_checkpoint, save_checkpoint
from hybrid_vla_ros.model.inputs import synthetic_frame
from hybrid_vla_ros.model.load import load_vla
from hybrid_vla_ros.model.spec import VLASpec
from hybrid_vla_ros.model.presets import get_preset

PRESET = "tiny-scene"


@pytest.fixture()
def model():
    return load_vla(preset=PRESET)


def frames(model, count, first=0):
    return [synthetic_frame(model.spec, seq) for seq in range(first, first + count)]


def reference_run(model, sequence):
    model.reset_memory("test")
    return [reference_forward(model, frame)[1].points for frame in sequence]


def test_the_preset_is_a_plain_hf_llm_with_a_scene_encoder_and_a_gru_head_on_two_query_tokens(model):
    assert type(model.backbone).__name__ == "Qwen2Model" and model.backbone.config.model_type == "qwen2"
    assert model.scene_encoder.plugin_name == "query_scene" and model.scene_encoder.num_tokens == 8
    assert model.action_head.plugin_name == "gru" and model.query_tokens == 2 and model.num_passes == 2
    assert model.action_head.query_tokens == 4   # the 2 query tokens of each of the 2 passes
    assert model.sequence_length == 1 + (8 + 2) + model.spec.text_tokens + 16 + 2


def test_split_equals_hfs_own_forward_at_every_cut_over_a_run_that_fills_the_memory(model):
    report = verify_partitions(model, frames=5)  # memory of 3 frames: full from the 4th frame on
    assert [r["partition"] for r in report["results"]] == list(range(model.num_blocks + 1))
    # split vs HF's forward: same kernels, same inputs, one thread (test_partition.py, EXACT)
    assert all(r["max_abs_diff"] == 0.0 for r in report["results"]), report["results"]
    assert model.scene_encoder.memory_length() == 3


def test_the_memory_matters_the_same_frame_after_other_frames_gives_another_plan(model):
    sequence = frames(model, 4)
    with_history = reference_run(model, sequence)[-1]
    model.reset_memory("test")
    alone = reference_forward(model, sequence[-1])[1].points
    assert np.abs(with_history - alone).max() > 1e-4


def test_the_memory_runs_in_frame_order_across_partition_moves(model):
    """The encoder lives in the prefix: moving the cut (inside the zone: no copy) leaves its memory alone."""
    sequence = frames(model, 6)
    expected = reference_run(model, sequence)
    model.reset_memory("test")
    prefix, suffix = PrefixStage(model, 2, zone=(0, 4)), SuffixStage(model, 2, zone=(0, 4))
    for frame, p, want in zip(sequence, (2, 0, 4, 1, 3, 2), expected):
        prefix.set_partition(p)
        # split vs HF's forward: same kernels, same inputs, one thread (test_partition.py, EXACT)
        assert np.array_equal(suffix.run(prefix.run(frame)).points, want), p
    assert prefix.model.scene_encoder.memory_length() == 3


def test_a_time_jump_resets_the_memory_and_a_request_too(model):
    sequence = frames(model, 4)
    encoder = model.scene_encoder
    model.reset_memory("test")
    for frame in sequence:
        reference_forward(model, frame)
    assert encoder.memory_length() == 3
    resets = encoder.resets
    loop = dataclasses.replace(sequence[0], stamp_ns=sequence[0].stamp_ns)   # the bag starts again
    first_again = reference_forward(model, loop)[1].points
    assert encoder.resets == resets + 1 and encoder.last_reset == ("time_jump", loop.stamp_ns)
    assert encoder.memory_length() == 1
    assert np.array_equal(first_again, reference_run(model, sequence[:1])[0])  # as from an empty memory
    assert model.reset_memory("service", 123) and encoder.memory_length() == 0
    assert encoder.last_reset == ("service", 123)


def test_the_mlp_head_reads_the_query_tokens_and_both_heads_are_exact(model):
    spec = dataclasses.replace(get_preset(PRESET), name="scene-mlp", head="mlp")
    from hybrid_vla_ros.model.vla import build_model
    mlp = build_model(spec)
    assert mlp.action_head.plugin_name == "mlp" and mlp.action_head.mlp[0].in_features == 4 * spec.hidden_size
    # split vs HF's forward: same kernels, same inputs, one thread (test_partition.py, EXACT)
    assert verify_partitions(mlp, frames=2)["max_abs_diff"] == 0.0


def test_a_checkpoint_carries_the_encoder_and_the_head_plugin_and_each_stage_reads_its_own(model, tmp_path):
    save_checkpoint(model, tmp_path / "ckpt", max_shard_size="60KB")
    assert (tmp_path / "ckpt" / SCENE_FILE).is_file()
    loaded = load_checkpoint(tmp_path / "ckpt")
    assert loaded.spec == model.spec
    sequence = frames(model, 4)
    expected = reference_run(model, sequence)
    loaded.reset_memory("test")
    prefix, suffix = PrefixStage(loaded, 2), SuffixStage(loaded, 2)
    for frame, want in zip(sequence, expected):   # weights read back bit-equal; then as test_partition.py, EXACT
        assert np.array_equal(suffix.run(prefix.run(frame)).points, want)
    suffix_only = load_checkpoint(tmp_path / "ckpt", keep=lambda m: [])
    SuffixStage(suffix_only, 2)
    assert not any(k.startswith(("patch.", "vit.", "scene_queries")) for k in suffix_only.checkpoint_files.read_keys)
    assert all(p.device.type == "meta" for p in suffix_only.scene_encoder.parameters())
    assert all(p.device.type == "meta" for p in suffix_only.decoder.layers[0].parameters())
    prefix_only = load_checkpoint(tmp_path / "ckpt", keep=lambda m: [])
    PrefixStage(prefix_only, 2)   # the encoder, the embeddings and blocks 0, 1 only
    assert all(p.device.type == "meta" for i in (2, 3) for p in prefix_only.decoder.layers[i].parameters())
    assert all(p.device.type == "meta" for p in list(prefix_only.decoder.norm.parameters()) +
               list(prefix_only.action_head.parameters()))
    assert all(p.device.type != "meta" for p in prefix_only.scene_encoder.parameters())


def test_unknown_plugins_and_mismatched_shapes_are_refused_with_the_reason():
    spec = get_preset(PRESET).to_dict()
    from hybrid_vla_ros.model.vla import build_model
    with pytest.raises(ConfigError, match=r"hybrid_vla_ros.scene_encoders: no plugin 'orion_qt'.*"
                                         r"shipped: \['orion_front', 'query_scene'\]"):
        build_model(VLASpec.from_dict({**spec, "scene_encoder": "orion_qt"}, "test"))
    with pytest.raises(ConfigError, match=r"hybrid_vla_ros.heads: no plugin 'vae'"):
        build_model(VLASpec.from_dict({**spec, "head": "vae"}, "test"))
    with pytest.raises(ConfigError, match="needs a scene_encoder plugin"):
        VLASpec.from_dict({**spec, "scene_encoder": ""}, "test")
    with pytest.raises(ConfigError, match="has its own vision tower"):
        VLASpec.from_dict({**get_preset("tiny").to_dict(), "scene_encoder": "query_scene"}, "test")
    with pytest.raises(ConfigError, match=r"\['depth'\] must be positive integers"):
        build_model(VLASpec.from_dict({**spec, "scene_config": {**spec["scene_config"], "depth": 0}}, "test"))


def test_a_tokenizer_naming_fewer_query_tokens_than_the_head_reads_is_refused(tmp_path):
    from test_tokenizer import with_own_tokenizer
    base = get_preset("tiny")
    from hybrid_vla_ros.model.vla import build_model
    two = build_model(dataclasses.replace(base, name="tiny-q2", query_tokens=2))
    save_checkpoint(two, tmp_path / "q2")
    with_own_tokenizer(tmp_path / "named", "tiny")  # a tokenizer with <|plan|>, saved next to a one-token head
    import shutil
    for name in ("tokenizer.json", "tokenizer_config.json"):
        shutil.copy(tmp_path / "named" / name, tmp_path / "q2" / name)
    from test_tokenizer import set_head_metadata
    set_head_metadata(tmp_path / "q2", plan_token="<|plan|>")
    with pytest.raises(ConfigError, match=r"the head reads 2 query tokens, its metadata names 1"):
        load_checkpoint(tmp_path / "q2")


@pytest.mark.parametrize("family, model_type", [("scene_llama", "llama"), ("scene_qwen3", "qwen3")])
def test_the_other_plain_llm_families_are_exact_from_their_own_save_pretrained_directory(family, model_type,
                                                                                          tmp_path):
    from hybrid_vla_ros.engine.verify import verify_partitions
    from hybrid_vla_ros.model.vla import build_model
    model = build_model(dataclasses.replace(get_preset(PRESET), name=f"tiny-{family}", family=family))
    assert model.backbone.config.model_type == model_type
    save_checkpoint(model, tmp_path / family)
    loaded = load_checkpoint(tmp_path / family)
    assert loaded.spec == model.spec and type(loaded.backbone) is type(model.backbone)
    # split vs HF's forward: same kernels, same inputs, one thread (test_partition.py, EXACT)
    assert verify_partitions(loaded, frames=3)["max_abs_diff"] == 0.0
