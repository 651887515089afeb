"""The benchmark CLI in miniature: one run, every mode, JSON keys and a plot (speed is not asserted here)."""

import json
import subprocess
import sys

import pytest


@pytest.mark.slow
def test_bench_writes_json_with_every_mode_and_a_plot(tmp_path):
    out = subprocess.run([sys.executable, "-m", "hybrid_vla_ros.cli", "bench", "--preset", "tiny", "--frames", "5",
                          "--warmup", "1", "--json", str(tmp_path / "b.json"), "--plot", str(tmp_path / "b.png")],
                         capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stderr
    report = json.loads((tmp_path / "b.json").read_text())
    assert set(report["modes"]) == {"native", "serial", "pipelined", "pipelined_shm", "pipelined_serialized"}
    for mode in report["modes"].values():
        assert mode["frames"] == 6 and mode["dropped"] == 0 and mode["failed"] == 0
        for key in ("period_ms", "latency_ms"):
            assert mode[key]["p50"] > 0 and mode[key]["p99"] >= mode[key]["p50"]
    assert report["modes"]["native"]["partition"] == report["num_blocks"]
    assert report["modes"]["serial"]["max_in_flight_seen"] == 1
    for key in ("partition", "devices", "speedup_pipelined_vs_native", "pipeline_efficiency"):
        assert key in report
    assert report["devices"]["stand_in"] is True or "cuda" in report["devices"]["prefix"]
    assert (tmp_path / "b.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
