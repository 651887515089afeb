"""Online cost model and the partition policy built on it (ROS-free).

Costs per block and per device, in ms at a reference token count, seeded by the planner's prediction for this
machine (`hybrid-vla plan`, plan/predict.py: CostModel.from_plan) or by a profile (`hybrid-vla profile`), and
scaled linearly with tokens. Observed stage times keep one multiplicative scale per stage up to date
(an exponential moving average of the median of the last `window` observed / predicted ratios: a competing
load shows up within a few frames, while one slow frame of a noisy machine barely moves it).
The policy picks the p that minimises the pipelined period max(prefix, handover + suffix) inside the dynamic
zone and under the prefix-device memory budget, with hysteresis and a cool-down, and moves at once when the
suffix backlog grows.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from ...errors import ConfigError, expect
from .policies import StageSample


@dataclass
class CostModel:
    embed_ms: float                 # prefix: vision + embeddings (+ positions)
    prefix_block_ms: list[float]    # per block on the prefix device
    suffix_block_ms: list[float]    # per block on the suffix device (its dtype)
    head_ms: float                  # suffix: final norm + action head
    handover_ms: float = 0.0
    tokens_ref: int = 1
    prefix_scale: float = 1.0       # observed / predicted: EMA of the median of the last `window` frames
    suffix_scale: float = 1.0
    window: int = 5                 # median filter: one outlier frame does not count
    alpha: float = 0.3              # EMA weight of a new (median-filtered) observation
    _ratios: dict = field(default_factory=lambda: {"prefix_scale": [], "suffix_scale": []}, repr=False)

    def __post_init__(self) -> None:
        expect(len(self.prefix_block_ms) == len(self.suffix_block_ms) > 0, ConfigError,
               f"cost model: {len(self.prefix_block_ms)} prefix and {len(self.suffix_block_ms)} suffix block costs")

    @property
    def num_blocks(self) -> int:
        return len(self.prefix_block_ms)

    @classmethod
    def from_profiles(cls, prefix_profile: dict, suffix_profile: dict, handover_ms: float, tokens: int) -> "CostModel":
        return cls(prefix_profile["embed_ms"], list(prefix_profile["block_ms"]), list(suffix_profile["block_ms"]),
                   suffix_profile["head_ms"], handover_ms, tokens)

    @classmethod
    def from_plan(cls, plan: dict) -> "CostModel":
        """The planner's prediction as the prior: a plan report (its "cost_model": front end, per-block ms on each
        side, head, handover, tokens). Observed frames then calibrate the two scales."""
        fields = plan.get("cost_model")
        expect(isinstance(fields, dict), ConfigError, "cost model: the plan has no 'cost_model' (hybrid-vla plan --json)")
        try:
            return cls(**fields)
        except TypeError as exc:
            raise ConfigError(f"cost model: the plan's 'cost_model' does not fit ({exc})") from exc

    def prefix_ms(self, p: int, tokens: int | None = None) -> float:
        scale = (tokens or self.tokens_ref) / self.tokens_ref
        return self.prefix_scale * scale * (self.embed_ms + sum(self.prefix_block_ms[:p]))

    def suffix_ms(self, p: int, tokens: int | None = None) -> float:
        scale = (tokens or self.tokens_ref) / self.tokens_ref
        return self.suffix_scale * scale * (sum(self.suffix_block_ms[p:]) + self.head_ms)

    def period_ms(self, p: int, tokens: int | None = None) -> float:
        return max(self.prefix_ms(p, tokens), self.handover_ms + self.suffix_ms(p, tokens))

    def observe(self, p: int, prefix_ms: float, suffix_ms: float, tokens: int | None = None) -> None:
        """Fold one frame's measured stage times (compute only) into the two scales."""
        for attr, observed, predicted in (("prefix_scale", prefix_ms, self.prefix_ms(p, tokens) / self.prefix_scale),
                                          ("suffix_scale", suffix_ms, self.suffix_ms(p, tokens) / self.suffix_scale)):
            if observed > 0 and predicted > 0:
                ratios = self._ratios[attr]
                ratios.append(observed / predicted)
                del ratios[:-self.window]
                median = sorted(ratios)[len(ratios) // 2]
                setattr(self, attr, (1 - self.alpha) * getattr(self, attr) + self.alpha * median)


@dataclass
class CostPolicy:
    model: CostModel
    zone_min: int
    zone_max: int
    partition: int
    prefix_bytes: list[int] | None = None   # resident prefix-device bytes if the prefix held blocks [0, p)
    budget_bytes: int | None = None         # prefix-device memory budget (room left for Autoware)
    hysteresis: float = 0.08                # move only if the predicted period improves by this fraction
    confirm_frames: int = 2                 # ... and the same better target was seen this many frames running
    cooldown_frames: int = 3                # frames between two moves (backlog overrides)
    cooldown_s: float = 0.0                 # and seconds between two moves (backlog overrides)
    backlog_threshold: int = 2
    last_move_s: float = float("-inf")
    frames_since_move: int = 1 << 30
    frames_seen: int = 0
    _candidate: tuple[int, int] = (-1, 0)   # (target, consecutive frames it was preferred)
    moves: list[tuple[int, int, int]] = field(default_factory=list)  # (frame, from, to)

    def __post_init__(self) -> None:
        L = self.model.num_blocks
        expect(0 <= self.zone_min <= self.zone_max <= L, ConfigError,
               f"dynamic zone [{self.zone_min}, {self.zone_max}] must lie in 0..{L}")
        expect(self.zone_min <= self.partition <= self.zone_max, ConfigError,
               f"partition {self.partition} lies outside the dynamic zone [{self.zone_min}, {self.zone_max}]")
        expect(0 <= self.hysteresis < 1 and self.cooldown_frames >= 0 and self.backlog_threshold >= 1, ConfigError,
               f"hysteresis {self.hysteresis} (0..1), cooldown {self.cooldown_frames} (>= 0), backlog threshold "
               f"{self.backlog_threshold} (>= 1)")
        if self.budget_bytes is not None:
            expect(self.prefix_bytes is not None and len(self.prefix_bytes) == L + 1, ConfigError,
                   "a memory budget needs the prefix bytes of every partition 0..L")
            expect(self.budget_bytes > 0, ConfigError, f"memory budget {self.budget_bytes} B: expected > 0")
            need = self.prefix_bytes[self.zone_max]  # the whole zone is resident on the prefix device
            expect(need <= self.budget_bytes, ConfigError,
                   f"dynamic zone [{self.zone_min}, {self.zone_max}] keeps {need / 2**20:.1f} MiB on the prefix "
                   f"device, over the budget of {self.budget_bytes / 2**20:.1f} MiB; lower dynamic_zone_max")

    HYSTERESIS_MAX = 0.9  # a fraction of the predicted period: 1 would never move

    def tune(self, name: str, value) -> None:
        """A run-time change of hysteresis (capped), cooldown_s or backlog_threshold."""
        setattr(self, name, min(value, self.HYSTERESIS_MAX) if name == "hysteresis" else value)

    def candidates(self) -> list[int]:
        ps = range(self.zone_min, self.zone_max + 1)
        if self.budget_bytes is not None:
            ps = [p for p in ps if self.prefix_bytes[p] <= self.budget_bytes]
        return list(ps)

    def best(self, tokens: int | None = None) -> int:
        return min(self.candidates(), key=lambda p: (self.model.period_ms(p, tokens), abs(p - self.partition)))

    def update(self, sample: StageSample, tokens: int | None = None) -> int:
        """Feed one finished frame; its times are folded in at the partition it ran at (sample.partition),
        whatever the policy holds now. Returns the partition for the next frames."""
        self.model.observe(sample.partition, sample.prefix_ms, sample.suffix_ms, tokens)
        self.frames_since_move += 1
        self.frames_seen += 1
        target = self.best(tokens)
        cooling = self.frames_since_move <= self.cooldown_frames or sample.at_s - self.last_move_s < self.cooldown_s
        if sample.backlog >= self.backlog_threshold and self.partition < self.zone_max \
                and sample.partition == self.partition:  # (frames in flight across a move: not again)
            target = max(target, self.partition + 1)  # suffix falling behind: relieve it now
        elif cooling:
            return self.partition
        elif target != self.partition:
            now, then = self.model.period_ms(self.partition, tokens), self.model.period_ms(target, tokens)
            if then > now * (1 - self.hysteresis):
                self._candidate = (-1, 0)
                return self.partition
            seen = self._candidate[1] + 1 if self._candidate[0] == target else 1
            self._candidate = (target, seen)
            if seen < self.confirm_frames:
                return self.partition
        if target in self.candidates() and target != self.partition:
            self.moves.append((self.frames_seen - 1, self.partition, target))
            self.partition, self.frames_since_move, self._candidate = target, 0, (-1, 0)
            self.last_move_s = sample.at_s
        return self.partition
