"""Several Alpamayo frames through the split, each side on one worker thread of its own (pinned to its cores, one
torch thread), in one process. A frame is runner.py's chain of tasks in runner.py's order, alternating between the
sides: the prefix's prefill, the suffix's prefill, per decode step the prefix's feed then the suffix's step (a
token back), per Euler step the prefix's expert layers then the suffix's. With `max_in_flight` frames admitted, a
side runs whichever frame's task is ready, the oldest frame first: frame t's prefill on the prefix overlaps frame
t-1's decode and expert steps on the suffix, and two frames' decode chains fill each other's bubbles.
max_in_flight = 1 is split-serial (one frame at a time, each side on its own thread). Crossings are handed over
in process (identity): the boundary is not copied. Each frame equals run_reference for its seed."""

from __future__ import annotations

import queue
import threading
import time
from dataclasses import dataclass, field
from itertools import count

import torch

from ...model.plugins.alpamayo.decode import Sampling
from ...model.plugins.alpamayo.flow import FlowSettings
from ...model.plugins.alpamayo.reference import AlpamayoInputs, fused_prompt
from ..cpu import pin_current_thread
from .crossings import GUIDED
from .prefix import PrefixSide
from .suffix import SuffixSide

SIDES = ("prefix", "suffix")


@dataclass
class Span:
    seq: int              # the frame
    side: str             # prefix or suffix
    phase: str            # prefill, decode, unguided, flow_setup, expert, trajectory
    start: float          # perf_counter seconds
    end: float

    @property
    def ms(self) -> float:
        return (self.end - self.start) * 1e3


@dataclass
class FrameOut:
    seq: int
    seed: int
    admitted: float
    done: float = 0.0
    tokens: list = field(default_factory=list)
    stopped: bool = False
    xyz: torch.Tensor | None = None
    phase: str = ""       # the phase of its task now running (a frame has one task at a time)

    @property
    def latency_ms(self) -> float:
        return (self.done - self.admitted) * 1e3


def frame_tasks(prefix: PrefixSide, suffix: SuffixSide, prompt, history, flow: FlowSettings, guidance: bool):
    """One frame as a generator of (side, phase, fn, args); each yield receives fn's result (runner.py's order).
    Returns (actions, xyz, rotations)."""
    state = yield "prefix", "prefill", prefix.prompt, (prompt, GUIDED, history)
    choice = yield "suffix", "prefill", suffix.prompt, (state,)
    while choice is not None and prefix.take(choice):
        state = yield "prefix", "decode", prefix.feed_token, ()
        choice = yield "suffix", "decode", suffix.step, (state,)
    if guidance:
        state = yield "prefix", "unguided", prefix.unguided_prompt, (prompt, history)
        yield "suffix", "unguided", suffix.prompt, (state,)
        if prefix.held:
            state = yield "prefix", "unguided", prefix.unguided_feed, ()
            yield "suffix", "unguided", suffix.step, (state,)
    action = yield "suffix", "flow_setup", suffix.start_flow, (flow,)
    while action is not None:
        state = yield "prefix", "expert", prefix.expert_step, (action,)
        action = yield "suffix", "expert", suffix.expert_step, (state,)
    return (yield "suffix", "trajectory", suffix.trajectory, ())


class SideWorker(threading.Thread):
    """One side's thread: tasks from a priority queue (oldest frame first), results to the coordinator."""

    def __init__(self, side: str, cores, results: queue.Queue):
        super().__init__(name=f"expert-split-{side}", daemon=True)
        self.side, self.cores, self.results = side, cores, results
        self.inbox: queue.PriorityQueue = queue.PriorityQueue()
        self.order = count()

    def submit(self, seq: int, fn, args) -> None:
        self.inbox.put((seq, next(self.order), fn, args))

    def stop(self) -> None:
        self.inbox.put((float("inf"), next(self.order), None, ()))

    def run(self) -> None:
        pin_current_thread(self.cores, 1)
        with torch.inference_mode():
            while True:
                seq, _, fn, args = self.inbox.get()
                if fn is None:
                    return
                start = time.perf_counter()
                try:
                    out = fn(*args)
                except Exception as exc:  # noqa: BLE001 - handed to the coordinator, which raises it
                    out = exc
                self.results.put((seq, self.side, out, start, time.perf_counter()))


class FrameStream:
    """Frames through the split with at most `max_in_flight` at once; run() returns the frames and the spans."""

    def __init__(self, model, partition: int, sampling: Sampling, flow: FlowSettings, guidance: bool = False,
                 max_in_flight: int = 2, cores=(None, None)):
        self.model, self.partition, self.sampling, self.flow = model, partition, sampling, flow
        self.guidance, self.max_in_flight, self.cores = guidance, max(1, max_in_flight), cores

    def _admit(self, seq: int, seed: int, inputs: AlpamayoInputs):
        with torch.inference_mode():
            prompt = fused_prompt(self.model, inputs)
        prefix = PrefixSide(self.model, self.partition)
        suffix = SuffixSide(self.model, self.partition, seed, self.sampling)
        history = (inputs.ego_history_xyz[:, 0], inputs.ego_history_rot[:, 0])
        return frame_tasks(prefix, suffix, prompt, history, self.flow, self.guidance), FrameOut(
            seq, seed, time.perf_counter()), suffix

    def run(self, frames: list[tuple[int, AlpamayoInputs]]) -> tuple[list[FrameOut], list[Span]]:
        """frames: (seed, inputs) in arrival order (all available at once: a backlog, as a bench feeds it)."""
        results: queue.Queue = queue.Queue()
        workers = {side: SideWorker(side, cores, results) for side, cores in zip(SIDES, self.cores)}
        for w in workers.values():
            w.start()
        try:
            return self._drive(frames, workers, results)
        finally:
            for w in workers.values():
                w.stop()
            for w in workers.values():
                w.join()

    def _drive(self, frames, workers, results) -> tuple[list[FrameOut], list[Span]]:
        live, outs, spans, waiting = {}, [], [], list(enumerate(frames))

        def dispatch(seq: int, value) -> None:
            gen, out, suffix = live[seq]
            try:
                side, phase, fn, args = gen.send(value)
            except StopIteration as stop:
                _, xyz, _ = stop.value
                out.done, out.xyz, out.tokens = time.perf_counter(), xyz[0], list(suffix.tokens)
                out.stopped = bool(suffix.tokens) and suffix.tokens[-1] == suffix.stop_id
                outs.append(out)
                del live[seq]
                return
            out.phase = phase
            workers[side].submit(seq, fn, args)

        while waiting or live:
            while waiting and len(live) < self.max_in_flight:
                seq, (seed, inputs) = waiting.pop(0)
                live[seq] = self._admit(seq, seed, inputs)
                dispatch(seq, None)
            seq, side, value, start, end = results.get()
            if isinstance(value, Exception):
                raise value
            spans.append(Span(seq, side, live[seq][1].phase, start, end))
            dispatch(seq, value)
        return sorted(outs, key=lambda o: o.seq), spans
