"""The model as a closed-loop policy: the simulator's view of a frame (sim/policy.py View) -> the plan (N, 5) in
that frame's ego frame, through the engine's stages at the native cut (PrefixStage(L) + SuffixStage(L), fp32
on the CPU: the hybrid fp32 split at any p gives bit-identical plans, docs/DRIVING.md, so one forward serves
every mode; the modes differ in when the plan takes effect). The image: sim/policy.render_frame. A delay-aware
model is told each mode's delay (sim/loop.Drive calls start_drive). kv_stream: past frames' KV kept across the
windows the drive gives the model (engine/kv_stream/, approximate; cut at L // 2 so both sides keep theirs)."""

from __future__ import annotations

import numpy as np

from ...sim.policy import View, render_frame


class ModelPolicy:
    def __init__(self, model, kv_stream: bool = False, kv_refresh_windows: int = 0):
        from ...engine.stages import PrefixStage, SuffixStage
        self.model, self.spec = model, model.spec
        self.name = model.spec.name + (" (streaming KV)" if kv_stream else "")
        p = model.num_blocks // 2 if kv_stream else model.num_blocks
        self.prefix = PrefixStage(model, p, kv_stream=kv_stream, kv_refresh_windows=kv_refresh_windows)
        self.suffix = SuffixStage(model, p)
        self.expected_delay_s = 0.0

    def start_drive(self, timing) -> None:
        """A new drive under `timing`: a delay-aware model (spec.delay_aware) is told the delay until its plans take
        effect (0 re-timed: re-timing places the plan itself); images kept from another drive are forgotten (a
        view's key is its scenario and tick, which another drive's car sees from elsewhere)."""
        self.expected_delay_s = 0.0 if timing.retimed or not self.spec.delay_aware else timing.latency_s
        self.prefix.forget()
        self.suffix.forget()

    def kv_slots(self) -> tuple[int, int] | None:
        """Streaming KV: image slots kept and computed so far by the prefix (None without it)."""
        stream = self.prefix.stream
        return None if stream is None else (stream.kept_slots, stream.computed_slots)

    def frame(self, view: View):
        frame = render_frame(view, self.spec)
        frame.expected_delay_s = self.expected_delay_s
        return frame

    def __call__(self, view: View) -> np.ndarray:
        trajectory = self.suffix.run(self.prefix.run(self.frame(view)))
        return np.asarray(trajectory.points, dtype=np.float64)                         # (N, 5)
