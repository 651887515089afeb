"""The model as a closed-loop policy: the simulator's view of a frame (sim/policy.py View) -> the plan (N, 5) in
that frame's ego frame, through the engine's stages at the native cut (PrefixStage(L) + SuffixStage(L), fp32
on the CPU: the hybrid fp32 split at any p gives bit-identical plans, docs/DRIVING.md, so one forward serves
every mode; the modes differ in when the plan takes effect). The image: sim/policy.render_frame. A delay-aware
model is told each mode's delay (sim/loop.Drive calls expect_delay)."""

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
        self.expected_delay_s = 0.0

    def expect_delay(self, delay_s: float) -> None:
        """What a delay-aware model (spec.delay_aware) is told: the delay until its plans take effect."""
        self.expected_delay_s = delay_s if self.spec.delay_aware else 0.0

    def frame(self, view: View):
        frame = render_frame(view, self.spec)
        frame.expected_delay_s = self.expected_delay_s
        return frame

    def __call__(self, view: View) -> np.ndarray:
        trajectory = self.suffix.run(self.prefix.run(self.frame(view)))
        return np.asarray(trajectory.points, dtype=np.float64)                         # (N, 5)
