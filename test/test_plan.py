"""The partition planner: its arithmetic, the hardware table, the scheduler's prior from a plan, and the CLI
(no real-size timing: block measurements are given, not taken, except for the tiny model)."""

import json
import subprocess
import sys

import pytest

from hybrid_vla_ros.engine.scheduling.costs import CostModel, CostPolicy
from hybrid_vla_ros.errors import ConfigError
from hybrid_vla_ros.plan.efficiency import BlockMeasure, cpu_rate
from hybrid_vla_ros.plan.hardware import PARTS_CPU, PARTS_GPU, XEON_8470Q, parse_cpu, parse_gpu, this_cpu
from hybrid_vla_ros.plan.paper import PAPER_MODELS, orion_front_end
from hybrid_vla_ros.plan.predict import gpu_bytes, plan

from plan_helpers import sides, workload

GIB = 2 ** 30


def test_period_is_the_slower_side_and_latency_the_sum_at_every_cut():
    work, s = workload(), sides()
    result = plan(work, s)
    t = result["times"]
    assert t["block_prefix_ms"] == pytest.approx(work.block_flops / 1e12 * 1e3)     # compute-bound at 1 TFLOP/s
    assert t["block_suffix_ms"] == pytest.approx(4 * t["block_prefix_ms"])
    for row in result["rows"]:
        p = row["p"]
        assert row["prefix_ms"] == pytest.approx(t["front_ms"] + p * t["block_prefix_ms"])
        assert row["suffix_ms"] == pytest.approx((8 - p) * t["block_suffix_ms"] + t["head_suffix_ms"])
        assert row["period_ms"] == pytest.approx(max(row["prefix_ms"], row["transfer_ms"] + row["suffix_ms"]))
        assert row["latency_ms"] == pytest.approx(row["prefix_ms"] + row["transfer_ms"] + row["suffix_ms"])
    assert result["best_p"] == min(range(9), key=lambda p: result["rows"][p]["period_ms"])
    assert result["zone"][0] <= result["best_p"] <= result["zone"][1]


def test_a_memory_bound_block_takes_its_weight_bytes_over_the_bandwidth():
    work = workload(tokens=1)
    result = plan(work, sides(cpu_gflops=1e6))
    assert result["times"]["bound"]["suffix_block"] == "memory"
    assert result["times"]["block_suffix_ms"] == pytest.approx(work.params_per_block * 2 / 50e9 * 1e3)


def test_best_cut_minimises_the_period_among_the_cuts_that_fit_the_gpu_budget():
    work, s = workload(), sides(cpu_gflops=100.0)        # a slow CPU: the best cut unconstrained is deep
    free = plan(work, s)
    budget = free["rows"][free["best_p"]]["gpu_bytes"]["total"] - 1   # the free optimum no longer fits
    tight = plan(work, s, budget_bytes=budget)
    fitting = [r for r in tight["rows"] if r["gpu_bytes"]["total"] <= budget]
    assert fitting and tight["best_p"] == min(fitting, key=lambda r: r["period_ms"])["p"]
    assert tight["best_p"] < free["best_p"]
    assert tight["recommended"]["gpu_bytes"]["total"] <= budget
    none = plan(work, s, budget_bytes=1)
    assert none["best_p"] is None and none["recommended"] is None and "budget" in none["why_none"]


def test_native_is_the_whole_model_on_the_gpu_the_cut_at_p_equals_L():
    work, s = workload(), sides()
    result = plan(work, s)
    last, native, t = result["rows"][-1], result["native"], result["times"]
    assert last["p"] == native["p"] == work.num_blocks
    assert native["period_ms"] == pytest.approx(last["prefix_ms"] + t["head_prefix_ms"])
    assert native["gpu_bytes"]["weights"] == last["gpu_bytes"]["weights"] + work.head_params * 4
    tied = gpu_bytes(workload(head_tied=True), s, work.num_blocks, native=True)
    assert tied["weights"] == last["gpu_bytes"]["weights"]          # a tied LM head is the embedding table
    assert native["gpu_bytes"]["rings"] == 0 and last["gpu_bytes"]["rings"] > 0


def test_gpu_bytes_hold_the_zone_and_cpu_bytes_the_blocks_from_its_start():
    work, s = workload(), sides()
    result = plan(work, s)
    rec, (lo, hi) = result["recommended"], result["zone"]
    block = work.params_per_block
    assert rec["gpu_bytes"]["weights"] == (work.front.params + work.embed_params + hi * block) * 4
    assert rec["cpu_bytes"]["weights"] == ((work.num_blocks - lo) * block + work.head_params) * 2
    assert rec["gpu_bytes"]["context"] == 2 ** 29


def test_hardware_table_parses_and_its_peaks_follow_the_isa():
    assert PARTS_GPU["l20"].peak_gflops("bf16") == pytest.approx(119_500)
    assert PARTS_GPU["h200"].memory_gb == 141 and PARTS_GPU["orin"].shared_memory
    assert PARTS_CPU["xeon-8470q"] is XEON_8470Q and XEON_8470Q.path("bf16") == "amx_bf16"
    assert XEON_8470Q.peak_gflops("bf16") == pytest.approx(52 * 1024 * 2.1)
    assert XEON_8470Q.peak_gflops("fp32") == pytest.approx(52 * 64 * 2.1)
    zen4 = parse_cpu("cores=8,isa=avx512_bf16,ghz=3,bw=100,bits=256")
    assert zen4.peak_gflops("bf16") == pytest.approx(8 * 64 * 3) and zen4.path("bf16") == "avx512_bf16"
    assert parse_cpu("cores=4,isa=avx2,ghz=2,bw=50").path("bf16") == "avx2_fp32"   # no native bf16
    gpu = parse_gpu("fp32=10,bf16=80,bw=400,mem=16,link=16,name=card")
    assert gpu.name == "card" and gpu.peak_gflops("bf16") == 80_000
    for bad in ("cores=4,isa=sse,ghz=2,bw=5", "cores=4", "what"):
        with pytest.raises(ConfigError):
            parse_cpu(bad)
    with pytest.raises(ConfigError):
        parse_gpu("fp32=1,bw=2")
    info = {"model name": "X", "vendor_id": "AuthenticAMD", "cpu family": "25", "cpu MHz": "3000.0",
            "flags": "avx2 avx512f avx512_bf16"}
    mine = this_cpu(cores=2, memory_gbs=10.0, info=info)
    assert mine.isa == "avx512_bf16" and mine.datapath_bits == 256 and mine.peak_gflops("fp32") == pytest.approx(192)


def test_a_described_cpu_takes_the_efficiency_measured_here_and_says_where_it_came_from():
    measured = BlockMeasure("4096 x 11008", 512, "bf16", "avx512_bf16", block_gflops=60.0, gemm_gflops=75.0,
                            peak_gflops=300.0, block_ms=1.0)
    rate = cpu_rate(XEON_8470Q, "bf16", measured)
    assert rate.gflops == pytest.approx(XEON_8470Q.peak_gflops("bf16") * 0.25 * 0.8)
    assert "carried to amx_bf16" in rate.factors["gemm_of_peak"][1]
    assert "measured here" in rate.factors["block_of_gemm"][1]


def test_the_schedulers_cost_model_is_built_from_a_plan_and_agrees_with_it():
    result = plan(workload(), sides())
    costs = CostModel.from_plan(result)
    for row in result["rows"]:
        assert costs.prefix_ms(row["p"]) == pytest.approx(row["prefix_ms"])
        assert costs.suffix_ms(row["p"]) == pytest.approx(row["suffix_ms"])
        assert costs.period_ms(row["p"]) == pytest.approx(row["period_ms"])
    assert CostPolicy(costs, 0, 8, partition=0).best() == result["best_p"]
    with pytest.raises(ConfigError):
        CostModel.from_plan({"rows": []})


def test_paper_workloads_are_the_published_architectures():
    front = orion_front_end()
    assert 300e6 < front.params - 22e6 < 310e6          # EVA-02-L: 304M parameters (+ the QT-Former's ~22M)
    orion, minddrive = PAPER_MODELS["orion"].workload, PAPER_MODELS["minddrive"].workload
    assert orion.num_blocks == 32 and orion.rows == 600 and minddrive.rows == 2 * 583 and minddrive.head_tied
    assert orion.block_flops == pytest.approx(2 * 600 * 202_383_360 + 2 * 32 * 128 * 600 ** 2, rel=1e-9)
    assert PAPER_MODELS["orion"].figures.best_p == 16


def write_calibration(path):
    """Block measurements as a calibration file, so the paper comparison runs without timing anything."""
    from hybrid_vla_ros.engine.cpu import core_plan
    from hybrid_vla_ros.plan.run import this_placement
    _, cores, _ = core_plan(this_placement())
    blocks = []
    for shape in ("4096 x 11008, 32/32 heads", "2048 x 11008, 16/2 heads"):
        for dtype, path_, gemm, peak in (("fp32", "avx512_fp32", 110.0, 147.0), ("bf16", "avx512_bf16", 70.0, 294.0)):
            blocks.append(dict(shape=shape, rows=512, dtype=dtype, path=path_, block_gflops=0.9 * gemm,
                               gemm_gflops=gemm, peak_gflops=peak, block_ms=1.0, device="cpu", cores=list(cores)))
    path.write_text(json.dumps({"blocks": blocks, "bandwidth_gbs": {}}))


@pytest.mark.slow
def test_plan_cli_prints_the_paper_comparison_with_every_assumption_and_writes_json(tmp_path):
    write_calibration(tmp_path / "cal.json")
    out = subprocess.run([sys.executable, "-m", "hybrid_vla_ros.cli", "plan", "--paper", "--calibration",
                          str(tmp_path / "cal.json"), "--json", str(tmp_path / "paper.json")],
                         capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stderr
    for text in ("ORION (paper)", "MindDrive (paper)", "NVIDIA L20", "Xeon Platinum 8470Q", "predicted", "paper",
                 "best cut p", "assumptions:", "fp32_infer", "published", "AMX", "the paper's own figures"):
        assert text in out.stdout, text
    report = json.loads((tmp_path / "paper.json").read_text())
    orion = report["models"]["orion"]
    assert orion["comparison"]["native_ms"]["paper"] == 521 and orion["comparison"]["best_p"]["paper"] == 16
    assert len(orion["rows"]) == 33 and orion["assumptions"] and len(orion["sensitivity"]) == 2
    assert report["models"]["minddrive"]["comparison"]["hybrid_period_ms"]["paper"] == pytest.approx(306.2)


@pytest.mark.slow
def test_plan_cli_for_this_machine_times_the_tiny_model_and_gives_the_scheduler_a_prior(tmp_path):
    out = subprocess.run([sys.executable, "-m", "hybrid_vla_ros.cli", "plan", "--preset", "tiny", "--gpu-budget-gb",
                          "1", "--json", str(tmp_path / "p.json")], capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stderr
    report = json.loads((tmp_path / "p.json").read_text())
    assert len(report["rows"]) == 5 and 0 <= report["best_p"] <= 4 and report["mode"] == "this machine"
    assert report["times"]["front_ms"] > 0 and report["times"]["head_suffix_ms"] > 0
    assert CostModel.from_plan(report).num_blocks == 4
    assert "recommended: p =" in out.stdout and "assumptions:" in out.stdout


def test_the_scheduler_node_takes_a_plan_report_as_its_prior(tmp_path):
    from hybrid_vla_ros.ros.nodes.scheduler_node import cost_model_from_report
    result = plan(workload(), sides())
    (tmp_path / "plan.json").write_text(json.dumps(result))
    costs = cost_model_from_report(str(tmp_path / "plan.json"), 8)
    assert costs.period_ms(result["best_p"]) == pytest.approx(result["rows"][result["best_p"]]["period_ms"])
    with pytest.raises(ConfigError, match="8 blocks, the model 9"):
        cost_model_from_report(str(tmp_path / "plan.json"), 9)


def test_a_side_is_timed_with_the_other_stage_running_beside_it():
    """Pipelined, both stages compute at once (one GIL, one memory bus): each side's block is timed so."""
    import threading
    import time
    from hybrid_vla_ros.model.load import load_vla
    from hybrid_vla_ros.plan.machine import Calibration
    from hybrid_vla_ros.plan.measure import busy_beside
    runs, seen = [], []
    with busy_beside(lambda: runs.append(threading.current_thread().name) or time.sleep(0.005), [0]):
        time.sleep(0.1)
        seen.append(len(runs))
    time.sleep(0.05)
    assert seen[0] > 0 and set(runs) == {"plan-beside"} and len(runs) <= seen[0] + 1   # ran, and stopped after
    threads = threading.active_count()
    with busy_beside(lambda: runs.append(1), None):
        assert threading.active_count() == threads                                    # nothing beside: no thread
    import torch
    calibration, model = Calibration(), load_vla(preset="tiny")
    alone = calibration.block(model, 16, torch.float32, [0])
    together = calibration.block(model, 16, torch.float32, [0], beside=[1])
    assert alone.beside == () and together.beside == (1,) and len(calibration.blocks) == 2
    assert type(together).from_dict(together.to_dict()).beside == (1,)


def test_a_stage_s_blocks_are_timed_in_turn_so_their_weights_stream_as_in_the_stage(tmp_path):
    """A block timed over and over finds its weights in the cache a stage running its blocks in turn would not:
    streamed, every resident block runs in turn and the time is per block; a real-size preset has only block 0."""
    import torch
    from hybrid_vla_ros.model.load import load_vla
    from hybrid_vla_ros.plan.machine import Calibration
    from hybrid_vla_ros.plan.measure import resident_blocks
    model = load_vla(preset="tiny")
    calibration = Calibration(str(tmp_path / "cal.json"))
    hot = calibration.block(model, 16, torch.float32, [0])
    streamed = calibration.block(model, 16, torch.float32, [0], streamed=True)
    assert (hot.blocks, streamed.blocks) == (1, model.num_blocks) and len(calibration.blocks) == 2
    assert streamed.block_ms > 0 and 0 < streamed.block_of_gemm
    calibration.save()
    again = Calibration(str(tmp_path / "cal.json"))
    assert again.block(model, 16, torch.float32, [0], streamed=True) == streamed   # kept, not re-timed
    real = load_vla(preset="minddrive-like", lazy=True)
    assert len(resident_blocks(real, streamed=True)) == 1 and len(resident_blocks(model, False)) == 1


def test_blocks_timed_in_turn_stop_at_the_streaming_bound(monkeypatch):
    """However many blocks a checkpoint has, the streamed timing holds about STREAM_BYTES of them (at least one)."""
    from hybrid_vla_ros.model.load import load_vla
    from hybrid_vla_ros.plan import measure
    model = load_vla(preset="tiny")
    one = sum(t.numel() * t.element_size() for t in model.decoder.layers[0].parameters())
    monkeypatch.setattr(measure, "STREAM_BYTES", 2 * one)
    assert len(measure.resident_blocks(model, streamed=True)) == 2
    monkeypatch.setattr(measure, "STREAM_BYTES", 1)
    assert len(measure.resident_blocks(model, streamed=True)) == 1
