"""Hugging Face checkpoint directories, read per stage: exact at every partition, each stage reads only its
own tensors (straight into its dtype), and every malformed directory is refused naming the file and tensor."""

import json
import re

import numpy as np
import pytest
import torch
from safetensors.torch import load_file, save_file

from hybrid_vla_ros.engine.scheduling.partition import prefix_modules, suffix_modules
from hybrid_vla_ros.engine.placement import Placement
from hybrid_vla_ros.engine.stages import PrefixStage, SuffixStage, reference_forward
from hybrid_vla_ros.errors import ConfigError
from hybrid_vla_ros.model.checkpoint import HEAD_FILE, INDEX_FILE, load_checkpoint, save_checkpoint
from hybrid_vla_ros.model.families import supported_model_types
from hybrid_vla_ros.model.inputs import synthetic_frame

FAMILIES = ("tiny", "tiny-qwen2.5", "tiny-llava", "tiny-qwen3vl", "tiny-internvl")
EXACT = {"tiny-internvl", "tiny-qwen3vl"}  # measured bit-identical to HF's forward (the others within 1e-6): the
# split and HF's forward run the same kernels on the same inputs, both on this thread (test_partition.py, EXACT)


@pytest.fixture(scope="module")
def exported(tiny_models, tmp_path_factory):
    """Each family's tiny model through save_pretrained, in many shards."""
    out = {}
    for name in FAMILIES:
        directory = tmp_path_factory.mktemp(name)
        save_checkpoint(tiny_models[name], directory, max_shard_size="60KB")
        out[name] = directory
    return out


def copy_of(src, dst):
    import shutil
    shutil.copytree(src, dst)
    return dst


@pytest.mark.parametrize("name", FAMILIES)
def test_split_from_an_hf_directory_equals_hfs_own_forward_at_every_partition(name, tiny_models, exported):
    assert len(list(exported[name].glob("model-*-of-*.safetensors"))) > 3 and (exported[name] / INDEX_FILE).is_file()
    model = load_checkpoint(exported[name])
    assert model.spec == tiny_models[name].spec
    for seq in range(2):
        frame = synthetic_frame(model.spec, seq)
        _, reference = reference_forward(tiny_models[name], frame)  # the preset's own weights, unsplit
        for p in range(model.num_blocks + 1):
            split = SuffixStage(model, p).run(PrefixStage(model, p).run(frame))
            assert np.abs(split.points - reference.points).max() <= (0.0 if name in EXACT else 1e-6), (name, p)


@pytest.mark.parametrize("name", FAMILIES)
def test_each_stage_reads_only_the_tensors_it_owns(name, tiny_models, exported):
    """Two processes' worth of loading: the prefix reads vision + embeddings + blocks [0, hi), the suffix
    blocks [lo, L) + norm + head; nothing else is read and nothing else is materialised."""
    lo, hi, p = 1, 3, 2
    prefix_model = load_checkpoint(exported[name], keep=lambda m: [])
    prefix = PrefixStage(prefix_model, p, zone=(lo, hi))
    suffix_model = load_checkpoint(exported[name], keep=lambda m: [])
    suffix = SuffixStage(suffix_model, p, zone=(lo, hi))
    read_prefix, read_suffix = prefix_model.checkpoint_files.read_keys, suffix_model.checkpoint_files.read_keys

    def block(key):
        parts = key.split(".")
        return int(parts[parts.index("layers") + 1]) if "layers" in parts else None
    assert all(block(k) is None or block(k) < hi for k in read_prefix)
    assert not any(k.endswith("language_model.norm.weight") or "action_head" in k for k in read_prefix)
    head = {"mlp.0.weight", "mlp.0.bias", "mlp.2.weight", "mlp.2.bias"}  # action_head.safetensors
    norm = {k for k in read_suffix if k.replace(".model.", ".") == "language_model.norm.weight"}  # LLaVA: .model.
    assert all(block(k) is not None and block(k) >= lo or k in norm or k in head for k in read_suffix)
    assert head <= read_suffix and len(norm) == 1
    assert not any(k.startswith(("visual.", "vision_tower.", "multi_modal_projector.")) or "embed_tokens" in k
                   for k in read_suffix)
    assert {block(k) for k in read_suffix} - {None} == set(range(lo, 4))
    owned = {id(t) for m in prefix_modules(prefix_model, hi) for t in m.parameters()}
    assert all(t.device.type == "meta" for t in prefix_model.parameters() if id(t) not in owned)
    owned = {id(t) for m in suffix_modules(suffix_model, lo) for t in m.parameters()}
    assert all(t.device.type == "meta" for t in suffix_model.parameters() if id(t) not in owned)
    frame = synthetic_frame(tiny_models[name].spec, 3)
    _, reference = reference_forward(tiny_models[name], frame)
    for q in (lo, p, hi):  # the partition moves inside the zone with no further reads
        prefix.set_partition(q), suffix.set_partition(q)
        assert np.abs(suffix.run(prefix.run(frame)).points - reference.points).max() <= 1e-6
    assert suffix_model.checkpoint_files.read_keys == read_suffix


def test_a_bf16_checkpoint_is_read_straight_into_bf16(tmp_path):
    from hybrid_vla_ros.model.load import load_vla
    save_checkpoint(load_vla(preset="tiny", dtype=torch.bfloat16), tmp_path / "bf16", max_shard_size="60KB")
    model = load_checkpoint(tmp_path / "bf16", dtype=torch.bfloat16)
    assert {p.dtype for p in model.parameters()} == {torch.bfloat16}
    stage = SuffixStage(model, 2, Placement(prefix_dtype=torch.bfloat16, suffix_dtype=torch.bfloat16))
    assert all(b is model.decoder.layers[i] for i, b in stage.blocks.items())  # no converted copies


def test_a_bf16_suffix_never_converts_the_shared_checkpoint_model(exported):
    """Found by `hybrid-vla eval`: a bf16 suffix stage built on an fp32 checkpoint model turned the shared
    model's blocks into bf16 in place, so the prefix (or the next fp32 split) then ran rounded weights."""
    model = load_checkpoint(exported["tiny"])
    frame = synthetic_frame(model.spec, 0)
    native = reference_forward(model, frame)[1].points
    before = {n: p.detach().clone() for n, p in model.named_parameters()}
    prefix = PrefixStage(model, 2, Placement(suffix_dtype=torch.bfloat16))
    SuffixStage(model, 2, Placement(suffix_dtype=torch.bfloat16)).run(prefix.run(frame))
    assert all(torch.equal(p, before[n]) and p.dtype == torch.float32 for n, p in model.named_parameters())
    split = SuffixStage(model, 3).run(PrefixStage(model, 3).run(frame)).points
    np.testing.assert_allclose(split, native, atol=1e-5)


def _resident_bytes(*models) -> int:
    """Bytes of the distinct parameter storages the models hold (meta parameters hold none)."""
    seen = {}
    for model in models:
        for param in model.parameters():
            if param.device.type != "meta":
                seen[param.untyped_storage().data_ptr()] = param.untyped_storage().nbytes()
    return sum(seen.values())


def test_a_checkpoint_prefix_in_another_dtype_holds_its_weights_once(exported):
    """Found in review: the prefix read its weights into the shared model, but the rotary tables (buffers
    only, never read) stayed fp32, `is_placed` failed and the whole prefix was deep-copied: on a GPU prefix a
    second copy of its weights on the GPU. Measured here as bytes resident, not only as values."""
    model = load_checkpoint(exported["tiny"], dtype=torch.bfloat16, keep=lambda m: [])
    assert _resident_bytes(model) == 0
    stage = PrefixStage(model, 2, Placement(prefix_dtype=torch.bfloat16))
    read = sum(p.numel() * p.element_size() for m in prefix_modules(model, 2) for p in m.parameters())
    assert stage.model is model
    assert _resident_bytes(model, stage.model) == read
    state = stage.run(synthetic_frame(model.spec, 0))
    assert state.hidden.dtype == torch.bfloat16 and torch.isfinite(state.hidden.float()).all()


def refused(directory, match, **kwargs):
    with pytest.raises(ConfigError, match=match):
        model = load_checkpoint(directory, **kwargs)
        SuffixStage(model, 2).run(PrefixStage(model, 2).run(synthetic_frame(model.spec, 0)))


def test_malformed_directories_are_refused_naming_file_and_tensor(exported, tmp_path):
    src = exported["tiny"]
    refused(tmp_path / "nope", "no such directory")
    index = json.loads((src / INDEX_FILE).read_text())["weight_map"]
    shard = index["language_model.layers.1.mlp.up_proj.weight"]

    d = copy_of(src, tmp_path / "missing_shard")
    (d / shard).unlink()
    refused(d, f"shard {shard} named in {INDEX_FILE} is missing")

    d = copy_of(src, tmp_path / "missing_entry")
    data = json.loads((d / INDEX_FILE).read_text())
    del data["weight_map"]["language_model.layers.1.mlp.up_proj.weight"]
    (d / INDEX_FILE).write_text(json.dumps(data))
    refused(d, "tensor 'language_model.layers.1.mlp.up_proj.weight' is in no safetensors file")

    d = copy_of(src, tmp_path / "shape")
    tensors = load_file(str(d / shard))
    tensors["language_model.layers.1.mlp.up_proj.weight"] = torch.zeros(3, 3)
    save_file(tensors, str(d / shard), metadata={"format": "pt"})
    refused(d, rf"{shard}': tensor 'language_model.layers.1.mlp.up_proj.weight' has shape \(3, 3\)")

    d = copy_of(src, tmp_path / "dtype")
    tensors = load_file(str(d / shard))
    key = "language_model.layers.1.mlp.up_proj.weight"
    tensors[key] = torch.zeros_like(tensors[key], dtype=torch.int32)
    save_file(tensors, str(d / shard), metadata={"format": "pt"})
    refused(d, f"tensor '{key}' has dtype torch.int32, expected a floating point tensor")

    d = copy_of(src, tmp_path / "model_type")
    config = json.loads((d / "config.json").read_text())
    (d / "config.json").write_text(json.dumps({**config, "model_type": "gpt2"}))
    refused(d, "model_type 'gpt2' is not supported; supported: " + re.escape(str(supported_model_types())))
    assert {"internvl", "llava", "qwen2_5_vl", "qwen2_vl", "qwen3_vl"} <= set(supported_model_types())

    d = copy_of(src, tmp_path / "corrupt")
    (d / shard).write_bytes((d / shard).read_bytes()[:100])
    refused(d, f"{shard}' is corrupt or unreadable")


def test_pickle_is_refused_and_a_missing_head_only_on_request(exported, tiny_models, tmp_path):
    d = tmp_path / "pickle"
    d.mkdir()
    (d / "config.json").write_text((exported["tiny"] / "config.json").read_text())
    (d / "pytorch_model.bin").write_bytes(b"\x80\x04pickle")
    refused(d, "pytorch_model.bin is a pickle file; only safetensors are loaded")

    d = copy_of(exported["tiny"], tmp_path / "headless")
    (d / HEAD_FILE).unlink()
    refused(d, f"no {HEAD_FILE} \\(the action head")
    model = load_checkpoint(d, fresh_head=True)  # on purpose: a head to train
    trajectory = SuffixStage(model, 2).run(PrefixStage(model, 2).run(synthetic_frame(model.spec, 0)))
    assert np.isfinite(trajectory.points).all()

    d = copy_of(exported["tiny"], tmp_path / "head_meta")
    head = load_file(str(d / HEAD_FILE))
    save_file(head, str(d / HEAD_FILE), metadata={"format": "something/else"})
    refused(d, "metadata format 'something/else', expected 'hybrid_vla_action_head/1'")


def test_the_package_never_unpickles():
    """No pickle anywhere, and torch's unpickler in one place only: hybrid-vla convert's loader
    (convert/safe_load.py), where every call passes weights_only=True (test_checkpoint_convert.py feeds it a
    malicious pickle)."""
    import pathlib
    import re
    root = pathlib.Path(__file__).resolve().parents[1] / "hybrid_vla_ros"
    pattern = re.compile(r"\bimport pickle\b|\bpickle\.loads?\(|torch\.load\(|weights_only\s*=\s*False|"
                         r"torch\.serialization\b|_weights_only_load")
    offenders = {str(p.relative_to(root)) for p in root.rglob("*.py") if pattern.search(p.read_text())}
    assert offenders <= {"convert/safe_load.py"}, offenders
    loader = (root / "convert" / "safe_load.py").read_text()
    calls = [loader[m.end():m.end() + 200].split("\n\n")[0] for m in re.finditer(r"_weights_only_load\(", loader)]
    assert calls and all("weights_only=True" in c for c in calls), calls   # each call's arguments


def test_memory_command_measures_each_stage_in_its_own_process(exported, tmp_path):
    import subprocess
    import sys
    out = subprocess.run([sys.executable, "-m", "hybrid_vla_ros.cli", "memory", "--checkpoint", str(exported["tiny"]),
                          "--partition", "2", "--json", str(tmp_path / "m.json")],
                         capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stderr
    report = json.loads((tmp_path / "m.json").read_text())
    for stage in ("prefix", "suffix"):
        r = report["stages"][stage]
        assert r["baseline_rss_bytes"] > 0 and r["peak_rss_bytes"] > r["baseline_rss_bytes"]
        assert r["weight_bytes"] > 0 and r["tensors_read"] > 0 and r["peak_cuda_bytes"] is None
        assert r["peak_rss_above_baseline_bytes"] == r["peak_rss_bytes"] - r["baseline_rss_bytes"]
    # the tiny model's weights (a few hundred KB) are below RSS noise: the ratio is measured on `bench`
    # (docs/BENCHMARKS.md); here each stage reads fewer tensors than the whole model has
    assert report["stages"]["prefix"]["tensors_read"] + report["stages"]["suffix"]["tensors_read"] < 2 * 85


def test_a_checkpoint_names_its_instruction_template_and_one_without_reads_as_before(tmp_path):
    """instruction_template (the prompt's instruction while a route navigates) travels in the head's metadata,
    written only when set: a checkpoint without it has exactly the fields of one written before it existed."""
    import dataclasses
    import json
    from safetensors import safe_open
    from hybrid_vla_ros.model.load import load_vla
    model = load_vla(preset="tiny")
    save_checkpoint(model, tmp_path / "plain")
    with safe_open(str(tmp_path / "plain" / HEAD_FILE), "pt") as f:
        assert "instruction_template" not in json.loads(f.metadata()["hybrid_vla"])
    assert load_checkpoint(tmp_path / "plain").spec.instruction_template == ""
    model.spec = dataclasses.replace(model.spec, instruction_template="{command}; target {target_x:.0f} m")
    save_checkpoint(model, tmp_path / "named")
    assert load_checkpoint(tmp_path / "named").spec.instruction_template == "{command}; target {target_x:.0f} m"


def test_a_spec_field_given_as_its_own_metadata_key_is_refused_naming_it(tmp_path):
    """head, head_config, ... belong inside the 'hybrid_vla' JSON; as keys of their own they would be ignored."""
    from safetensors import safe_open
    from hybrid_vla_ros.model.load import load_vla
    save_checkpoint(load_vla(preset="tiny"), tmp_path / "ckpt")
    path = tmp_path / "ckpt" / HEAD_FILE
    with safe_open(str(path), "pt") as f:
        meta, tensors = f.metadata(), {k: f.get_tensor(k) for k in f.keys()}
    save_file(tensors, str(path), metadata={**meta, "head": "gru"})
    with pytest.raises(ConfigError, match=r"metadata keys \['head'\] are not read"):
        load_checkpoint(tmp_path / "ckpt")
