"""The benchmark CLI in miniature: one run, every mode, JSON keys and a plot (speed is not asserted here)."""

import importlib.util
import json
import subprocess
import sys

import pytest


@pytest.mark.slow
def test_bench_writes_json_with_every_mode_side_by_side_and_a_plot(tmp_path):
    out = subprocess.run([sys.executable, "-m", "hybrid_vla_ros.cli", "bench", "--preset", "tiny", "--frames", "5",
                          "--warmup", "1", "--gil", "--json", str(tmp_path / "b.json"), "--plot", str(tmp_path / "b.png")],
                         capture_output=True, text=True, timeout=600)
    assert out.returncode == 0, out.stderr
    report = json.loads((tmp_path / "b.json").read_text())
    engine = {"native", "native_all_cores", "serial", "pipelined", "pipelined_shm", "pipelined_inline",
              "serial_chunked", "pipelined_chunked", "pipelined_chunked_shm", "pipelined_chunked_inline"}
    assert set(report["modes"]) == engine | {"graph", "graph_processes"}
    for name in engine:
        mode = report["modes"][name]
        assert mode["frames"] == 6 and mode["dropped"] == 0 and mode["failed"] == 0
        for key in ("period_ms", "latency_ms"):
            assert mode[key]["p50"] > 0 and mode[key]["p99"] >= mode[key]["p50"]
    for name, transport in (("graph", "inproc"), ("graph_processes", "shm")):
        mode = report["modes"][name]
        assert mode["completed"] + mode["dropped"] == 6 and mode["completed"] >= 5, mode
        assert mode["period_ms"]["p50"] > 0 and mode["transport"] == transport
    # --gil: each thread's GIL-held share, sampled by py-spy (bench/gil.py). Only the report's form here: six tiny
    # frames are ~0.1 s, ~10 samples, so which threads show up is chance (a quiet .ci/run once saw none of the
    # graph's own); which thread holds it, measured over long enough runs: test_gil.py.
    graph = report["modes"]["graph"]
    shares = graph["gil_held_share"]
    assert isinstance(shares, dict) and all(isinstance(name, str) and name for name in shares), graph
    assert all(0.0 < share <= 1.0 + 4 * graph["gil_sampling"]["share_noise"] for share in shares.values()), graph
    assert 0.0 <= graph["gil_held_by_none"] <= 1.0 and graph["gil_sampling"]["expected_samples"] >= 1, graph
    assert "gil_held_share" not in report["modes"]["graph_processes"]   # one process only
    assert "graph (one process), GIL held, share of wall time by thread: " in out.stdout
    pipelined = report["modes"]["pipelined"]["thread_cpu_ms_per_frame"]   # the ended workers' CPU too
    assert pipelined["hvla-prefix"] > 0 and pipelined["hvla-suffix"] > 0 and "(pipelined " in out.stdout
    assert report["modes"]["native"]["partition"] == report["num_blocks"]
    assert report["modes"]["serial"]["max_in_flight_seen"] == 1
    assert report["modes"]["pipelined_chunked"]["chunk_count"] == 4 and report["modes"]["pipelined"]["chunk_count"] == 1
    for key in ("speedup_pipelined_vs_native", "speedup_pipelined_vs_native_all_cores", "pipeline_efficiency",
                "graph_period_vs_pipelined", "graph_processes_period_vs_pipelined",
                "latency_pipelined_chunked_vs_serial", "period_pipelined_chunked_vs_pipelined"):
        assert report[key] > 0, key
    assert report["devices"]["stand_in"] is True or "cuda" in report["devices"]["prefix"]
    assert (tmp_path / "b.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert "mode" in out.stdout and "graph_processes" in out.stdout  # the table, not the JSON
    assert "[bench" in out.stderr                                     # progress


@pytest.mark.slow
def test_load_step_scenario_reports_partition_and_period_over_time_with_a_static_sweep(tmp_path):
    out = subprocess.run([sys.executable, "-m", "hybrid_vla_ros.cli", "bench", "--scenario", "load-step", "--preset",
                          "tiny", "--frames", "20", "--step-on", "5", "--step-off", "16", "--sweep-frames", "3",
                          "--json", str(tmp_path / "l.json"), "--plot", str(tmp_path / "l.png")],
                         capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stderr
    report = json.loads((tmp_path / "l.json").read_text())
    assert len(report["timeline"]) == 20
    loaded = [t["frame"] for t in report["timeline"] if t["loaded"]]  # suffix ran while the load was on
    # On from when result 5 is collected to when result 16 is: frames finished by then ran under load too
    # (results can wait in the queue), so the last loaded frame is at most 16 + the 2 frames in flight.
    assert loaded == list(range(loaded[0], loaded[-1] + 1)) and 5 <= loaded[0] and loaded[-1] <= 18
    assert len(loaded) >= 6
    assert set(report["static_sweep_period_ms"]["idle"]) == {str(p) for p in range(5)}
    for key in ("frames_to_recover", "frames_to_settle", "scheduler_vs_best_static", "best_static", "moves"):
        assert key in report
    across = report["plan_across_sweep"]   # the planner timed again before each of the idle sweep's two passes
    assert len(across["plans"]) == 2 and 0 <= across["partition"] <= 4
    assert across["best_static_idle"] == report["best_static"]["idle"] and across["predicted_period_ms"] > 0
    assert "planner timed across the sweep" in out.stdout
    assert all(0 <= t["partition"] <= 4 for t in report["timeline"])
    assert (tmp_path / "l.png").stat().st_size > 1000


def test_profile_reports_per_block_costs_on_each_side_and_the_bf16_accuracy_cost(tmp_path):
    out = subprocess.run([sys.executable, "-m", "hybrid_vla_ros.cli", "profile", "--preset", "tiny", "--frames", "1",
                          "--json", str(tmp_path / "p.json")], capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stderr
    report = json.loads((tmp_path / "p.json").read_text())
    assert len(report["prefix"]["block_ms"]) == len(report["suffix"]["bf16"]["block_ms"]) == 4
    assert report["bf16_trajectory_max_abs_diff"] > 0  # bf16 is not fp32: the cost is measured, not assumed
    assert report["cpu_backend"]["backend"] and "shm_ms" in report["handover"]


def test_load_step_that_would_measure_nothing_is_refused_with_the_reason():
    out = subprocess.run([sys.executable, "-m", "hybrid_vla_ros.cli", "bench", "--scenario", "load-step", "--preset",
                          "tiny", "--frames", "24"], capture_output=True, text=True, timeout=120)
    assert out.returncode == 2 and "load step at frame 25 with 24 frames" in out.stderr, out.stderr


@pytest.mark.slow
@pytest.mark.parametrize("preset", ["tiny-orion-release", "tiny-simlingo", "tiny-recogdrive"])
def test_bench_runs_every_mode_on_a_published_shape(preset, tmp_path):
    """The bench column for the published shapes (issue 51, item 2): native, serial and pipelined on the preset's
    synthetic frames (they carry the route's navigation), and the graph in one process on a drive with a route
    where the model needs navigation; a model that needs its pose history has its graph mode skipped with the
    reason, never a failed run."""
    from hybrid_vla_ros.model.presets import get_preset
    out = subprocess.run([sys.executable, "-m", "hybrid_vla_ros.cli", "bench", "--preset", preset, "--frames", "3",
                          "--warmup", "1", "--modes", "native,serial,pipelined,graph", "--transports", "inproc",
                          "--json", str(tmp_path / "b.json")], capture_output=True, text=True, timeout=600)
    assert out.returncode == 0, out.stderr[-3000:]
    modes = json.loads((tmp_path / "b.json").read_text())["modes"]
    for name in ("native", "serial", "pipelined"):
        mode = modes[name]
        assert mode["frames"] == 4 and mode["dropped"] == 0 and mode["failed"] == 0, (name, mode)
        assert mode["period_ms"]["p50"] > 0 and mode["latency_ms"]["p99"] >= mode["latency_ms"]["p50"] > 0
    assert modes["serial"]["max_in_flight_seen"] == 1
    graph = modes["graph"]
    context = set(get_preset(preset).context)
    if {"pose", "history"} & context:
        assert "odometry" in graph["skipped"], graph
    elif "navigation" in context and importlib.util.find_spec("autoware_planning_msgs") is None:
        assert "autoware_planning_msgs is not importable" in graph["skipped"], graph   # a machine without them
    else:
        assert graph["completed"] + graph["dropped"] == 4 and graph["completed"] >= 3, graph   # as the tiny's
        assert graph["transport"] == "inproc" and graph["period_ms"]["p50"] > 0, graph
