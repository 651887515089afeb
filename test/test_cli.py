"""The CLI as a user runs it: a real subprocess, JSON on stdout."""

import json
import os
import subprocess
import sys
import time

import pytest


def hybrid_vla(*args, timeout=120):
    return subprocess.run([sys.executable, "-m", "hybrid_vla_ros.cli", *args], capture_output=True, text=True,
                          timeout=timeout, env={**os.environ, "PYTHONWARNINGS": "ignore"})


@pytest.mark.parametrize("preset", ["tiny", "tiny-llava", "tiny-internvl"])
def test_verify_json_reports_every_partition_within_1e6(preset):
    out = hybrid_vla("verify", "--preset", preset, "--json")
    assert out.returncode == 0, out.stderr
    report = json.loads(out.stdout)
    assert report["preset"] == preset and report["dtype"] == "fp32"
    assert [r["partition"] for r in report["results"]] == list(range(report["num_blocks"] + 1))
    # 0.0: `verify` runs the split and HF's forward in its one thread: the same kernels (test_partition.py, EXACT)
    assert all(r["max_abs_diff"] <= (0.0 if preset == "tiny-internvl" else 1e-6) for r in report["results"])


def test_info_on_orion_like_answers_quickly_without_allocating():
    start = time.monotonic()
    out = hybrid_vla("info", "--preset", "orion-like", "--partition", "16", "--json")
    assert out.returncode == 0, out.stderr
    assert time.monotonic() - start < 30
    info = json.loads(out.stdout)
    assert info["num_blocks"] == 32 and info["partition"] == 16
    assert info["prefix_bytes"] + info["suffix_bytes"] == info["total_bytes"]
    assert info["prefix_bytes"] > 0 and info["suffix_bytes"] > 0
    assert info["total_bytes"] > 10 * 1024 ** 3  # 7B params in fp16 would not fit in this test's memory


def test_run_streams_frames_and_prints_per_frame_times():
    out = hybrid_vla("run", "--preset", "tiny", "--frames", "3")
    assert out.returncode == 0, out.stderr
    lines = [line for line in out.stdout.splitlines() if line.startswith("frame")]
    assert len(lines) == 3 and all("prefix" in line and "suffix" in line for line in lines)


def test_bad_arguments_exit_2_with_a_reason():
    out = hybrid_vla("info", "--preset", "tiny", "--partition", "9")
    assert out.returncode == 2 and "--partition: 9 is outside 0..4" in out.stderr
    out = hybrid_vla("verify", "--preset", "nope")
    assert out.returncode == 2 and "unknown preset 'nope'" in out.stderr


@pytest.mark.parametrize("preset,family", [("tiny-llava", "llava"), ("tiny-internvl", "internvl"),
                                           ("tiny-qwen3vl", "qwen3_vl"), ("tiny-scene", "scene_qwen2")])
def test_export_then_verify_from_checkpoint(tmp_path, preset, family):
    assert hybrid_vla("export", "--preset", preset, "--out", str(tmp_path / "c")).returncode == 0
    model_type = json.loads((tmp_path / "c" / "config.json").read_text())["model_type"]
    assert model_type == family.removeprefix("scene_")   # a scene model's config.json is its plain LLM's
    out = hybrid_vla("verify", "--checkpoint", str(tmp_path / "c"), "--json")
    assert out.returncode == 0, out.stderr
    report = json.loads(out.stdout)
    assert report["family"] == family and all(r["max_abs_diff"] <= 1e-6 for r in report["results"])
