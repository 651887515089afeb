"""The ego's acceleration as a frame input: ~/input/acceleration (geometry_msgs/AccelWithCovarianceStamped,
Autoware's /localization/acceleration, the diffusion planner's `input_acceleration`) -> each frame's
EgoState.accel_mps2 (longitudinal, base_link x). Data for scene encoders and heads: the prompt's ego text is
unchanged (a checkpoint's tokens do not move).

The sample matched to the frame's stamp within the camera skew (interpolated), else the nearest within
MATCH_S; without one the frame is served with 0 m/s^2 and counted (`acceleration_missing`): acceleration
refines the ego state, it is no reason to drop a frame (odometry is: prefix_node's stale_kinematic_state).
"""

from __future__ import annotations

import dataclasses
import threading

from geometry_msgs.msg import AccelWithCovarianceStamped

from ...engine.pipeline.camera_sync import StampedHistory
from .. import messages

MATCH_S = 0.5   # ~10 periods of Autoware's 50 Hz acceleration; a sample further from the frame is not its


class AccelerationInput:
    def __init__(self, node, skew_ns: int):
        self.skew_ns = skew_ns
        self.history = StampedHistory(between=lambda a, b, w: a + w * (b - a))
        self.lock = threading.Lock()
        self.received = self.matched = self.missing = 0
        self.last_missing = False
        node.configured_subscription(AccelWithCovarianceStamped, "~/input/acceleration", self._on_accel, 50)

    def _on_accel(self, msg) -> None:
        self.history.add(messages.stamp_to_ns(msg.header.stamp), float(msg.accel.accel.linear.x))
        self.received += 1

    def apply(self, frame) -> None:
        """frame.ego.accel_mps2 from the sample of the frame's stamp (0 and counted when there is none)."""
        accel, matched = self.history.match(frame.stamp_ns, self.skew_ns)
        gap = self.history.gap_ns(frame.stamp_ns)
        if not matched and (gap is None or gap > MATCH_S * 1e9):
            accel = None
        with self.lock:
            self.last_missing = accel is None
            self.missing += accel is None
            self.matched += accel is not None
        if frame.ego is not None:
            frame.ego = dataclasses.replace(frame.ego, accel_mps2=0.0 if accel is None else float(accel))

    def check(self) -> tuple[str, int, str, dict]:
        """WARN while acceleration arrives but not for the frames; OK (said) when none was ever received."""
        values = {"received": str(self.received), "matched": str(self.matched),
                  "acceleration_missing": str(self.missing)}
        if self.received == 0:
            return "acceleration", 0, "no ~/input/acceleration received: frames get 0 m/s^2", values
        if self.last_missing:
            return "acceleration", 1, f"no acceleration within {MATCH_S:g} s of the last frame: 0 m/s^2", values
        return "acceleration", 0, "matched to each frame", values
