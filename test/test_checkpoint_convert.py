"""`hybrid-vla convert`: a tiny model written out in published-like layouts (an mmcv .pth with prefixed keys and
peft multi-adapter keys, a Lightning .ckpt, an OpenGVLab internvl_chat directory), converted back by a mapping
file, loads and gives bit-identical outputs (0.0, fp32); pickle code is never run; nothing is lost silently."""

import json
import os
import pickle
import re

import numpy as np
import pytest
import torch
import yaml
from safetensors import safe_open
from safetensors.torch import load_file

from hybrid_vla_ros.convert import convert_checkpoint, load_mapping, load_pickled
from hybrid_vla_ros.engine.stages import PrefixStage, SuffixStage, reference_forward
from hybrid_vla_ros.errors import ConfigError
from hybrid_vla_ros.model.checkpoint import load_checkpoint, save_checkpoint
from hybrid_vla_ros.model.inputs import synthetic_frame
from hybrid_vla_ros.model.load import load_vla
from published_layouts import internvl_chat_dir as _internvl_chat_dir


def _tensors(path):
    return load_file(str(path))


def _metadata(path):
    with safe_open(str(path), "pt") as handle:
        return handle.metadata()


@pytest.fixture(scope="module")
def scene(tmp_path_factory):
    """tiny-scene (scene encoder with memory, GRU head, two passes with their LoRA adapters) in the package's
    layout, and the same weights under published-like names (MindDrive-like: one state dict, peft keys)."""
    model = load_vla(preset="tiny-scene")
    saved = save_checkpoint(model, tmp_path_factory.mktemp("saved"))
    published = {}
    for key, tensor in _tensors(saved / "model.safetensors").items():   # peft wraps the adapted linears
        adapted = any(f".{t}." in key for t in model.spec.lora_targets)
        published["llm.base_model.model." + (key.replace(".weight", ".base_layer.weight").replace(
            ".bias", ".base_layer.bias") if adapted else key)] = tensor
    for name in ("decision", "action"):
        for key, tensor in _tensors(saved / "adapters" / name / "adapter_model.safetensors").items():
            module = key[len("base_model.model."):].rsplit(".", 2)[0]
            published[f"llm.base_model.model.{module}.{key.rsplit('.', 2)[1]}.{name}.weight"] = tensor
    published.update({"planner." + k: v for k, v in _tensors(saved / "action_head.safetensors").items()})
    published.update({"front." + k: v for k, v in _tensors(saved / "scene_encoder.safetensors").items()})
    published["aux_head.cls.weight"] = torch.zeros(3, 4)   # trained-only: dropped on purpose
    return model, saved, published


def _mapping(saved, path, **extra):
    scene_meta = _metadata(saved / "scene_encoder.safetensors")
    mapping = {"format": "hybrid_vla_convert/1", "name": "tiny-minddrive-like",
               "provenance": "test fixture: tiny-scene under made-up published-like names",
               "unwrap": ["state_dict"],
               "rename": [[r"^(module|agent)\.", ""], [r"^llm\.base_model\.model\.", "llm."], [r"\.base_layer\.", "."]],
               "drop": [r"^aux_head\."],
               "parts": [{"prefix": "llm.", "to": "backbone"}, {"prefix": "planner.", "to": "action_head"},
                         {"prefix": "front.", "to": "scene_encoder"}],
               "adapters": {"lora_alpha": 16},
               "action_head": json.loads(_metadata(saved / "action_head.safetensors")["hybrid_vla"]),
               "scene_encoder": {"plugin": scene_meta["plugin"], "config": json.loads(scene_meta["config"])},
               **extra}
    path.write_text(json.dumps(mapping) if path.suffix == ".json" else yaml.safe_dump(mapping))
    return path


def _same_outputs(original, converted, frames=2, partitions=(0, 2)):
    """HF's own forward and the split, over a frame sequence from an empty memory: 0.0 apart."""
    assert converted.spec == original.spec
    for model in (original, converted):
        if model.scene_encoder is not None:
            model.scene_encoder.reset_memory()
    for seq in range(frames):
        frame = synthetic_frame(original.spec, seq)
        hidden_a, a = reference_forward(original, frame)
        hidden_b, b = reference_forward(converted, frame)
        assert torch.equal(hidden_a, hidden_b) and np.abs(a.points - b.points).max() == 0.0
    for p in partitions:
        for model in (original, converted):
            if model.scene_encoder is not None:
                model.scene_encoder.reset_memory()
        frame = synthetic_frame(original.spec, 0)
        split = [SuffixStage(m, p).run(PrefixStage(m, p).run(frame)).points for m in (original, converted)]
        assert np.abs(split[0] - split[1]).max() == 0.0, p


def test_an_mmcv_pth_with_peft_adapters_converts_to_an_identical_model(scene, tmp_path):
    model, saved, published = scene
    src = tmp_path / "minddrive_like.pth"
    torch.save({"state_dict": {"module." + k: v for k, v in published.items()},
                "meta": {"mmcv_version": "1.7.2", "CLASSES": ("car", "pedestrian"), "epoch": 6}}, src)
    report = convert_checkpoint("pth", src, str(_mapping(saved, tmp_path / "m.yaml")), tmp_path / "out",
                                config_dir=saved)
    assert report.counts["action_head"] == 8 and report.counts["scene_encoder"] > 0
    assert sorted(report.adapters) == ["action", "decision"] and report.dropped == ["module.aux_head.cls.weight"]
    assert report.unread == [] and report.notes["meta"] == ["CLASSES", "epoch", "mmcv_version"]
    for name in ("decision", "action"):   # peft's layout, as model/lora.py writes it
        ours = json.loads((saved / "adapters" / name / "adapter_config.json").read_text())
        assert json.loads((tmp_path / "out" / "adapters" / name / "adapter_config.json").read_text()) == ours
    _same_outputs(model, load_checkpoint(tmp_path / "out"))


def test_a_lightning_ckpt_converts_and_the_cli_says_what_went_where(scene, tmp_path, capsys):
    from hybrid_vla_ros.cli import main
    model, saved, published = scene
    src = tmp_path / "recogdrive_like.ckpt"
    torch.save({"state_dict": {"agent." + k: v for k, v in published.items()}, "epoch": 3, "global_step": 1200,
                "pytorch-lightning_version": "2.4.0", "hyper_parameters": {"lr": 1e-4, "cameras": ["f0", "f1"]},
                "optimizer_states": [], "lr_schedulers": []}, src)
    code = main(["convert", "--from", "ckpt", "--mapping", str(_mapping(saved, tmp_path / "m.json")),
                 "--config", str(saved), "--max-shard-gb", "0.00005", str(src), str(tmp_path / "out")])
    captured = capsys.readouterr()
    text = captured.out
    assert code == 0, captured.err
    assert "dropped             1 keys" in text and "agent.aux_head.cls.weight" in text
    assert "source epoch: 3" in text and f"hybrid-vla verify --checkpoint {tmp_path / 'out'}" in text
    assert len(list((tmp_path / "out").glob("model-*-of-*.safetensors"))) > 1   # sharded, with its index
    _same_outputs(model, load_checkpoint(tmp_path / "out"), partitions=(1,))


def test_pickle_code_is_never_run_and_the_file_and_global_are_named(tmp_path):
    marker = tmp_path / "executed"

    class Payload:
        def __reduce__(self):
            return os.system, (f"touch {marker}",)

    zipped, raw = tmp_path / "evil.pth", tmp_path / "evil_raw.ckpt"
    torch.save({"state_dict": {"w": torch.zeros(2)}, "meta": Payload()}, zipped)
    raw.write_bytes(pickle.dumps({"state_dict": {"w": Payload()}}, protocol=2))
    for path in (zipped, raw):
        with pytest.raises(ConfigError, match=rf"'{path}' is refused: it asks for the global '(posix|os|nt)\.system'"):
            load_pickled(path)
        with pytest.raises(ConfigError, match="refused"):
            convert_checkpoint("ckpt", path, "internvl_chat", tmp_path / "out")
    assert not marker.exists() and not (tmp_path / "out").exists()
    assert "weights_only=False" not in str(pytest.raises(ConfigError, load_pickled, zipped).value)


def test_an_unmapped_key_is_refused_naming_it_and_nothing_is_written(scene, tmp_path):
    _, saved, published = scene
    src = tmp_path / "extra.pth"
    torch.save({**published, "bev_embedding.weight": torch.zeros(2)}, src)   # a bare state dict
    with pytest.raises(ConfigError, match=r"1 source key\(s\) are in no part and not dropped: bev_embedding\.weight"):
        convert_checkpoint("pth", src, str(_mapping(saved, tmp_path / "m.yaml")), tmp_path / "out", config_dir=saved)
    assert not (tmp_path / "out").exists()
    torch.save({**published, "llm.base_model.model.layers.0.self_attn.q_proj.weight": torch.zeros(1)}, src)
    with pytest.raises(ConfigError, match=r"'llm\.base_model\.model\.layers\.0\.self_attn\.q_proj\.base_layer\.weight' and "
                                          r"'llm\.base_model\.model\.layers\.0\.self_attn\.q_proj\.weight' both map to "
                                          r"'layers\.0\.self_attn\.q_proj\.weight' in backbone"):
        convert_checkpoint("pth", src, str(_mapping(saved, tmp_path / "c.yaml")), tmp_path / "out2", config_dir=saved)


def test_mapping_files_are_checked_and_the_shipped_ones_load(tmp_path):
    assert load_mapping("internvl_chat").parts == [("", "backbone")]
    bad = tmp_path / "bad.yaml"
    for content, message in (({"format": "x"}, "format 'x'"),
                             ({"format": "hybrid_vla_convert/1", "parts": [{"prefix": "a", "to": "head"}]}, "parts\\[0\\]"),
                             ({"format": "hybrid_vla_convert/1", "parts": [], "typo": 1}, "unknown fields \\['typo'\\]"),
                             ({"format": "hybrid_vla_convert/1", "rename": [["(", ""]], "parts": []}, "not a valid regex")):
        bad.write_text(yaml.safe_dump(content))
        with pytest.raises(ConfigError, match=message):
            load_mapping(str(bad))
    with pytest.raises(ConfigError, match="no shipped mapping of that name"):
        load_mapping("orion-nonexistent")


def test_an_internvl_chat_directory_converts_to_the_native_layout(tmp_path):
    import shutil
    model = load_vla(preset="tiny-internvl")
    saved = save_checkpoint(model, tmp_path / "saved")
    image_token = _internvl_chat_dir(saved, tmp_path / "chat")
    shipped = yaml.safe_load(open(load_mapping("internvl_chat").source))
    mapping = tmp_path / "internvl.yaml"   # the shipped one; this tiny directory has no tokenizer for <IMG_CONTEXT>
    mapping.write_text(yaml.safe_dump({**shipped, "config_overrides": {"image_token_id": image_token}}))
    report = convert_checkpoint("internvl_chat", tmp_path / "chat", str(mapping), tmp_path / "out")
    assert report.dropped == ["language_model.lm_head.weight"] and report.counts["action_head"] == 0
    assert "no action head" in "\n".join(report.lines())
    shutil.copyfile(saved / "action_head.safetensors", tmp_path / "out" / "action_head.safetensors")  # its own file
    _same_outputs(model, load_checkpoint(tmp_path / "out"), partitions=(0, 3))
    chat = json.loads((tmp_path / "chat" / "config.json").read_text())
    (tmp_path / "chat" / "config.json").write_text(json.dumps({**chat, "ps_version": "v1"}))
    with pytest.raises(ConfigError, match="ps_version 'v1'; only 'v2'"):
        convert_checkpoint("internvl_chat", tmp_path / "chat", str(mapping), tmp_path / "out2")


def test_the_only_unpickling_in_the_package_is_weights_only():
    """test_checkpoint.py's guard forbids torch.load( and pickle; the converter's one reader goes through
    torch.serialization.load, always with weights_only=True, in safe_load.py only."""
    import pathlib
    import re
    root = pathlib.Path(__file__).resolve().parents[1] / "hybrid_vla_ros"
    users = {p.name: p.read_text() for p in root.rglob("*.py") if "torch.serialization" in p.read_text()}
    assert list(users) == ["safe_load.py"]
    calls = re.findall(r"_weights_only_load\((.*)$", users["safe_load.py"], flags=re.M)   # each call on one line
    assert calls and all("weights_only=True" in c for c in calls)


def test_a_backbone_tensor_nothing_reads_is_reported(scene, tmp_path):
    """A buffer a mapping lets through to the backbone (MindDrive's model-level rotary inv_freq before its drop
    rule named it) is written, and the report names it in model.safetensors, as it does for the other files."""
    model, saved, published = scene
    src = tmp_path / "with_buffer.pth"
    torch.save({"state_dict": {**published, "llm.base_model.model.rotary_emb.inv_freq": torch.ones(8)}}, src)
    report = convert_checkpoint("pth", src, str(_mapping(saved, tmp_path / "m.yaml")), tmp_path / "out",
                                config_dir=saved)
    assert report.unread == ["model.safetensors:rotary_emb.inv_freq"]
    assert "  warning: written but read by no parameter: model.safetensors:rotary_emb.inv_freq" in report.lines()


def test_a_trainer_s_state_dict_alone_is_a_ckpt_and_a_bare_one_is_refused_naming_pth(scene, tmp_path):
    """ReCogDrive's accelerate trainer saves {"state_dict": ...} and nothing else: read by --from / --also ckpt; a
    bare state dict is refused as a ckpt, naming the option that reads it."""
    from hybrid_vla_ros.convert.sources import read_source
    _, _, published = scene
    alone, bare = tmp_path / "accelerate.ckpt", tmp_path / "bare.ckpt"
    torch.save({"state_dict": {"agent." + k: v for k, v in published.items()}}, alone)
    torch.save(dict(published), bare)
    source = read_source("ckpt", alone, ["state_dict"])
    assert sorted(source.tensors) == sorted("agent." + k for k in published) and source.notes == {}
    with pytest.raises(ConfigError, match=r"no 'state_dict' entry holding the state dict .* --also pth:PATH"):
        read_source("ckpt", bare, ["state_dict"])
    assert sorted(read_source("pth", bare, ["state_dict"]).tensors) == sorted(published)


def test_set_changes_only_sizes_the_mapping_states(tmp_path, capsys):
    from hybrid_vla_ros.cli import main
    from hybrid_vla_ros.convert.overrides import parse_set
    mapping = load_mapping("orion", [parse_set("scene_encoder.config.det.num_query=12"),
                                     parse_set("action_head.image_height=56"), parse_set("config_overrides.vocab_size=265")])
    assert mapping.scene_encoder["config"]["det"]["num_query"] == 12 and mapping.action_head["image_height"] == 56
    assert mapping.config_overrides["vocab_size"] == 265
    assert load_mapping("orion").scene_encoder["config"]["det"]["num_query"] == 600     # the file is untouched
    refused = {"action_head.head=gru": "it holds 'orion_vae', not a size",
               "scene_encoder.config.det.qt_attn_bias=true": "it holds False, not a size",
               "scene_encoder.config.det.num_queries=12": "no such key",
               "action_head.image_height=[56]": "expected an integer",
               "action_head.image_height=true": "expected an integer",
               "drop=[]": "only sizes under action_head, scene_encoder, config_overrides",
               "scene_encoder.config.nothing.x=1": "'scene_encoder.config.nothing' is not a section"}
    for text, message in refused.items():
        with pytest.raises(ConfigError, match=re.escape(message)):
            load_mapping("orion", [parse_set(text)])
    with pytest.raises(ConfigError, match="expected KEY=VALUE"):
        parse_set("action_head.image_height")
    code = main(["convert", "--from", "pth", "--mapping", "orion", "--set", "action_head.image_height=56", "--set",
                 "action_head.head=gru", str(tmp_path / "none.pth"), str(tmp_path / "out")])
    assert code != 0 and not (tmp_path / "out").exists()
    assert "--set action_head.head: it holds 'orion_vae', not a size" in capsys.readouterr().err
