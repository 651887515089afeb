"""What a decoded frame gives back (ROS-free): its tokens, their count, why its decode ended, its trajectory when
the tokens are one whole action, or why it failed."""

from __future__ import annotations

from dataclasses import dataclass

from ...types import Trajectory


@dataclass
class ActionResult:
    seq: int
    stamp_ns: int
    tokens: list[int] | None      # the decoded token ids, stop token included; None: the frame failed (see error)
    trajectory: Trajectory | None  # None: failed, or the tokens are not one whole action (full vocabulary, stopped)
    latency_s: float
    error: str = ""
    reason: str = ""              # with error: the diagnostics reason (invalid_input, step_failed)
    ended: str = ""               # why its decode ended: "stop" (a stop id) or "max_tokens"

    @property
    def token_count(self) -> int:
        """Tokens decoded for the frame (0 when it failed)."""
        return len(self.tokens or ())

    def diagnostics(self) -> dict:
        """Key values for a node's info message: the count, why it ended, the ids."""
        return {"tokens": self.token_count, "decode_ended": self.ended,
                "token_ids": " ".join(str(t) for t in self.tokens or ())}
