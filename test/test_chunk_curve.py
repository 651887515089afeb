"""The chunk curve benchmark's mechanics (bench/chunk_curve.py, bench/kernels/gemm_rows.py) on the tiny model:
one row per chunking, ratios against the unchunked row, and the suffix's widest GEMM at each chunking's rows
(its own weights, cache-hot and streamed). Speed itself is for the benchmark, not asserted here."""

import math

from hybrid_vla_ros.bench.chunk_curve import chunk_rows, curve_table, run_chunk_curve
from hybrid_vla_ros.bench.kernels.gemm_rows import gemm_rows_report, widest_weights
from hybrid_vla_ros.engine.cpu import core_plan
from hybrid_vla_ros.engine.placement import Placement
from hybrid_vla_ros.model.inputs import synthetic_frame
from hybrid_vla_ros.model.load import load_vla


def test_the_widest_weight_of_each_suffix_block_is_its_own_not_a_copy():
    model = load_vla(preset="tiny")
    weights = widest_weights(model, 2, model.num_blocks)
    assert len(weights) == model.num_blocks - 2
    assert all(w.data_ptr() == max((m.weight for m in block.modules() if hasattr(m, "weight") and m.weight is not None
                                    and m.weight.dim() == 2), key=lambda t: t.numel()).data_ptr()
               for w, block in zip(weights, list(model.decoder.layers)[2:]))
    report = gemm_rows_report(model, 2, [8, 32, 8], budget_s=0.01)
    assert [r["rows"] for r in report["rows"]] == [32, 8] and report["rows"][0]["hot_vs_frame"] == 1.0
    assert all(r["hot_gflops"] > 0 and math.isfinite(r["streamed_vs_frame"]) for r in report["rows"])


def test_the_curve_has_a_row_per_chunking_its_ratios_and_the_gemm_rows_behind_them():
    model = load_vla(preset="tiny")
    frames = [synthetic_frame(model.spec, seq) for seq in range(4)]
    prefix_cores, suffix_cores, _ = core_plan(Placement())
    report = run_chunk_curve(model, Placement(), 2, ["1", "2"], frames, (prefix_cores, suffix_cores), warmup=1)
    one, two = report["rows"]
    assert (one["chunks"], one["chunk_count"], two["chunk_count"]) == (1, 1, 2)
    assert one["serial_latency_vs_unchunked_serial"] == 1.0 and two["failed"] == 0
    assert two["pipelined_latency_vs_unchunked_serial"] > 0
    rows = [r["rows"] for r in report["gemm_by_rows"]["rows"]]
    assert rows == [chunk_rows(model, 1), chunk_rows(model, 2)] and rows[0] == model.sequence_length * model.num_passes
    table = curve_table(report)
    assert "lat/serial1" in table and "streamed/frame" in table
