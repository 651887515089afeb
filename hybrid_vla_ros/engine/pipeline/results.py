"""What the cross-frame pipeline reports: one record per frame (perf_counter timestamps) and the run's counters."""

from __future__ import annotations

from dataclasses import dataclass, field

from ...types import Trajectory


@dataclass
class FrameResult:
    """One frame's outcome with perf_counter timestamps (seconds)."""
    seq: int
    stamp_ns: int
    partition: int = -1
    trajectory: Trajectory | None = None
    error: str | None = None
    failed_stage: str | None = None
    arrival: float = 0.0
    prefix_start: float = 0.0
    prefix_end: float = 0.0
    sent: float = 0.0
    recv_start: float = 0.0
    suffix_start: float = 0.0
    suffix_end: float = 0.0
    suffix_busy_s: float = 0.0   # the suffix's compute on this frame (its chunks' sum when chunked)
    chunks: int = 1              # boundary states the frame crossed in (chunked prefill: its chunk count)
    done: bool = False           # reported (a failed chunk ends the frame; its later chunks are skipped)

    @property
    def ok(self) -> bool:
        return self.error is None

    @property
    def latency_ms(self) -> float:
        """Processing latency: prefix start to trajectory out."""
        return (self.suffix_end - self.prefix_start) * 1e3

    @property
    def age_ms(self) -> float:
        """Arrival to trajectory out (includes waiting for the prefix)."""
        return (self.suffix_end - self.arrival) * 1e3

    @property
    def handover_ms(self) -> float:
        return ((self.sent - self.prefix_end) + (self.suffix_start - self.recv_start)) * 1e3


@dataclass
class PipelineStats:
    submitted: int = 0
    dropped: list[int] = field(default_factory=list)
    completed: int = 0
    failed: int = 0
    prefix_busy_s: float = 0.0
    suffix_busy_s: float = 0.0
    max_in_flight_seen: int = 0
