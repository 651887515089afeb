"""Training on synthetic road drives (learn/train.py): the loss falls within a few steps, reproducibly."""

import numpy as np
import pytest
import torch

from hybrid_vla_ros.learn.train import TrainConfig, batch_forward, road_samples, train, waypoint_loss
from hybrid_vla_ros.model.load import load_vla


@pytest.fixture(scope="module")
def samples():
    spec = load_vla(preset="drive").spec
    return road_samples(spec, [1000, 1001], frames_per_drive=8)


def test_a_few_training_steps_lower_the_loss_on_the_batches_seen(samples):
    model = load_vla(preset="drive")
    truths = torch.tensor(np.stack([s.truth for s in samples]), dtype=torch.float32)
    with torch.no_grad():
        before = float(waypoint_loss(batch_forward(model, [s.frame for s in samples]), truths))
    history = train(model, TrainConfig(steps=25, batch=8, lr=2e-3), samples=samples)
    with torch.no_grad():
        after = float(waypoint_loss(batch_forward(model, [s.frame for s in samples]), truths))
    assert after < 0.5 * before, (before, after)
    assert np.mean([h["loss"] for h in history[-5:]]) < np.mean([h["loss"] for h in history[:5]])


def test_training_is_reproducible_from_its_seed(samples):
    runs = []
    for _ in range(2):
        model = load_vla(preset="drive")
        train(model, TrainConfig(steps=3, batch=4, seed=5), samples=samples)
        runs.append(torch.cat([p.detach().flatten() for p in model.action_head.parameters()]))
    assert torch.equal(runs[0], runs[1])


def test_eval_reports_every_setting_and_fp32_hybrid_equals_native(tmp_path):
    from hybrid_vla_ros.learn.evaluate import evaluate, plot_evaluation
    report = evaluate(load_vla(preset="drive"), drives=1, seed=7, frames_per_drive=3, partitions=(2,),
                      progress=lambda t: None)
    assert set(report["settings"]) == {"constant_velocity", "native", "hybrid_fp32_p2", "hybrid_bf16_p2"}
    assert all(v["ade_m"] > 0 and v["fde_m"] >= 0 for v in report["settings"].values())
    assert report["settings"]["hybrid_fp32_p2"]["max_diff_vs_native_m"] < 1e-4 and report["fp32_identical_to_native"]
    assert 0 < report["settings"]["hybrid_bf16_p2"]["max_diff_vs_native_m"] < 0.5
    assert report["bf16_ade_change"] == report["ade_change"]["bf16"] < 0.01 and set(report["ade_change"]) == \
        {"fp32", "bf16"}
    from hybrid_vla_ros.errors import ConfigError
    with pytest.raises(ConfigError, match="training drives"):
        evaluate(load_vla(preset="drive"), drives=2, seed=999)
    with pytest.raises(ConfigError, match="'int4' is not one of"):   # int8 is one (test_int8.py)
        evaluate(load_vla(preset="drive"), drives=1, seed=7, suffix_dtypes=("fp32", "int4"))
    plot_evaluation(report, tmp_path / "eval.png")
    assert (tmp_path / "eval.png").stat().st_size > 1000


def test_train_and_eval_commands_write_a_checkpoint_a_loss_curve_and_a_report(tmp_path):
    import json
    import subprocess
    import sys

    def main(argv):  # a process of its own: the CLI installs its stop handlers for SIGINT/SIGTERM
        return subprocess.run([sys.executable, "-m", "hybrid_vla_ros.cli"] + argv, timeout=300).returncode
    out = tmp_path / "ckpt"
    assert main(["train", "--out", str(out), "--steps", "3", "--batch", "2", "--drives", "1",
                 "--frames-per-drive", "4"]) == 0
    assert {"config.json", "model.safetensors", "action_head.safetensors", "loss.png", "training.json"} <= \
        {p.name for p in out.iterdir()}
    training = json.loads((out / "training.json").read_text())
    assert training["config"]["steps"] == 3 and training["config"]["lr"] == 1e-3 and len(training["history"]) == 3
    assert main(["eval", "--checkpoint", str(out), "--drives", "1", "--frames-per-drive", "2", "--partitions", "2",
                 "--suffix-dtypes", "bf16", "--json", str(tmp_path / "eval.json")]) == 0
    report = json.loads((tmp_path / "eval.json").read_text())
    assert {"constant_velocity", "native", "hybrid_bf16_p2"} == set(report["settings"])   # the dtype asked only
    assert set(report["ade_change"]) == {"bf16"} and "fp32_identical_to_native" not in report


def test_closed_loop_frames_are_the_model_s_own_views_labelled_by_the_ground_truth_driver():
    """DAgger's frames (learn/closed_loop/dagger.py): one per frame the model saw while driving a training scenario,
    as rendered for it, with the ground-truth driver's waypoints from that scene."""
    from hybrid_vla_ros.cli.learn import training_samples
    from hybrid_vla_ros.learn.closed_loop.dagger import RecordingPolicy
    from hybrid_vla_ros.sim.loop import CAMERA_PERIOD_S, Drive
    from hybrid_vla_ros.sim.timing import instant
    from hybrid_vla_ros.sim.world import random_scenario
    from hybrid_vla_ros.learn.train import TRAIN_SEED_BASE
    from hybrid_vla_ros.sim.road import ground_truth
    model = load_vla(preset="drive")   # seeded weights: it leaves the lane soon, which is what makes it short
    assert training_samples(model, TrainConfig(), 0) is None   # train's own road drives
    samples = training_samples(model, TrainConfig(drives=1, frames_per_drive=2), 1)
    road, samples = samples[:2], samples[2:]                     # the road drive's frames, then the driven ones
    spec = model.spec
    assert all(np.array_equal(r.truth, t.truth) for r, t in zip(road, road_samples(spec, [TRAIN_SEED_BASE], 2)))
    policy = RecordingPolicy(model)
    Drive(random_scenario(TRAIN_SEED_BASE), policy, instant(CAMERA_PERIOD_S)).run()
    assert len(samples) == len(policy.views) > 1
    for sample, view in zip(samples, policy.views):
        assert sample.frame.seq == view.index and sample.frame.ego.speed_mps == view.scene.speed_mps
        assert np.array_equal(sample.truth, ground_truth(view.scene, spec.num_waypoints, spec.waypoint_dt_s))
        assert sample.truth.shape == (spec.num_waypoints, 4)
    assert len({s.frame.ego.speed_mps for s in samples}) > 1   # the car moved: the views are of a drive
