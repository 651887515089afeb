"""The planner's chunked-prefill prediction (plan/chunks.py): k = 1 is today's prediction, equal stages tend to
max x (1 + 1/k), a per-chunk overhead gives the curve over k an interior minimum, a saturated pipeline with a
just-in-time start has the predicted latency, per-camera spans come from the prompt, the CLI prints the table."""

import json
import subprocess
import sys

import pytest

from hybrid_vla_ros.plan.chunks import (chunk_flops, chunk_report, chunk_times, chunked_row, closed_form_latency, model_spans,
                                        schedule)
from hybrid_vla_ros.plan.efficiency import Rate
from hybrid_vla_ros.plan.predict import Sides, plan, stage_times
from hybrid_vla_ros.plan.text import plan_lines
from hybrid_vla_ros.plan.workload import FrontEnd

from plan_helpers import sides, workload


def even(tokens, k):
    bounds = [round(tokens * i / k) for i in range(k + 1)]
    return list(zip(bounds, bounds[1:]))


def balanced():
    """Equal stages at p = L / 2, no front end, head or handover to speak of, compute-bound at every chunk size."""
    work = workload(tokens=64, hidden=2048, intermediate=4096, heads=16, kv_heads=16,
                    front=FrontEnd("none", 0.0, 0, 0.0), head_flops=0.0, head_params=0)
    rate = Rate("x", "fp32", 1000.0, 1e9)
    return work, Sides(rate, rate, 4, 4, link_gbs=1e9, link_latency_ms=0.0, front_ms=0.0, head_ms=0.0)


@pytest.mark.parametrize("kw", [{}, {"cpu_gflops": 40.0}, {"gpu_gflops": 30.0}, {"link_gbs": 0.01}])
def test_one_chunk_is_todays_prediction_exactly_at_every_cut(kw):
    work, s = workload(passes=2), sides(**kw)
    result = plan(work, s)
    for row in result["rows"]:
        one = chunked_row(work, s, row["p"], "1", [(0, work.tokens)], overhead_ms=0.3)   # no overhead at k = 1
        assert one["latency_ms"] == row["latency_ms"] and one["period_ms"] == row["period_ms"]
        assert one["bound"] == row["bound"] and one["kv_bytes"] == {"prefix": 0, "suffix": 0}


@pytest.mark.parametrize("k", [2, 5, 16])
def test_chunks_attend_to_the_keys_before_them_so_a_frames_flops_do_not_change(k):
    work = workload(passes=2)
    total = sum(chunk_flops(work, start, end) for start, end in even(work.tokens, k))
    assert total == pytest.approx(work.block_flops, rel=1e-12)
    linear = 2.0 * work.rows * work.params_per_block
    late, early = chunk_flops(work, 50, 100) - linear / 2, chunk_flops(work, 0, 50) - linear / 2
    assert late == pytest.approx(3 * early, rel=1e-12)          # attention: 50 + 25 keys on average vs 25


@pytest.mark.parametrize("k", [2, 4, 8, 16])
def test_equal_stages_tend_to_the_slower_stage_times_one_plus_one_over_k(k):
    work, s = balanced()
    row = chunked_row(work, s, 4, str(k), even(work.tokens, k))
    assert row["prefix_ms"] == pytest.approx(row["suffix_ms"], rel=1e-9)
    assert row["period_ms"] == pytest.approx(row["prefix_ms"])                  # the period does not move
    assert row["latency_ms"] == pytest.approx(row["prefix_ms"] * (1 + 1 / k), rel=0.01)
    assert row["latency_ms"] > row["prefix_ms"] * (1 + 1 / k)                  # later chunks read more keys


def test_unequal_stages_give_the_slower_stage_plus_one_chunk_of_the_faster():
    work, _ = balanced()
    rate = Rate("x", "fp32", 1000.0, 1e9)
    s = Sides(rate, Rate("y", "fp32", 250.0, 1e9), 4, 4, link_gbs=1e9, front_ms=0.0, head_ms=0.0)
    ct = chunk_times(work, s, stage_times(work, s), 4, even(work.tokens, 4))
    sched = schedule(ct)
    assert sched["latency_ms"] == pytest.approx(ct.prefix_ms[0] + sched["suffix_ms"], rel=1e-12)
    assert sched["latency_ms"] == pytest.approx(closed_form_latency(ct), rel=1e-12)


KS = (1, 2, 4, 8, 16, 32, 64)   # 256 tokens in equal chunks


def test_tiny_chunks_cost_more_per_token_and_a_per_chunk_overhead_gives_an_interior_minimum():
    work, s = workload(tokens=256), sides(cpu_gflops=1000.0)
    frame = {k: sum(chunk_times(work, s, stage_times(work, s), 4, even(256, k)).prefix_ms) for k in (1, 32, 256)}
    assert frame[256] > 2 * frame[1]               # 1-token chunks are memory-bound: each re-reads the weights
    assert frame[256] > frame[32] >= frame[1] * (1 - 1e-12)

    def curve(sides_, overhead):
        return {k: chunked_row(work, sides_, 4, str(k), even(256, k), overhead)["latency_ms"] for k in KS}
    costly = curve(s, overhead=0.3)
    best = min(costly, key=costly.get)
    assert 1 < best < 64 and costly[best] < costly[1] and costly[best] < costly[64]
    fast = sides(cpu_gflops=1000.0, prefix=Rate("gpu", "fp32", 1000.0, 1e12), suffix=Rate("cpu", "fp32", 1000.0, 1e12),
                 link_latency_ms=0.0)
    free = curve(fast, overhead=0.0)                            # no per-chunk cost: more chunks always help
    assert all(free[b] < free[a] for a, b in zip(KS, KS[1:]))


def saturated_latency(ct, frames=30):
    """A saturated pipeline simulated frame after frame: each frame starts on the prefix at the latest time (>= the
    prefix being free) that does not delay when the suffix finishes it, found by bisection; its last latency."""
    free_prefix, free_suffix = 0.0, 0.0
    ready = [ct.embed_ms + sum(ct.prefix_ms[:i + 1]) for i in range(len(ct.prefix_ms))]

    def finish(start):
        done = free_suffix
        for r, x, s in zip(ready, ct.handover_ms, ct.suffix_ms):
            done = max(start + r, done) + x + s
        return done
    for _ in range(frames):
        lo, hi = free_prefix, free_prefix + 10 * (ready[-1] + sum(ct.suffix_ms))
        target = finish(lo)
        for _ in range(100):
            mid = (lo + hi) / 2
            lo, hi = (mid, hi) if finish(mid) <= target + 1e-9 else (lo, mid)
        latency, free_prefix, free_suffix = target - lo, lo + ready[-1], target
    return latency


@pytest.mark.parametrize("gpu,cpu", [(1000.0, 250.0), (100.0, 1000.0), (400.0, 500.0)])
@pytest.mark.parametrize("k", [1, 3, 8])
def test_a_saturated_pipeline_with_a_just_in_time_start_has_the_predicted_latency(gpu, cpu, k):
    work, s = workload(), sides(gpu, cpu)
    ct = chunk_times(work, s, stage_times(work, s), 3, even(work.tokens, k), overhead_ms=0.02)
    assert saturated_latency(ct) == pytest.approx(schedule(ct)["latency_ms"], rel=1e-6)
    assert closed_form_latency(ct) == pytest.approx(schedule(ct)["latency_ms"], rel=1e-12)


def test_per_camera_spans_come_from_the_prompt_and_a_scene_encoder_refuses_them():
    from hybrid_vla_ros.model.load import load_vla
    model = load_vla(preset="bench", shapes_only=True)
    spans = model_spans(model, model.sequence_length, "camera")
    assert len(spans) == model.spec.num_cameras >= 2
    assert spans[0][0] == 0 and spans[-1][1] == model.sequence_length
    blocks, per_block = model.family.image_blocks(model.spec)
    assert all(end - start >= per_block for start, end in spans)      # a camera's image block in each
    four = model_spans(model, model.sequence_length, 4)
    assert len(four) == 4 and all(a[1] == b[0] for a, b in zip(four, four[1:]))
    assert "prompt" in model_spans(model, model.sequence_length + 1, "camera")
    scene = load_vla(preset="tiny-scene", shapes_only=True)
    assert "scene encoder" in model_spans(scene, scene.sequence_length, "camera")


def test_the_table_is_printed_only_when_asked_and_says_whether_chunking_pays():
    work, s = workload(), sides(cpu_gflops=1000.0, link_latency_ms=0.0)
    result = plan(work, s)
    assert not any("chunked prefill" in line for line in plan_lines({**result, "mode": "t"}))
    report = chunk_report(work, s, result["best_p"], {"1": [(0, 100)], "4": even(100, 4), "camera": "why not"})
    lines = plan_lines({**result, "mode": "t", "chunked": report})
    text = "\n".join(lines)
    assert f"chunked prefill at p = {result['best_p']}" in text and "not predicted: why not" in text
    four = report["rows"][1]
    assert four["pays"] == "yes" and four["latency_vs_unchunked"] < 0 and " 25 " in text
    assert report["rows"][0]["latency_ms"] == result["rows"][result["best_p"]]["latency_ms"]
    assert report["rows"][0]["pays"].startswith("-")
    def verdict(link_ms):
        return chunk_report(work, sides(cpu_gflops=1000.0, link_latency_ms=link_ms), result["best_p"],
                            {"4": even(100, 4)})["rows"][0]
    assert verdict(0.05)["pays"].startswith("latency only") and verdict(0.05)["period_vs_unchunked"] > 0
    assert verdict(5.0)["pays"] == "no" and verdict(5.0)["latency_vs_unchunked"] > 0


@pytest.mark.slow
def test_plan_cli_prints_the_chunk_table_and_writes_it_to_json(tmp_path):
    out = subprocess.run([sys.executable, "-m", "hybrid_vla_ros.cli", "plan", "--preset", "tiny", "--chunks",
                          "1,2,camera", "--json", str(tmp_path / "p.json")], capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stderr
    assert "chunked prefill at p =" in out.stdout and "latency vs 1" in out.stdout
    report = json.loads((tmp_path / "p.json").read_text())
    rows = report["chunked"]["rows"]
    assert [r["chunks"] for r in rows] == ["1", "2", "camera"] and rows[1]["k"] == 2
    assert rows[0]["latency_ms"] == report["rows"][report["best_p"]]["latency_ms"]


def test_a_vision_tower_s_embeddings_are_charged_camera_by_camera():
    from hybrid_vla_ros.plan.chunks import camera_starts, embed_shares
    assert embed_shares([(0, 10), (10, 20)]) == [1.0, 0.0]
    shares = embed_shares([(0, 10), (10, 20), (20, 30)], camera_starts=[1, 5, 12, 25])
    assert shares == [0.5, 0.25, 0.25]
    from hybrid_vla_ros.model.load import load_vla
    model = load_vla(preset="tiny")
    starts = camera_starts(model, model.sequence_length)
    assert len(starts) == model.spec.num_cameras and starts == sorted(starts)
    assert camera_starts(load_vla(preset="tiny-scene"), load_vla(preset="tiny-scene").sequence_length) is None


def test_rates_measured_at_a_chunk_s_rows_set_its_time_and_the_assumption_says_so():
    """This machine's plan times each side at each chunk's rows: a side slower at few rows makes small chunks
    cost more than the frame's rate would say, and the report's first assumption names the measured rates."""
    work, flat = balanced()
    asked = []

    def rates_at(rows):
        asked.append(rows)
        slow = Rate("x", "fp32", 1000.0 * min(1.0, rows / 64), 1e9)   # half the rate at half the rows
        return slow, slow
    spans = even(64, 4)
    measured = chunked_row(work, flat, 4, "4", spans, rates_at=rates_at)
    assumed = chunked_row(work, flat, 4, "4", spans)
    assert sorted(set(asked)) == [16 * work.passes] and measured["suffix_ms"] > 3 * assumed["suffix_ms"]
    report = chunk_report(work, flat, 4, {"4": spans}, rates_at=rates_at)
    assert report["assumptions"][0].startswith("chunked: each side's blocks timed at each chunk's rows")
    assert chunk_report(work, flat, 4, {"4": spans})["assumptions"][0].startswith("chunked: a side's rate")
