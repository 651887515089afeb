"""Real-size presets: drawn per tensor on demand (model/seeded.py), side by side, the same in every process."""

import dataclasses

import numpy as np
import pytest
import torch

from hybrid_vla_ros.engine.scheduling.partition import prefix_modules, suffix_modules
from hybrid_vla_ros.engine.stages import PrefixStage, SuffixStage
from hybrid_vla_ros.engine.verify import verify_partitions
from hybrid_vla_ros.errors import ConfigError
from hybrid_vla_ros.model import seeded
from hybrid_vla_ros.model.checkpoint import ensure_loaded, load_checkpoint, save_checkpoint
from hybrid_vla_ros.model.inputs import synthetic_frame
from hybrid_vla_ros.model.load import load_vla
from hybrid_vla_ros.model.presets import PRESETS, get_preset
from hybrid_vla_ros.model.vla import build_model

REAL_SIZE = sorted(name for name, spec in PRESETS.items() if spec.real_size)


def small_real_size(name="tiny-qwen3vl"):
    """A small spec drawn the real-size way (the mechanism, at a size a test can run)."""
    return dataclasses.replace(get_preset(name), real_size=True)


def meta_count(model):
    return sum(p.device.type == "meta" for p in model.parameters())


def test_every_real_size_preset_builds_on_meta_in_about_a_second():
    assert {"minddrive-like", "orion-like", "alpamayo-like", "internvl3-8b-like"} <= set(REAL_SIZE)
    for name in REAL_SIZE:
        model = load_vla(preset=name, lazy=True)
        assert meta_count(model) == len(list(model.parameters())), name   # nothing drawn yet
        assert sum(p.numel() for p in model.parameters()) > 2e9, name     # the real thing's size


def test_a_side_draws_only_its_own_tensors():
    model = load_vla(preset="minddrive-like", lazy=True)
    head_side = [model.decoder.norm, model.action_head, model.decoder.layers[35]]
    ensure_loaded(model, head_side, torch.bfloat16)
    drawn = {n for n, p in model.named_parameters() if p.device.type != "meta"}
    assert drawn == model.seeded_weights.drawn and drawn
    assert all(".layers.35." in n or "norm" in n or n.startswith("action_head") for n in drawn)
    assert all(p.dtype == torch.bfloat16 for m in head_side for p in m.parameters())
    assert model.decoder.layers[0].mlp.up_proj.weight.device.type == "meta"


def test_values_depend_on_the_tensor_name_only_not_on_order_or_side():
    spec = small_real_size()
    one, two = build_model(spec, lazy=True), build_model(spec, lazy=True)
    ensure_loaded(one, suffix_modules(one, 1), torch.float32)      # suffix first, then the prefix
    ensure_loaded(one, prefix_modules(one, 1), torch.float32)
    ensure_loaded(two, [two], torch.float32)                       # all at once
    for (name, a), (_, b) in zip(one.named_parameters(), two.named_parameters()):
        assert torch.equal(a, b), name
    weight = one.decoder.layers[0].mlp.up_proj.weight
    assert 0.015 < weight.std().item() < 0.025 and abs(weight.mean().item()) < 2e-3
    assert torch.all(one.decoder.norm.weight == 1)


def test_drawn_in_bf16_is_the_fp32_draw_rounded():
    """Sides in different dtypes (an fp16 GPU prefix, a bf16 CPU suffix) run one model, up to rounding."""
    spec = small_real_size()
    fp32, bf16 = build_model(spec), build_model(spec, dtype=torch.bfloat16)
    for (name, a), (_, b) in zip(fp32.named_parameters(), bf16.named_parameters()):
        assert b.dtype == torch.bfloat16 and torch.equal(a.to(torch.bfloat16), b), name


def test_a_real_size_drawn_model_splits_exactly_and_stays_finite():
    model = build_model(small_real_size())
    result = verify_partitions(model, frames=1)
    # split vs HF's forward: same kernels, same inputs, one thread (test_partition.py, EXACT)
    assert result["max_abs_diff"] == 0.0


def test_stages_draw_their_own_side_of_a_lazy_model():
    model = build_model(small_real_size(), lazy=True)
    suffix = SuffixStage(model, 1)
    assert meta_count(model) > 0                            # the prefix's tensors not drawn by the suffix
    prefix = PrefixStage(model, 1)
    assert meta_count(model) == 0
    trajectory = suffix.run(prefix.run(synthetic_frame(model.spec, 0)))
    assert np.isfinite(trajectory.points).all()


def test_more_than_memory_is_refused_with_the_reason(monkeypatch):
    monkeypatch.setattr(seeded, "available_memory_bytes", lambda: 2 * 2**30)
    model = load_vla(preset="orion-like", lazy=True)
    with pytest.raises(ConfigError, match=r"GiB of weights in bfloat16 do not fit the 2.0 GiB"):
        ensure_loaded(model, [model], torch.bfloat16)
    assert meta_count(model) == len(list(model.parameters()))   # nothing half-drawn


def test_export_of_a_drawn_model_is_sharded_and_reads_back_equal(tmp_path):
    model = build_model(small_real_size(), dtype=torch.bfloat16)
    save_checkpoint(model, tmp_path, max_shard_size="200KB")
    assert len(list(tmp_path.glob("model-*-of-*.safetensors"))) > 1 and (tmp_path / "model.safetensors.index.json").is_file()
    back = load_checkpoint(tmp_path, dtype=torch.bfloat16)
    for (name, a), (_, b) in zip(model.backbone.named_parameters(), back.backbone.named_parameters()):
        assert torch.equal(a, b), name
