"""Partition scheduling policy (ROS-free). Moves p one block at a time towards balance.

Inputs per update: prefix and suffix stage times (ms) and the suffix backlog. A suffix backlog at or above
the threshold moves p up at once (give the prefix more blocks); otherwise p moves only when one stage is
slower than the other by more than the hysteresis, and not within the cool-down of the last move.
"""

from __future__ import annotations

from dataclasses import dataclass

from ..errors import ConfigError, expect


@dataclass
class StageLoad:
    prefix_ms: float
    suffix_ms: float
    suffix_backlog: int = 0


@dataclass
class SimplePolicy:
    zone_min: int
    zone_max: int
    partition: int
    hysteresis: float = 0.15
    cooldown_s: float = 2.0
    backlog_threshold: int = 2
    last_move_s: float = float("-inf")

    def __post_init__(self) -> None:
        expect(0 <= self.zone_min <= self.partition <= self.zone_max, ConfigError,
               f"scheduler: partition {self.partition} must lie in the zone [{self.zone_min}, {self.zone_max}]")
        expect(self.hysteresis >= 0 and self.cooldown_s >= 0 and self.backlog_threshold >= 1, ConfigError,
               f"scheduler: hysteresis {self.hysteresis}, cooldown {self.cooldown_s}, backlog threshold "
               f"{self.backlog_threshold}: expected >= 0, >= 0, >= 1")

    def update(self, load: StageLoad, now_s: float) -> int:
        """Returns the partition to use from now on (possibly unchanged)."""
        target = self.partition
        if load.suffix_backlog >= self.backlog_threshold:
            target = self.partition + 1
        elif now_s - self.last_move_s >= self.cooldown_s and load.prefix_ms > 0 and load.suffix_ms > 0:
            if load.suffix_ms > load.prefix_ms * (1 + self.hysteresis):
                target = self.partition + 1
            elif load.prefix_ms > load.suffix_ms * (1 + self.hysteresis):
                target = self.partition - 1
        target = min(self.zone_max, max(self.zone_min, target))
        if target != self.partition:
            self.partition, self.last_move_s = target, now_s
        return self.partition
