"""The suffix side of a split Alpamayo frame served across processes (ROS-free): each forward message's bytes in
(envelope.py: HVLM messages) -> the answers it calls for as bytes (a sampled token, the next Euler
step's action state) and, after the last expert step, the frame's result (tokens, trajectory, each side's time). Its counterpart is
prefix_server.py; the suffix node's engine for an Alpamayo release.

Up to `max_open` frames at a time, each message going to its own (by run and seq): a frame's first message (index
0) carries what it runs by (envelope.FrameSettings: the cut, the seed, the sampling, the flow, the guidance),
checked here; a new frame beyond max_open replaces the oldest left unfinished, and a frame of another run (a
restarted prefix) every open one (their prefix gave them up and counted them). The flow starts once the reasoning is over (the last token fed when it is
fed) and, with guidance, the route-free prompt and its fed reasoning are in.
A frame whose message does not fit (non-finite boundary, damaged bytes, a message out of turn or missing) is
refused: `handle` returns the refusal to count and a REFUSED answer for the prefix, which then stops waiting.
"""

from __future__ import annotations

import time
from collections import OrderedDict
from dataclasses import dataclass, field

from ...errors import ConfigError, HybridVLAError, InputError, expect
from ...model.plugins.alpamayo.reference import AlpamayoResult
from ..scheduling.partition import check_partition
from ..expert_split.crossings import GUIDED, ExpertState, PromptState, TokensState
from .envelope import ABORT, CROSSING, REFUSED, Back, FrameSettings, Tag, decode_forward, encode_back, forward_tag
from .prefix_server import check_settings
from ..expert_split.suffix import SuffixSide


@dataclass
class SuffixFrame:
    """A finished frame."""
    tag: Tag
    settings: FrameSettings
    result: AlpamayoResult
    end: str                         # why the reasoning ended: stop_token or max_tokens
    times: dict                      # side -> phase -> ms (the prefix's as its last message said)


@dataclass
class SuffixReply:
    answers: list[bytes] = field(default_factory=list)    # for the prefix, in order
    finished: SuffixFrame | None = None
    refused: tuple[Tag, str, str] | None = None           # (frame, reason, message): counted by the caller


class _Open:
    """The frame in progress here and where its exchange stands."""

    def __init__(self, model, tag: Tag, settings: FrameSettings):
        self.tag, self.settings = tag, settings
        self.side = SuffixSide(model, settings.partition, settings.seed, settings.sampling)
        self.next_index, self.answers = 1, 0
        self.to_feed = self.guided_fed = 0          # tokens the prefix feeds, guided TokensStates taken
        self.unguided_prompt = self.unguided_fed = False
        self.flow_started = False
        self.times = {"prefill": 0.0, "decode": 0.0, "unguided": 0.0, "flow_setup": 0.0, "expert": 0.0,
                      "trajectory": 0.0}
        self.prefix_times: dict = {}

    def timed(self, phase: str, fn, *args):
        start = time.perf_counter()
        out = fn(*args)
        self.times[phase] += (time.perf_counter() - start) * 1e3
        return out

    def reasoning_over(self) -> bool:
        return self.side.done and self.guided_fed == self.to_feed

    def unguided_in(self) -> bool:
        return not self.settings.guidance or (self.unguided_prompt and (self.to_feed == 0 or self.unguided_fed))


class AlpamayoSuffixServer:
    def __init__(self, model, max_open: int = 1):
        expect(max_open >= 1, ConfigError, f"max_open={max_open!r}: at least one frame open")
        self.model, self.max_open = model, max_open
        self.open: OrderedDict[tuple[int, int], _Open] = OrderedDict()   # (run, seq) -> a frame in progress
        self.replaced = 0          # frames left unfinished by a new one (their prefix counted them)
        self.aborted = 0           # frames the prefix gave up (ABORT)

    @property
    def num_blocks(self) -> int:
        return self.model.config.vlm.text_config.num_hidden_layers

    def handle(self, payload) -> SuffixReply:
        """One forward message -> the answers, a finished frame or a refusal. InputError only when the bytes do
        not even name a frame (nothing to answer; the caller counts it)."""
        tag = forward_tag(payload)
        if tag is None:
            decode_forward(payload)   # raises what is wrong: an old format (old_message), another model kind, ...
            raise InputError("split Alpamayo forward message: no readable head")
        try:
            return self._handle(decode_forward(payload))
        except HybridVLAError as exc:
            return self._refuse(tag, getattr(exc, "reason", None) or "invalid_boundary", str(exc))

    def _refuse(self, tag: Tag, reason: str, message: str) -> SuffixReply:
        frame = self.open.pop((tag.run, tag.seq), None)
        index = frame.answers if frame is not None else 0
        answer = encode_back(Back(tag, index, REFUSED, reason=reason, message=message))
        return SuffixReply([answer], refused=(tag, reason, message))

    def _handle(self, message) -> SuffixReply:
        tag = message.tag
        frame = self.open.get((tag.run, tag.seq))
        if message.kind == ABORT:
            if frame is not None:
                del self.open[tag.run, tag.seq]
                self.aborted += 1
            return SuffixReply()
        if message.index == 0:
            return self._open(message)
        expect(frame is not None, InputError, f"frame {tag.seq}: message {message.index} of a frame not open here (its first "
                                 f"message never came, or this suffix restarted)")
        expect(message.index == frame.next_index, InputError,
               f"frame {tag.seq}: message {message.index}, expected {frame.next_index} (one went missing)")
        frame.next_index += 1
        frame.prefix_times = message.times
        return self._step(frame, message.state)

    def _open(self, message) -> SuffixReply:
        s = message.settings
        check_partition(s.partition, self.num_blocks, "split Alpamayo frame's cut")
        check_settings(self.model, s.sampling, s.flow, s.guidance)
        state = message.state
        expect(isinstance(state, PromptState) and state.stream == GUIDED, InputError,
               f"frame {message.tag.seq}: first message a {type(state).__name__}, expected the guided PromptState")
        tag = message.tag
        self.open.pop((tag.run, tag.seq), None)   # its first message again: it starts over
        for key in [k for k in self.open if k[0] != tag.run]:   # a restarted prefix gave its frames up
            del self.open[key]
            self.replaced += 1
        while len(self.open) >= self.max_open:   # the oldest left unfinished
            self.open.popitem(last=False)
            self.replaced += 1
        self.open[tag.run, tag.seq] = frame = _Open(self.model, tag, s)
        frame.prefix_times = message.times
        return self._step(frame, state)

    def _step(self, frame: _Open, state) -> SuffixReply:
        reply = SuffixReply()
        if isinstance(state, ExpertState):
            expect(frame.flow_started, InputError, f"frame {frame.tag.seq}: an expert state before the flow began")
            following = frame.timed("expert", frame.side.expert_step, state)
            if following is None:
                return self._finish(frame)
            return self._answer(frame, reply, following)
        expect(not frame.flow_started and isinstance(state, (PromptState, TokensState)), InputError,
               f"frame {frame.tag.seq}: a {type(state).__name__} during the flow")
        if state.stream == GUIDED:
            self._guided(frame, state, reply)
        else:
            self._unguided(frame, state)
        if frame.reasoning_over() and frame.unguided_in():
            frame.flow_started = True
            self._answer(frame, reply, frame.timed("flow_setup", frame.side.start_flow, frame.settings.flow))
        return reply

    def _guided(self, frame: _Open, state, reply: SuffixReply) -> None:
        if isinstance(state, PromptState):
            expect(frame.next_index == 1 and not frame.side.tokens, InputError,
                   f"frame {frame.tag.seq}: a second guided prompt")
            choice = frame.timed("prefill", frame.side.prompt, state)
        else:
            expect(frame.guided_fed < frame.to_feed, InputError, f"frame {frame.tag.seq}: a fed token not chosen")
            frame.guided_fed += 1
            choice = frame.timed("decode", frame.side.step, state)
        if choice is not None:
            frame.to_feed += int(choice.feed)
            self._answer(frame, reply, choice)

    def _unguided(self, frame: _Open, state) -> None:
        when = "before the reasoning ended" if frame.settings.guidance else "without guidance"
        expect(frame.settings.guidance and frame.reasoning_over(), InputError,
               f"frame {frame.tag.seq}: a route-free state {when}")
        if isinstance(state, PromptState):
            expect(not frame.unguided_prompt, InputError, f"frame {frame.tag.seq}: a second route-free prompt")
            frame.unguided_prompt = True
            frame.timed("unguided", frame.side.prompt, state)
        else:
            expect(frame.unguided_prompt and not frame.unguided_fed, InputError,
                   f"frame {frame.tag.seq}: route-free tokens out of turn")
            frame.unguided_fed = True
            frame.timed("unguided", frame.side.step, state)

    def _answer(self, frame: _Open, reply: SuffixReply, state) -> SuffixReply:
        reply.answers.append(encode_back(Back(frame.tag, frame.answers, CROSSING, state)))
        frame.answers += 1
        return reply

    def _finish(self, frame: _Open) -> SuffixReply:
        actions, xyz, rot = frame.timed("trajectory", frame.side.trajectory)   # NonFiniteError: refused
        side = frame.side
        stopped = bool(side.tokens) and side.tokens[-1] == side.stop_id
        result = AlpamayoResult(xyz[0], rot[0], actions[0].float(), list(side.tokens), stopped)
        del self.open[frame.tag.run, frame.tag.seq]
        times = {"prefix": dict(frame.prefix_times), "suffix": dict(frame.times)}
        return SuffixReply(finished=SuffixFrame(frame.tag, frame.settings, result,
                                                "stop_token" if stopped else "max_tokens", times))
