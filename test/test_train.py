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
