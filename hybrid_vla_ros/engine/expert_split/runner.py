"""One Alpamayo frame split at a cut p, run serially in one process: the prefix side (prefix.py) and the suffix
side (suffix.py) exchange only the crossings of crossings.py, each passed through a transport (identity by
default; crossings.roundtrip serialises every one as two processes would). Equal to the unsplit reference
(model/plugins/alpamayo/reference.py run_reference) for the same seed: the same tokens, the same trajectory.

Per frame, with n tokens sampled (n_fed of them fed: all when the stop token came, else n - 1) and N Euler steps:
    prefix -> suffix   1 PromptState + n_fed TokensState + N ExpertState   (+ 1 PromptState and, when n_fed > 0,
                       1 TokensState for 1.5's route-free cache with guidance)
    suffix -> prefix   n TokenChoice + N ActionState
Timings per side and phase, in ms, one entry per call: prefill, decode (each step), unguided (guidance),
flow_setup (suffix: the noise), expert (each Euler step), trajectory (suffix). The cut is read once at the start
of a frame: setting it takes effect at the next frame."""

from __future__ import annotations

import time
from collections import defaultdict
from dataclasses import dataclass, field

import torch

from ...errors import ConfigError, expect
from ...model.plugins.alpamayo.decode import Sampling
from ...model.plugins.alpamayo.flow import FlowSettings
from ...model.plugins.alpamayo.reference import AlpamayoInputs, AlpamayoResult, check_inputs, fused_prompt
from ..scheduling.partition import check_partition
from .crossings import GUIDED, nbytes
from .prefix import PrefixSide
from .suffix import SuffixSide

FORWARD, BACK = "prefix->suffix", "suffix->prefix"


@dataclass
class Crossing:
    direction: str        # FORWARD or BACK
    kind: str             # the crossing's class name (crossings.py)
    nbytes: int           # tensor bytes it carries
    ms: float             # the transport's time (serialise + parse with crossings.roundtrip)


@dataclass
class SplitResult:
    result: AlpamayoResult
    partition: int
    timings: dict = field(default_factory=dict)       # side -> phase -> [ms per call]
    crossings: list[Crossing] = field(default_factory=list)

    def count(self, direction: str | None = None, kind: str | None = None) -> int:
        return sum(1 for c in self.crossings if direction in (None, c.direction) and kind in (None, c.kind))

    def phase_ms(self, side: str, phase: str) -> float:
        return sum(self.timings.get(side, {}).get(phase, []))


class Link:
    """Carries each crossing through the transport and logs it."""

    def __init__(self, transport=None):
        self.transport = transport or (lambda state: state)
        self.crossings: list[Crossing] = []

    def __call__(self, state, direction: str):
        start = time.perf_counter()
        delivered = self.transport(state)
        ms = (time.perf_counter() - start) * 1e3
        self.crossings.append(Crossing(direction, type(state).__name__, nbytes(state), ms))
        return delivered


class Clock:
    def __init__(self):
        self.phases = {"prefix": defaultdict(list), "suffix": defaultdict(list)}

    def __call__(self, side: str, phase: str, fn, *args):
        start = time.perf_counter()
        out = fn(*args)
        self.phases[side][phase].append((time.perf_counter() - start) * 1e3)
        return out

    def as_dict(self) -> dict:
        return {side: dict(phases) for side, phases in self.phases.items()}


def _reason(prefix: PrefixSide, suffix: SuffixSide, prompt, history, clock: Clock, link: Link) -> None:
    """Prefill and the sampled decode: boundary states forward, sampled tokens back."""
    state = link(clock("prefix", "prefill", prefix.prompt, prompt, GUIDED, history), FORWARD)
    choice = link(clock("suffix", "prefill", suffix.prompt, state), BACK)
    while prefix.take(choice):
        state = link(clock("prefix", "decode", prefix.feed_token), FORWARD)
        following = clock("suffix", "decode", suffix.step, state)
        if following is None:
            return
        choice = link(following, BACK)


def _unguided(prefix: PrefixSide, suffix: SuffixSide, prompt, history, clock: Clock, link: Link) -> None:
    """1.5's route-free prompt on both sides, then the reasoning the guided cache holds fed on top."""
    state = link(clock("prefix", "unguided", prefix.unguided_prompt, prompt, history), FORWARD)
    clock("suffix", "unguided", suffix.prompt, state)
    if prefix.held:
        state = link(clock("prefix", "unguided", prefix.unguided_feed), FORWARD)
        clock("suffix", "unguided", suffix.step, state)


def _flow(prefix: PrefixSide, suffix: SuffixSide, settings: FlowSettings, clock: Clock, link: Link) -> None:
    """Euler steps: the action state back, the action tokens' boundary forward."""
    action = link(clock("suffix", "flow_setup", suffix.start_flow, settings), BACK)
    while action is not None:
        state = link(clock("prefix", "expert", prefix.expert_step, action), FORWARD)
        following = clock("suffix", "expert", suffix.expert_step, state)
        action = None if following is None else link(following, BACK)


class Cut:
    """An Alpamayo model's cut p in 0..L (`self.model`), checked whenever it is set; `cut_name` names it in the
    error."""
    cut_name = "Alpamayo split partition"

    @property
    def num_blocks(self) -> int:
        return self.model.config.vlm.text_config.num_hidden_layers

    @property
    def partition(self) -> int:
        return self._partition

    @partition.setter
    def partition(self, value: int) -> None:
        self._partition = check_partition(value, self.num_blocks, self.cut_name)


class AlpamayoSplit(Cut):
    """An Alpamayo model (model/plugins/alpamayo) run split at `partition` in 0 .. L (0: everything but the
    embeddings, the vision tower and action_in_proj on the suffix; L: everything but the heads, the sampler and
    the Euler updates on the prefix)."""

    def __init__(self, model, partition: int, transport=None, vision=None):
        """vision: a VisionCache kept across this split's frames (vision_cache.py): each keyed image encoded once."""
        self.model, self.transport, self.vision = model, transport, vision
        self.partition = partition


    def _check(self, inputs: AlpamayoInputs, sampling: Sampling, flow: FlowSettings, guidance: bool) -> None:
        check_inputs(self.model, inputs)
        sampling.check()
        flow.check()
        cfg = self.model.config
        expect(not guidance or "route_start" in cfg.special_ids, ConfigError,
               f"guidance: the {cfg.release} config has no route tokens (add_special_tokens is off)")

    @torch.inference_mode()
    def run(self, inputs: AlpamayoInputs, seed: int = 0, sampling: Sampling = Sampling(),
            flow: FlowSettings | None = None, guidance: bool = False) -> SplitResult:
        """One frame; the same arguments give run_reference's tokens and trajectory exactly."""
        flow = flow or FlowSettings.from_config(self.model.config.flow)
        self._check(inputs, sampling, flow, guidance)
        start, partition = time.perf_counter(), self.partition       # fixed for this frame
        prefix, suffix = PrefixSide(self.model, partition, self.vision), SuffixSide(self.model, partition, seed,
                                                                                     sampling)
        clock, link = Clock(), Link(self.transport)
        prompt = fused_prompt(self.model, inputs)
        history = (inputs.ego_history_xyz[:, 0], inputs.ego_history_rot[:, 0])   # (1, T, 3), (1, T, 3, 3)
        _reason(prefix, suffix, prompt, history, clock, link)
        if guidance:
            _unguided(prefix, suffix, prompt, history, clock, link)
        _flow(prefix, suffix, flow, clock, link)
        actions, xyz, rot = clock("suffix", "trajectory", suffix.trajectory)
        timings = {"total_ms": (time.perf_counter() - start) * 1e3,
                   "transport_ms": sum(c.ms for c in link.crossings)}
        result = AlpamayoResult(xyz[0], rot[0], actions[0].float(), list(suffix.tokens),
                                bool(suffix.tokens) and suffix.tokens[-1] == suffix.stop_id, timings)
        return SplitResult(result, partition, clock.as_dict(), link.crossings)


def run_split(model, inputs: AlpamayoInputs, partition: int, seed: int = 0, sampling: Sampling = Sampling(),
              flow: FlowSettings | None = None, guidance: bool = False, transport=None) -> SplitResult:
    """run_reference's signature plus the cut (and a transport for the crossings)."""
    return AlpamayoSplit(model, partition, transport).run(inputs, seed, sampling, flow, guidance)
