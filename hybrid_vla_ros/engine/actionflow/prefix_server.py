"""ActionFlow served by two stages that share only bytes (ROS-free): the engine of the prefix and suffix nodes
when the model decodes its action as tokens (engine/actionflow/packing.py).

PackedPrefixServer (the prefix node): frames in; each packed step out as bytes (engine/actionflow/codec.py); the
suffix's next tokens back as bytes, on the one serving loop (engine/serve/: the Packed policy). `groups` independent
groups of up to `pack` frames share one prefix-side KV ring (slots = groups x pack). A group's next step needs its previous step's tokens, so one group leaves
one side idle every step; with two, the prefix runs group b's step while the suffix runs group a's. A step
whose tokens do not come back within `token_timeout_s` fails its frames (slots freed; the others go on);
AUTO (-1) derives it from the measured token round trips (engine/pipeline/limits.py: a real-size CPU suffix
answers in seconds, a fixed 2 s failed every step).
A partition change waits for a drain: nothing is admitted until no frame is in flight, then the prefix side
is rebuilt at the new p (each step's header tells the suffix its cut, so it follows by itself).

Its counterpart in the suffix node is engine/actionflow/suffix_server.py.
"""

from __future__ import annotations

import secrets
import time
from dataclasses import dataclass

import torch

from ...errors import ConfigError, expect
from ...model.vla import VLAModel
from ...types import Frame
from .packing import ActionFlow, ActionResult
from .forward import PackedSide, PackedState, SideWeights
from .codec import decode_tokens, encode_state
from ..decode.decoder import TokenDecoder
from ..decode.policy import DecodePolicy
from ..pipeline.limits import AUTO, TOKEN_FIRST_S, TOKEN_TIMEOUT, Limit, Recent, resolve
from ..scheduling.partition import check_partition
from ..serve.loop import Flight, ServeLoop
from ..serve.policy import Packed

GRACE_S = 0.25  # after a step's deadline, for answers sent before it to arrive (DDS: milliseconds)
MAX_GROUPS = 8
MAX_SLOTS = 256


@dataclass
class SentStep:
    """One packed step handed to the suffix: its bytes and what a scheduler needs to know of it."""
    payload: bytes
    step: int
    group: int
    rows: int          # packed rows (prefill tokens + one per decode row)
    frames: int
    prefill_seq: int | None   # the frame whose prefill it carried, if any
    partition: int
    prefix_ms: float
    stamp_ns: int      # the newest frame in it (the prefilled one when there is one)

    @property
    def prefill(self) -> bool:
        return self.prefill_seq is not None


class AwaitedStep(Flight):
    """A packed step sent, awaiting its tokens: its group, its state, the timeout it was sent with."""

    def __init__(self, step: int, group: int, state: PackedState, limit_s: float):
        super().__init__(step, limit_s + max(GRACE_S, 0.25 * limit_s))
        self.group, self.state, self.limit_s = group, state, limit_s


@dataclass
class Lost:
    """A frame that produced no action: why (a diagnostics reason), in words, and its stamp."""
    reason: str
    message: str
    stamp_ns: int


class PackedPrefixServer:
    def __init__(self, model: VLAModel, pack: int, groups: int, partition: int, policy: str = "latest",
                 capacity: int = 1, token_timeout_s: float = AUTO, prepare=None, zone: tuple[int, int] | None = None,
                 dtype: torch.dtype = torch.float32, decode: DecodePolicy | None = None):
        """zone: the partitions a move may choose; their blocks are read now (a checkpoint model). dtype: the
        prefix side's blocks and KV ring, hence the boundary's (embeddings and vision stay the model's).
        token_timeout_s: AUTO, the node's shipped default (a fixed 1 s failed tiny models' steps on a loaded 2-core
        machine; a real-size step takes seconds). decode: when a frame ends (a stop id, max_tokens), so its slot is
        freed; the suffix picks the tokens by the same policy (engine/decode/)."""
        expect(isinstance(groups, int) and 1 <= groups <= MAX_GROUPS, ConfigError,
               f"pack_groups={groups!r}: expected 1..{MAX_GROUPS} independent groups of frames")
        expect(pack * groups <= MAX_SLOTS, ConfigError,
               f"pack {pack} x pack_groups {groups} = {pack * groups} frames in flight, above {MAX_SLOTS}")
        expect(token_timeout_s > 0 or token_timeout_s == AUTO, ConfigError,
               f"token_timeout_s={token_timeout_s!r}: expected > 0 (seconds) or {AUTO:g} (auto)")
        self.model, self.pack, self.slots = model, pack, pack * groups
        self.tokens = TokenDecoder(model, decode)
        self.capacity = 1 if policy == "latest" else capacity
        self.token_timeout_s = token_timeout_s
        self.round_trips = Recent()   # seconds from a step sent to its tokens back
        self.zone = zone or (0, model.num_blocks)
        self.weights = SideWeights(model, dtype)   # placed once, kept across partition moves
        self.weights.load(0, self.zone[1])
        side = self._side(check_partition(partition, model.num_blocks, "packed prefix partition"))
        self.groups = [ActionFlow(model, pack, prefix_side=side, with_suffix=False, prepare=prepare, decode=decode)
                       for _ in range(groups)]
        self.loop = ServeLoop(self.capacity)   # frames waiting; steps awaiting tokens (AwaitedStep, by step id)
        self.policy = Packed(self.groups, pack, admitting=lambda: self.pending_partition is None)
        self.cond, self.inbox, self.awaiting = self.loop.cond, self.loop.inbox, self.loop.flights
        self.lost: list[Lost] = []
        self.completed: list[ActionResult] = []
        self.pending_partition: int | None = None
        self.step_no = 0
        # Step ids on the wire start at a random base per server (a reconfigure or a respawn makes a new one):
        # a late answer to a step of an earlier run never matches a step of this one.
        self.run_base = secrets.randbits(62) << 1

    @property
    def stale_tokens(self) -> int:
        """Token messages for steps no longer awaited (timed out, repeated, of an earlier run)."""
        return self.loop.stale

    def _side(self, partition: int) -> PackedSide:
        return PackedSide(self.model, 0, partition, self.slots, self.tokens.slot_tokens, self.weights, self.tokens)

    def timeout(self) -> Limit:
        """The token timeout a step sent now gets: token_timeout_s, or auto: max(2 s, 5 x the longest recent round
        trip); TOKEN_FIRST_S until one was measured. Its warning: set below the measured round trip."""
        factor, floor_s = TOKEN_TIMEOUT
        return resolve("token_timeout_s", self.token_timeout_s, "s", self.round_trips.longest(), factor, floor_s,
                       "token_feedback_timeout", unmeasured_s=TOKEN_FIRST_S)

    @property
    def grace_s(self) -> float:
        return max(GRACE_S, 0.25 * self.timeout().seconds)

    @property
    def partition(self) -> int:
        return self.groups[0].partition

    @property
    def in_flight(self) -> int:
        return sum(len(g.flight) for g in self.groups)

    # ---- other threads: frames, tokens, partition requests -----------------------------------------------
    def submit(self, frame: Frame) -> tuple[Frame | None, str]:
        """-> (the frame lost, why): the one this displaced or pushed out when the inbox was full ("full"; latest: the
        one waiting; lossless: the oldest), this one after close ("shutdown"), (None, "") when none was."""
        return self.loop.submit(frame)

    def tokens_in(self, payload) -> None:
        """The suffix's answer to a step (bytes); an InputError when it is damaged."""
        tokens, step = decode_tokens(payload)
        self.loop.deliver(step, (tokens, time.monotonic()))

    def request_partition(self, partition: int) -> None:
        """Applied at the next drain (no frame in flight)."""
        check_partition(partition, self.model.num_blocks, "packed prefix partition")
        expect(self.zone[0] <= partition <= self.zone[1], ConfigError,
               f"packed prefix partition {partition} lies outside the dynamic zone {list(self.zone)}")
        with self.cond:
            self.pending_partition = None if partition == self.partition else partition
            self.cond.notify_all()

    set_partition = request_partition   # the stage interface the prefix node drives (partition_point)

    def close(self) -> None:
        """Stop serving; every frame still waiting or in flight is lost as `shutdown` (take_lost says which)."""
        waiting = self.loop.close()
        with self.cond:
            left = waiting + [f for g in self.groups for f in g.waiting] + \
                [e.frame for g in self.groups for e in g.flight.values()]
            self.lost += [Lost("shutdown", f"frame {f.seq}: the packed prefix closed", f.stamp_ns) for f in left]
            self.cond.notify_all()

    def take_lost(self) -> list[Lost]:
        with self.cond:
            lost, self.lost = self.lost, []
        return lost

    def take_completed(self) -> list[ActionResult]:
        with self.cond:
            done, self.completed = self.completed, []
        return done

    # ---- the prefix worker's thread ----------------------------------------------------------------------
    def next_group(self, wait_s: float | None = None) -> int | None:
        """Blocks until a group can step, -> its index; None once closed or after wait_s (None: no limit).
        Arrived tokens are applied and late steps failed on the way (the loop's events, oldest first), and a
        waiting partition change is made once nothing is in flight."""
        event = self.loop.next_event(self._choose, wait_s)
        return None if event is None else event[1]

    def _choose(self, loop: ServeLoop, now: float):
        """Under the loop's lock: every answer and late step settled, then the Packed policy's group to step."""
        while True:
            self._repartition()
            event = self.policy.choose(loop, now)
            if event is None or event[0] == "step":
                return event
            kind, flight, answer = event
            loop.settle(flight)
            if kind == "answer":
                self._apply_tokens(flight, *answer)
            else:
                self._fail_step(flight.group, flight.state, "token_feedback_timeout",
                                f"no action tokens for step {flight.key} within {flight.limit_s:g} s "
                                f"(is the suffix running and publishing ~/output/action_tokens?)")

    @property
    def idle(self) -> bool:
        """Nothing waiting, in flight or awaited."""
        with self.cond:
            return not (self.inbox or self.awaiting or any(g.busy for g in self.groups))

    def step(self, index: int) -> SentStep | None:
        """Group `index`'s packed step through blocks [0, p), as bytes for the suffix (None: nothing to run)."""
        group, t0 = self.groups[index], time.perf_counter()
        try:
            state = group.prefix_step()
        finally:  # a step that raised failed its frames in the group: reported as lost (step_failed)
            self._collect_failed(group)
        if state is None:
            return None
        limit_s = self.timeout().seconds
        with self.cond:
            self.step_no += 1
            step = self.run_base + self.step_no
            # one authority per frame: a suffix done after the deadline answers nothing and drops the step's
            # frames; this side gives them up (and counts them) only a grace later, when any answer sent
            # before the deadline has arrived (AwaitedStep's deadline)
            self.loop.open(AwaitedStep(step, index, state, limit_s))
        prefix_ms = (time.perf_counter() - t0) * 1e3
        deadline_ns = time.time_ns() + int(limit_s * 1e9)
        payload = encode_state(state, group.partition, step, self.slots, deadline_ns)
        prefill = next((s for s in state.segments if s.count > 1), None)
        return SentStep(payload, step, index, state.hidden.shape[0], len(state.segments),
                        prefill.seq if prefill else None, group.partition, prefix_ms,
                        prefill.stamp_ns if prefill else max(s.stamp_ns for s in state.segments))

    def _apply_tokens(self, flight: AwaitedStep, tokens: dict[int, int], when: float) -> None:
        self.round_trips.add(when - flight.sent_at)
        problem = self._check_tokens(flight.state, tokens)
        if problem:
            self._fail_step(flight.group, flight.state, "invalid_tokens", f"step {flight.key}: {problem}")
            return
        self.completed += self.groups[flight.group].finish(flight.state, tokens)

    def _check_tokens(self, state: PackedState, tokens: dict[int, int]) -> str:
        expected = {s.seq for s in state.segments}
        if set(tokens) != expected:
            return f"tokens for frames {sorted(tokens)}, the step carried {sorted(expected)}"
        vocab = self.tokens
        bad = {seq: t for seq, t in tokens.items() if not vocab.in_vocabulary(t)}
        return f"tokens {bad} outside the {vocab.label} [{vocab.base}, " \
               f"{vocab.base + vocab.size})" if bad else ""

    def _fail_step(self, index: int, state: PackedState, reason: str, message: str) -> None:
        group = self.groups[index]
        for seg in state.segments:
            if seg.seq in group.flight:
                group.release(seg.seq)
                self.lost.append(Lost(reason, f"frame {seg.seq}: {message}", seg.stamp_ns))

    def _collect_failed(self, group: ActionFlow) -> None:
        failed, group.failed = group.failed, []
        with self.cond:
            self.lost += [Lost(r.reason or "invalid_input", r.error, r.stamp_ns) for r in failed]

    def _repartition(self) -> None:
        if self.pending_partition is None or self.awaiting or self.in_flight:
            return
        side = self._side(self.pending_partition)
        for group in self.groups:
            group.prefix, group.partition = side, side.hi
        self.pending_partition = None
