"""Issue 55, item 2: where Alpamayo 2 Super fits (`hybrid-vla plan --fit`, plan/fit.py) and the shapes it is planned
with (the `alpamayo2-super-like` preset: Qwen3-VL-32B, whose heads are wider than hidden / heads). Behaviour, not
speed: the memory rule and the cut choice on a described plan, no timing."""

import dataclasses
from types import SimpleNamespace

import numpy as np
import pytest

from hybrid_vla_ros.engine.verify import verify_partitions
from hybrid_vla_ros.errors import ConfigError
from hybrid_vla_ros.model.checkpoint import save_checkpoint
from hybrid_vla_ros.model.families import get_family
from hybrid_vla_ros.model.load import load_vla
from hybrid_vla_ros.model.presets import get_preset
from hybrid_vla_ros.model.vla import build_model
from hybrid_vla_ros.plan.decode_heavy import _gpu_gib, kept_rows_gib, shapes_of, sides_of_plan, split_row, window_times
from hybrid_vla_ros.plan.fit import FitGpu, fit_lines, fit_row, kv_gib, parse_fit
from hybrid_vla_ros.plan.hardware import PARTS_GPU

GIB = 2 ** 30


def test_the_preset_has_alpamayo_2_supers_shapes_as_its_code_computes_them():
    spec = get_preset("alpamayo2-super-like")
    text = get_family(spec.family).build_config(spec).text_config
    assert (text.num_hidden_layers, text.hidden_size, text.num_attention_heads, text.head_dim) == (64, 5120, 64, 128)
    assert spec.attention_head_dim == 128 != spec.hidden_size // spec.num_heads
    # the vocabulary: Qwen's 151669 + 4000 <iN> (history, future) + 29 special tokens, padded to a multiple of 128
    assert spec.vocab_size == -(-(151669 + 4000 + 29) // 128) * 128 == 155776
    assert spec.num_cameras == 24 and 163840 <= spec.image_height * spec.image_width <= 196608   # 6 x 4, pixel budget
    s = shapes_of(SimpleNamespace(spec=spec, family=get_family(spec.family)), {"tokens": 4514, "params_per_block": 1})
    assert s.head_dim == 128 and s.expert_layers == 64
    assert 2.3e9 * 0.95 < s.expert_layers * s.expert_params < 2.3e9 * 1.1   # the card: a 2.3B expert


def test_a_head_wider_than_hidden_over_heads_splits_exactly_and_survives_a_checkpoint(tmp_path):
    spec = dataclasses.replace(get_preset("tiny-qwen3vl"), name="tiny-wide-heads", head_dim=32)   # 64 / 4 = 16
    model = build_model(spec)
    assert model.decoder.layers[0].self_attn.q_proj.weight.shape == (4 * 32, 64)
    assert verify_partitions(model, frames=1)["max_abs_diff"] == 0.0
    save_checkpoint(model, tmp_path / "wide")
    again = load_vla(checkpoint=str(tmp_path / "wide"))
    assert again.spec.attention_head_dim == 32
    with pytest.raises(ConfigError, match="head_dim"):
        dataclasses.replace(get_preset("tiny"), head_dim=32)   # only qwen3_vl builds it here


def test_the_fit_budgets_are_parsed_with_a_reason_for_each_refusal():
    rtx, h200 = parse_fit("rtx4090,h200:64")
    assert rtx.budget_gib == pytest.approx(24e9 / GIB) and h200.budget_gib == 64.0
    assert parse_fit("h200:139")[0].budget_gib == 139.0   # what the card shows, above 141 GB read as 10^9 bytes
    for bad, why in (("rtx4090:30", "holds"), ("a100", "not a part"), ("h200:x", "GiB"), (",", "at least one")):
        with pytest.raises(ConfigError, match=why):
            parse_fit(bad)


def _described(spec_name="alpamayo2-super-like", block_gib=1.0, front_gib=2.0):
    """A described plan's fields as run.py gives them, with GPU bytes growing by block_gib a block; no timing."""
    spec = get_preset(spec_name)
    model = SimpleNamespace(spec=spec, family=get_family(spec.family))
    rows = [{"gpu_bytes": {"total": (front_gib + p * block_gib) * GIB}} for p in range(spec.num_blocks + 1)]
    result = {"workload": {"tokens": 4514, "params_per_block": 487_000_000}, "rows": rows,
              "native": {"gpu_bytes": {"total": (front_gib + spec.num_blocks * block_gib) * GIB}},
              "times": {"front_ms": 300.0, "block_prefix_ms": 20.0, "block_suffix_ms": 40.0},
              "rates": {"gpu": {"gflops": 150000.0, "gbs": 800.0}, "cpu": {"gflops": 100000.0, "gbs": 230.0}},
              "dtypes": {"gpu": "bf16", "cpu": "bf16"}, "gpu": {"link_gbs": 32.0}}
    return model, result


@pytest.mark.parametrize("guidance", [False, True])
def test_only_cuts_whose_gpu_side_fits_with_its_kv_cache_are_chosen(guidance):
    model, result = _described()
    s = shapes_of(model, result["workload"])
    sides = sides_of_plan(result, 5.0)
    gpu = FitGpu("rtx5090", PARTS_GPU["rtx5090"], 29.8)
    row = fit_row(s, result, gpu, sides, 64, 10, guidance)
    caches = 2 if guidance else 1
    kept = kept_rows_gib(s, 2, True)   # each image encoded once: 2 windows of image rows on the GPU
    need = {p: _gpu_gib(s, result, p, 2) + kv_gib(s, p, 64, 2, caches, 2) + kept for p in range(s.blocks + 1)}
    fitting = [p for p in need if need[p] <= 29.8]
    assert row["cuts"] == [0, max(fitting)] and fitting == list(range(max(fitting) + 1))
    assert need[max(fitting) + 1] > 29.8 and 0 < kept < 1
    whole = fit_row(s, result, gpu, sides, 64, 10, guidance, encode_once=False)   # every image, nothing kept
    assert whole["cuts"][1] == max(p for p in need if need[p] - kept <= 29.8) >= row["cuts"][1]
    assert row["every_image"]["p"] == whole["split"]["p"]
    times = window_times(result["times"], True)   # the tower on a quarter of the images
    assert times["front_ms"] == pytest.approx(result["times"]["front_ms"] / 4)
    periods = {p: split_row(s, times, *sides, p, 64, 10, guidance)["period_ms"] for p in fitting}
    assert row["split"]["p"] in fitting and row["split"]["period_ms"] == pytest.approx(min(periods.values()))
    assert row["split"]["gpu_gib"] == pytest.approx(need[row["split"]["p"]])
    assert not row["native_fits"] and row["gain"] is None   # 66 blocks' GiB on a 29.8 GiB budget
    # KV of 2 frames: prompt + n rows, K and V, 8 heads of 128, bf16, per block (twice with guidance)
    assert kv_gib(s, 1, 64, 2, caches, 2) == pytest.approx((4514 + 64) * 2 * 8 * 128 * 2 * caches * 2 / GIB)


def test_native_is_compared_where_it_fits_and_a_budget_nothing_fits_says_so():
    model, result = _described()
    s = shapes_of(model, result["workload"])
    sides = sides_of_plan(result, 5.0)
    whole = fit_row(s, result, FitGpu("h200", PARTS_GPU["h200"], 131.3), sides, 0, 10, False)
    assert whole["native_fits"] and whole["cuts"] == [0, s.blocks]
    assert whole["gain"] == pytest.approx(whole["native_period_ms"] / whole["split"]["period_ms"])
    tiny = fit_row(s, result, FitGpu("rtx4090", PARTS_GPU["rtx4090"], 1.0), sides, 0, 10, False)
    assert tiny["split"] is None and tiny["cuts"] is None
    lines = fit_lines({"model": "m", "cpu": "c", "steps": 10, "guidance": False, "in_flight": 2,
                       "rows": [whole, tiny], "assumptions": ["a"]})
    assert "none: the front end" in lines[3] and lines[2].split()[-1].endswith("x")
    assert np.isfinite(whole["split"]["latency_ms"]) and whole["split"]["latency_ms"] >= whole["split"]["period_ms"]


def test_the_command_refuses_a_model_that_is_not_decode_heavy(capsys):
    from hybrid_vla_ros.cli import main
    assert main(["plan", "--preset", "tiny", "--fit", "l20"]) != 0
    assert "not a decode-heavy preset" in capsys.readouterr().err


def test_the_command_refuses_flags_that_fit_decides_itself(capsys):
    from hybrid_vla_ros.cli import main
    assert main(["plan", "--preset", "alpamayo2-super-like", "--fit", "l20", "--gpu", "h200"]) != 0
    assert "drop --gpu" in capsys.readouterr().err


def test_the_cpu_sampler_is_timed_on_this_machine():
    from hybrid_vla_ros.plan.decode_heavy import sampler_ms_here
    assert 0 < sampler_ms_here(4096, repeats=2) < 1000
