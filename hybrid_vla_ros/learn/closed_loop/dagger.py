"""Closed-loop training frames (DAgger, Ross, Gordon & Bagnell 2011): the model drives training scenarios (seeds
from TRAIN_SEED_BASE on; evaluation uses seeds below it) and every frame it saw is labelled with what the drives'
ground-truth driver would do from there (road.ground_truth of the scene seen: OraclePolicy). Fine-tuning on them
beside the road drives teaches recoveries from the states the model's own driving leads to (a lead closing in
faster than the road drives' driver ever lets it), which open-loop drives do not show."""

from __future__ import annotations

from ...sim.loop import CAMERA_PERIOD_S, Drive
from ...sim.policy import View, render_frame
from ...sim.road import ground_truth
from ...sim.timing import instant
from ...sim.world import random_scenario
from ..train import TRAIN_SEED_BASE, Sample
from .model_policy import ModelPolicy


class RecordingPolicy:
    """The model's policy, keeping every view it was asked about (the frames of a closed-loop drive)."""

    def __init__(self, model):
        self.inner, self.views = ModelPolicy(model), []
        self.name = self.inner.name

    def __call__(self, view: View):
        self.views.append(view)
        return self.inner(view)


def closed_loop_samples(model, scenarios: int, first_seed: int = TRAIN_SEED_BASE, progress=None) -> list[Sample]:
    """Drives `scenarios` training scenarios (seeds first_seed ..) with `model` at instant timing; -> one Sample
    per frame the model saw: its frame as rendered for it and the ground-truth driver's waypoints (N, 4)."""
    spec = model.spec
    samples = []
    for seed in range(first_seed, first_seed + scenarios):
        policy = RecordingPolicy(model)
        record = Drive(random_scenario(seed), policy, instant(CAMERA_PERIOD_S)).run()
        samples += [Sample(render_frame(v, spec), ground_truth(v.scene, spec.num_waypoints, spec.waypoint_dt_s))
                    for v in policy.views]
        if progress:
            progress(seed, record.end, len(policy.views))
    return samples
