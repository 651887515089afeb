"""A delay-aware model (spec.delay_aware, preset drive-delay; issue 54): told its expected capture-to-effect delay in
its prompt, trained to plan from where the ground-truth driver is after that delay (learn/delays.py)."""

import dataclasses

import numpy as np
import pytest
import torch

from hybrid_vla_ros.errors import ConfigError, InputError
from hybrid_vla_ros.learn.delays import PATH_DT_S, delayed_truth, path_points
from hybrid_vla_ros.learn.train import TrainConfig, road_samples, train
from hybrid_vla_ros.model.inputs import encode_frame, synthetic_frame
from hybrid_vla_ros.model.load import load_vla
from hybrid_vla_ros.model.tokenize.tokens import BYTE_OFFSET
from hybrid_vla_ros.sim.road import drive, ground_truth


def road_frame(seed=1003, index=12):
    return list(drive(seed, index + 1, 1, 112, 112, 8, 0.5))[-1]


def test_the_delayed_target_is_the_same_rollout_seen_from_where_the_driver_is_then():
    f = road_frame()
    path = ground_truth(f.scene, path_points(4.0, 1.0), PATH_DT_S)
    speed = f.scene.speed_mps
    np.testing.assert_allclose(delayed_truth(path, speed, 0.0, 8, 0.5), f.truth, atol=1e-9)
    later = delayed_truth(path, speed, 0.5, 7, 0.5)        # from the first waypoint's pose: the next seven
    x0, y0, yaw0 = f.truth[0, :3]
    c, s = np.cos(yaw0), np.sin(yaw0)
    dx, dy = f.truth[1:, 0] - x0, f.truth[1:, 1] - y0
    np.testing.assert_allclose(later[:, 0], c * dx + s * dy, atol=1e-9)
    np.testing.assert_allclose(later[:, 1], -s * dx + c * dy, atol=1e-9)
    np.testing.assert_allclose(later[:, 2:], np.column_stack([f.truth[1:, 2] - yaw0, f.truth[1:, 3]]), atol=1e-9)


def test_the_prompt_says_the_delay_and_only_a_delay_aware_model_reads_it():
    aware, plain = load_vla(preset="drive-delay"), load_vla(preset="drive")
    frame = synthetic_frame(aware.spec, 0)
    text = lambda model, f: bytes(int(t) - BYTE_OFFSET for t in encode_frame(f, model).input_ids[0]   # noqa: E731
                                  if BYTE_OFFSET <= int(t) < BYTE_OFFSET + 256).decode()
    assert text(aware, dataclasses.replace(frame, expected_delay_s=0.521)).startswith("d0.521")
    assert text(aware, frame).startswith("d0.000")
    assert torch.equal(encode_frame(dataclasses.replace(frame, expected_delay_s=0.5), plain).input_ids,
                       encode_frame(frame, plain).input_ids)
    for bad in (-0.1, 6.0, float("nan")):
        with pytest.raises(InputError, match="expected_delay_s"):
            encode_frame(dataclasses.replace(frame, expected_delay_s=bad), aware)


def test_delays_train_only_a_model_whose_prompt_says_them():
    samples = road_samples(load_vla(preset="drive-delay").spec, [1000], 6, max_delay_s=1.0)
    assert all(s.path.shape == (path_points(4.0, 1.0), 4) for s in samples)
    with pytest.raises(ConfigError, match="delay_aware"):
        train(load_vla(preset="drive"), TrainConfig(steps=1, max_delay_s=1.0), samples)
    history = train(load_vla(preset="drive-delay"), TrainConfig(steps=3, batch=4, max_delay_s=1.0), samples)
    assert len(history) == 3 and all(np.isfinite(h["loss"]) for h in history)


def test_the_closed_loop_tells_a_delay_aware_policy_its_modes_delay():
    from hybrid_vla_ros.learn.closed_loop.model_policy import ModelPolicy
    from hybrid_vla_ros.sim.loop import Drive
    from hybrid_vla_ros.sim.timing import ModeTiming
    from hybrid_vla_ros.sim.world import random_scenario
    policy = ModelPolicy(load_vla(preset="drive-delay"))
    Drive(random_scenario(1), policy, ModeTiming("pipelined", 0.783, 0.408))
    assert policy.expected_delay_s == 0.783
    Drive(random_scenario(1), policy, ModeTiming("pipelined_retimed", 0.783, 0.408, retimed=True))
    assert policy.expected_delay_s == 0.0                  # re-timing places the plan itself
    plain = ModelPolicy(load_vla(preset="drive"))
    Drive(random_scenario(1), plain, ModeTiming("native", 0.521, 0.521))
    assert plain.expected_delay_s == 0.0
