"""Partition scheduling policies (ROS-free), one interface: `update(sample) -> partition`.

A `StageSample` is one finished frame: the partition it *ran at*, its prefix and suffix compute times
(waiting for odometry or ring space excluded), the suffix backlog when it finished, and when. Both policies
attribute the times to the sample's own partition, never to the one they hold now.

SimplePolicy moves p one block at a time towards balance: a suffix backlog at or above the threshold, seen
by a frame that ran at the p held now, moves p up at once (give the prefix more blocks; frames in flight
across that move cannot push it further); otherwise p moves only when one stage is slower than the other by
more than the hysteresis, and not within the cool-down of the last move. The cost policy is in costs.py.
"""

from __future__ import annotations

from dataclasses import dataclass

from ...errors import ConfigError, expect


@dataclass
class StageSample:
    partition: int          # the partition the frame ran at
    prefix_ms: float
    suffix_ms: float
    backlog: int = 0        # suffix backlog when the frame finished
    at_s: float = 0.0       # monotonic time of the frame's end (cool-downs)
    rows: int = 0           # a packed step's rows (action-token models: one sample per step); 0 = a frame


@dataclass
class SimplePolicy:
    zone_min: int
    zone_max: int
    partition: int
    hysteresis: float = 0.15      # move when one stage is slower than the other by this fraction
    cooldown_s: float = 2.0       # minimum time between two moves (a backlog overrides it)
    backlog_threshold: int = 2
    last_move_s: float = float("-inf")

    def __post_init__(self) -> None:
        expect(0 <= self.zone_min <= self.partition <= self.zone_max, ConfigError,
               f"scheduler: partition {self.partition} must lie in the zone [{self.zone_min}, {self.zone_max}]")
        expect(self.hysteresis >= 0 and self.cooldown_s >= 0 and self.backlog_threshold >= 1, ConfigError,
               f"scheduler: hysteresis {self.hysteresis}, cooldown {self.cooldown_s}, backlog threshold "
               f"{self.backlog_threshold}: expected >= 0, >= 0, >= 1")

    def tune(self, name: str, value) -> None:
        """A run-time change of hysteresis, cooldown_s or backlog_threshold."""
        setattr(self, name, value)

    def update(self, sample: StageSample) -> int:
        """Returns the partition to use from now on (possibly unchanged). Stage times measured at another
        partition than the one held now (in flight across a move) say nothing about it and are ignored."""
        target = self.partition
        if sample.backlog >= self.backlog_threshold and sample.partition == self.partition:
            target = self.partition + 1  # a frame still at the old p says nothing about a move just made
        elif sample.partition == self.partition and sample.at_s - self.last_move_s >= self.cooldown_s \
                and sample.prefix_ms > 0 and sample.suffix_ms > 0:
            if sample.suffix_ms > sample.prefix_ms * (1 + self.hysteresis):
                target = self.partition + 1
            elif sample.prefix_ms > sample.suffix_ms * (1 + self.hysteresis):
                target = self.partition - 1
        target = min(self.zone_max, max(self.zone_min, target))
        if target != self.partition:
            self.partition, self.last_move_s = target, sample.at_s
        return self.partition
