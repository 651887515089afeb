"""The prefix side of a split Alpamayo frame served across processes (ROS-free): a frame in (its AlpamayoInputs),
the prefill's boundary out as bytes, then each answer of the suffix (a sampled token, an Euler step's action
state: envelope.py: HVLM bytes) taken in and answered with the next crossing, until the frame's last expert
state is out. The prefix node's engine for an Alpamayo release; its counterpart is suffix_server.py.

`serve` runs a whole frame on the caller's thread (the node's worker) and waits for each answer, which another
thread hands in through `answer`; `begin` and `step` let a caller keep several frames open at once (each answer
goes to its own frame, by run and seq: a Conversation), on the one serving loop (engine/serve/: the OnePerForward
policy, `max_open` frames in flight). The prefix decides what the frame runs by (the cut, the
frame's seed, the sampling, the flow and the guidance: envelope.FrameSettings) and sends it with the frame's first
message; the suffix follows it. Once its last expert state is out the prefix is done with the frame (the suffix
finishes the last step and the trajectory while the prefix may already prefill the next frame).
A frame waits up to `timeout_s` for a suffix to be linked (suffix_absent; the caller says how to tell). It fails,
and `serve` says why, when an answer does not come within `timeout_s` (suffix_timeout), is not
what the frame expects next (invalid_answer), carries a token outside the vocabulary (invalid_tokens) or a
non-finite action state (nonfinite_boundary): counted here, the suffix told to drop the frame (ABORT). A frame
the suffix refuses (its answer REFUSED) is counted there, not here.
"""

from __future__ import annotations

import secrets
import time
from dataclasses import dataclass

import torch

from ...errors import ConfigError, HybridVLAError, InputError, expect
from ...model.plugins.alpamayo.config import check_guidance
from ...model.plugins.alpamayo.decode import Sampling
from ...model.plugins.alpamayo.flow import FlowSettings
from ...model.plugins.alpamayo.reference import AlpamayoInputs, check_inputs, fused_prompt
from ..decode.sampling import step_seed
from ..expert_split.crossings import GUIDED, ActionState, TokenChoice
from .conversation import Conversation, FrameLost, OutgoingFrame, PrefixOutcome
from .envelope import ABORT, Back, FrameSettings, Tag, decode_back
from ..expert_split.prefix import PrefixSide
from ..expert_split.vision_cache import VisionCache
from ..expert_split.runner import Cut
from ..serve.loop import ServeLoop
from ..serve.policy import OnePerForward

DEFAULT_TIMEOUT_S = 60.0
MAX_STEPS = 1000


@dataclass
class PrefixJob:
    """One frame for the prefix: the model's inputs and where the frame stands."""
    inputs: AlpamayoInputs
    seq: int
    stamp_ns: int
    arrival_ns: int = 0


def check_settings(model, sampling: Sampling, flow: FlowSettings, guidance: bool) -> None:
    sampling.check()
    flow.check()
    expect(flow.steps <= MAX_STEPS, ConfigError, f"flow matching: steps={flow.steps}, at most {MAX_STEPS}")
    if guidance:
        check_guidance(model.config)


class AlpamayoPrefixServer(Cut):
    cut_name = "Alpamayo prefix partition"

    def __init__(self, model, partition: int, sampling: Sampling, flow: FlowSettings, guidance: bool = False,
                 seed: int = 0, timeout_s: float = DEFAULT_TIMEOUT_S, max_open: int = 1, capacity: int = 1,
                 keep_newest: bool = True):
        """seed: each frame's sampler seed is drawn from it and the frame's stamp (engine/decode/sampling.py
        step_seed): reproducible on any process. timeout_s: the longest wait for one answer of the suffix.
        max_open: frames in flight at once (`next_event` starts no more); capacity: frames waiting to start;
        keep_newest: a frame submitted to a full inbox pushes the oldest waiting one out (capacity 1: the newest
        wins), else it is turned away (a lossless queue keeps what came first)."""
        check_settings(model, sampling, flow, guidance)
        expect(timeout_s > 0, ConfigError, f"timeout_s={timeout_s!r}: expected > 0 seconds")
        expect(max_open >= 1 and capacity >= 1, ConfigError,
               f"max_open={max_open!r}, capacity={capacity!r}: expected at least 1 each")
        self.max_open, self.policy = max_open, OnePerForward(max_open)
        self.loop = ServeLoop(capacity, keep_newest)   # frames waiting; frames in flight (Conversation, by run, seq)
        self.cond, self.inbox, self.open = self.loop.cond, self.loop.inbox, self.loop.flights
        self.model, self.sampling, self.flow, self.guidance = model, sampling, flow, guidance
        self.seed, self.timeout_s = seed, timeout_s
        self.partition = partition
        self.run = secrets.randbits(63)
        self.vision = VisionCache()   # each keyed image encoded once, kept while the next window can read it

    @property
    def stale_answers(self) -> int:
        """Answers for no frame in flight (late, or of an earlier run)."""
        return self.loop.stale

    @property
    def closed(self) -> bool:
        return self.loop.closed

    def set_partition(self, value: int) -> None:
        """Taken at the next frame (a frame runs at the cut it started with, on both sides)."""
        self.partition = value

    def settings_for(self, stamp_ns: int, routed: bool) -> FrameSettings:
        """What a frame runs by; guidance only for a frame whose prompt has a route span (the route-free prompt
        of one without is the same prompt)."""
        return FrameSettings(self.partition, step_seed(self.seed, stamp_ns, 0), self.sampling, self.flow,
                             self.guidance and routed)

    def routed(self, inputs: AlpamayoInputs) -> bool:
        """Whether the frame's prompt has a route span (its <|route_start|>): only such a frame is guided."""
        start = self.model.config.special_ids.get("route_start")
        ids = inputs.input_ids
        return start is not None and isinstance(ids, torch.Tensor) and bool((ids == start).any())

    # ---- other threads ---------------------------------------------------------------------------------
    def answer(self, payload) -> None:
        """One answer of the suffix (bytes): kept for the frame in flight, else counted stale. InputError when
        damaged (the caller counts it)."""
        back = decode_back(payload)
        self.loop.deliver((back.tag.run, back.tag.seq), back)

    def submit(self, item) -> tuple:
        """A frame to start (the node's, with a stamp_ns) -> (the frame lost, why): (None, "") when none was; the
        oldest waiting (keep_newest) or this one turned away when the inbox was full ("full"); this one after close
        ("shutdown"). The caller counts it."""
        return self.loop.submit(item)

    def next_event(self, wait_s: float | None = None):
        """What the worker does next, oldest frame first: ("answer", conversation, back) for an open frame with an
        answer in; ("late", conversation, None) for one past its deadline; ("frame", item, None) when fewer than
        max_open are open and one waits; None once closed (or after wait_s)."""
        return self.loop.next_event(self.policy.choose, wait_s)

    def close(self) -> list:
        """No frame starts or steps after this; -> the frames that waited to start (the caller counts them)."""
        return self.loop.close()

    def give_up_open(self) -> list[PrefixOutcome]:
        """After close: every frame still in flight lost as `shutdown` (the suffix told to let it go)."""
        with self.cond:
            open_now = list(self.open.values())
        return [c.outcome for c in open_now   # a frame the worker ended meanwhile is the worker's to report
                if self._end(c, FrameLost("shutdown", f"frame {c.frame.tag.seq}: the Alpamayo prefix closed"))]

    # ---- the worker's thread -----------------------------------------------------------------------------
    def serve(self, job: PrefixJob, send, linked=None) -> PrefixOutcome:
        """The whole frame: every crossing out through send(bytes), every answer awaited. Never raises for a
        frame's own failure: the outcome says why. linked: () -> bool, whether a suffix is there to read the
        crossings and answer them (None: assumed); the frame waits for one up to timeout_s (suffix_absent)."""
        conversation = self.begin(job, send, linked)
        while conversation.outcome is None:
            try:
                back = self._wait(conversation)
            except FrameLost as closed:
                self._end(conversation, closed)
                break
            self.step(conversation, back)
        return conversation.outcome

    def begin(self, job: PrefixJob, send, linked=None) -> "Conversation":
        """A frame opened: its prompt out (its outcome set at once when it cannot start). Several may be open;
        each answer goes to its own frame (by run and seq), taken in by `step` in its frame's order."""
        tag = Tag(self.run, job.seq, job.stamp_ns, job.arrival_ns)
        frame = OutgoingFrame(tag, self.settings_for(job.stamp_ns, self.routed(job.inputs)), send)
        conversation = Conversation(frame, self.timeout_s)
        # open before the first message: its answers may come before send() returns
        expect(self.loop.open(conversation), InputError, f"frame {tag.seq} is in flight already")
        try:
            check_inputs(self.model, job.inputs)
            self._await_suffix(frame, linked)
            conversation.start(self._exchange(frame, job.inputs))
        except HybridVLAError as exc:
            self._end(conversation, exc)
        except BaseException:   # not the frame's own failure (a bug, the publisher gone): nothing left open
            self._close(conversation)
            raise
        return conversation

    def step(self, conversation: "Conversation", back: Back | None) -> None:
        """One answer taken in (None: none came in time): its next crossings out, or the frame's outcome set."""
        try:
            if back is None:
                raise FrameLost("suffix_timeout", f"frame {conversation.frame.tag.seq}: no answer from the suffix "
                                                  f"within {self.timeout_s:g} s (is it running?)")
            conversation.take(back)
            if conversation.awaiting is None:
                self._end(conversation, None)
        except HybridVLAError as exc:
            self._end(conversation, exc)
        except BaseException:
            self._close(conversation)
            raise

    def _close(self, conversation: "Conversation") -> bool:
        """Out of `open`; False when it was out already (ended once: by the worker or by give_up_open)."""
        with self.cond:
            if not self.loop.settle(conversation):
                return False
            conversation.frame.ended = True
            return True

    def _end(self, conversation: "Conversation", exc: HybridVLAError | None) -> bool:
        """The frame's outcome set; False when another thread ended it first (it set the outcome)."""
        frame = conversation.frame
        if not self._close(conversation):
            return False
        if exc is None:
            conversation.outcome = PrefixOutcome(frame.tag, True, times=frame.times, settings=frame.settings,
                                                 images=frame.images)
            return True
        if isinstance(exc, FrameLost):
            reason, counted_here = exc.reason, exc.counted_here
        else:   # bad inputs, a token outside the vocabulary, a non-finite action state
            reason = getattr(exc, "reason", None) or ("invalid_input" if frame.index == 0 else "invalid_answer")
            counted_here = True
        if counted_here and frame.index > 0:   # the suffix holds the frame: let it go
            frame.send(None, ABORT)
        conversation.outcome = PrefixOutcome(frame.tag, False, reason, str(exc), counted_here, frame.times,
                                             frame.settings)
        return True

    def _exchange(self, frame: OutgoingFrame, inputs: AlpamayoInputs):
        """The frame's crossings, as a generator: it sends what is due and yields the kind of answer it waits for
        (the answer is sent back into it)."""
        side = PrefixSide(self.model, frame.settings.partition, self.vision)
        prompt = fused_prompt(self.model, inputs)
        history = (inputs.ego_history_xyz[:, 0], inputs.ego_history_rot[:, 0])   # (1, T, 3), (1, T, 3, 3)
        state = frame.timed("prefill", side.prompt, prompt, GUIDED, history)
        frame.images = {"encoded": self.vision.encoded, "reused": self.vision.reused} \
            if prompt.image_keys is not None else {"encoded": int(prompt.image_grid_thw.shape[0]), "reused": 0}
        frame.send(state)
        while True:
            choice = yield TokenChoice
            if side.take(choice):   # InputError: a token outside the vocabulary
                frame.send(frame.timed("decode", side.feed_token))
            if choice.done:
                break
        if frame.settings.guidance:
            frame.send(frame.timed("unguided", side.unguided_prompt, prompt, history))
            if side.held:
                frame.send(frame.timed("unguided", side.unguided_feed))
        for _ in range(frame.settings.flow.steps):
            action = yield ActionState
            frame.send(frame.timed("expert", side.expert_step, action))   # NonFiniteError: a bad action state

    def _await_suffix(self, frame: OutgoingFrame, linked) -> None:
        """Before a frame's first crossing: a suffix linked both ways (a reliable message sent before its reader is
        matched is lost, and the frame would wait timeout_s for an answer: a graph's first frame at start-up)."""
        end = time.monotonic() + self.timeout_s
        while linked is not None and not linked():   # not under the lock: answer() keeps taking answers
            with self.cond:
                if self.closed:
                    raise FrameLost("shutdown", f"frame {frame.tag.seq}: the Alpamayo prefix closed")
                if time.monotonic() >= end:
                    raise FrameLost("suffix_absent", f"frame {frame.tag.seq}: no suffix linked to the prefix within "
                                                     f"{self.timeout_s:g} s (is it running?)")
                self.cond.wait(0.05)

    def _wait(self, conversation: "Conversation") -> Back | None:
        """The frame's next answer; None when none came by its deadline. FrameLost once closed."""
        with self.cond:
            while not conversation.answers:
                left = conversation.deadline - time.monotonic()
                if self.closed:
                    raise FrameLost("shutdown", f"frame {conversation.frame.tag.seq}: the Alpamayo prefix closed")
                if left <= 0:
                    return None
                self.cond.wait(min(left, 0.05))
            return conversation.answers.popleft()
