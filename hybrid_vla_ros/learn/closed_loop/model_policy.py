"""The model as a closed-loop policy: the simulator's view of a frame (sim/policy.py View) -> the plan (N, 5) in
that frame's ego frame, through the engine's stages at the native cut (PrefixStage(L) + SuffixStage(L), fp32
on the CPU: the hybrid fp32 split at any p gives bit-identical plans, docs/DRIVING.md, so one forward serves
every mode; the modes differ in when the plan takes effect). The image: sim/policy.render_frame."""

from __future__ import annotations

import numpy as np

from ...sim.policy import View, render_frame


class ModelPolicy:
    def __init__(self, model):
        from ...engine.stages import PrefixStage, SuffixStage
        self.model, self.spec = model, model.spec
        self.name = model.spec.name
        L = model.num_blocks
        self.prefix, self.suffix = PrefixStage(model, L), SuffixStage(model, L)

    def frame(self, view: View):
        return render_frame(view, self.spec)

    def __call__(self, view: View) -> np.ndarray:
        trajectory = self.suffix.run(self.prefix.run(self.frame(view)))
        return np.asarray(trajectory.points, dtype=np.float64)                         # (N, 5)
