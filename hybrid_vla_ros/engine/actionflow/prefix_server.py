"""ActionFlow served by two stages that share only bytes (ROS-free): the engine of the prefix and suffix nodes
when the model decodes its action as tokens (engine/actionflow/packing.py).

PackedPrefixServer (the prefix node): frames in; each packed step out as bytes (engine/actionflow/codec.py); the
suffix's next tokens back as bytes. `groups` independent groups of up to `pack` frames share one prefix-side
KV ring (slots = groups x pack). A group's next step needs its previous step's tokens, so one group leaves
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
import threading
import time
from collections import deque
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

POLL_S = 0.05
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
        self.policy, self.capacity = policy, (1 if policy == "latest" else capacity)
        self.token_timeout_s = token_timeout_s
        self.round_trips = Recent()   # seconds from a step sent to its tokens back
        self.zone = zone or (0, model.num_blocks)
        self.weights = SideWeights(model, dtype)   # placed once, kept across partition moves
        self.weights.load(0, self.zone[1])
        side = self._side(check_partition(partition, model.num_blocks, "packed prefix partition"))
        self.groups = [ActionFlow(model, pack, prefix_side=side, with_suffix=False, prepare=prepare, decode=decode)
                       for _ in range(groups)]
        self.cond = threading.Condition()
        self.inbox: deque[Frame] = deque()
        self.arrived: deque[tuple[int, dict[int, int], float]] = deque()  # (step, tokens, when) from the suffix
        # step -> (group, state, deadline, sent at, its timeout in s)
        self.awaiting: dict[int, tuple[int, PackedState, float, float, float]] = {}
        self.lost: list[Lost] = []
        self.completed: list[ActionResult] = []
        self.pending_partition: int | None = None
        self.step_no, self.turn, self.closed = 0, 0, False
        # Step ids on the wire start at a random base per server (a reconfigure or a respawn makes a new one):
        # a late answer to a step of an earlier run never matches a step of this one.
        self.run_base = secrets.randbits(62) << 1
        self.stale_tokens = 0   # token messages for steps no longer awaited (timed out, repeated)

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
    def submit(self, frame: Frame) -> Frame | None:
        """-> the frame this one displaced or pushed out (latest: the one waiting; lossless: the oldest)."""
        with self.cond:
            dropped = self.inbox.popleft() if len(self.inbox) >= self.capacity else None
            self.inbox.append(frame)
            self.cond.notify_all()
        return dropped

    def tokens_in(self, payload) -> None:
        """The suffix's answer to a step (bytes); an InputError when it is damaged."""
        tokens, step = decode_tokens(payload)
        with self.cond:
            self.arrived.append((step, tokens, time.monotonic()))
            self.cond.notify_all()

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
        with self.cond:
            self.closed = True
            left = list(self.inbox) + [f for g in self.groups for f in g.waiting] + \
                [e.frame for g in self.groups for e in g.flight.values()]
            self.inbox.clear()
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
        Arrived tokens are applied and late ones expired on the way, and a waiting partition change is made
        once nothing is in flight."""
        end = None if wait_s is None else time.monotonic() + wait_s
        with self.cond:
            while not self.closed:
                self._apply_tokens()
                self._expire(time.monotonic())
                self._repartition()
                group = self._ready_group()
                if group is not None:
                    return group
                if end is not None and time.monotonic() >= end:
                    return None
                self.cond.wait(POLL_S if end is None else max(0.0, min(POLL_S, end - time.monotonic())))
        return None

    @property
    def idle(self) -> bool:
        """Nothing waiting, in flight or awaited."""
        with self.cond:
            return not (self.inbox or self.awaiting or self.arrived or any(g.busy for g in self.groups))

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
            # before the deadline has arrived
            now = time.monotonic()
            self.awaiting[step] = (index, state, now + limit_s + max(GRACE_S, 0.25 * limit_s), now, limit_s)
        prefix_ms = (time.perf_counter() - t0) * 1e3
        deadline_ns = time.time_ns() + int(limit_s * 1e9)
        payload = encode_state(state, group.partition, step, self.slots, deadline_ns)
        prefill = next((s for s in state.segments if s.count > 1), None)
        return SentStep(payload, step, index, state.hidden.shape[0], len(state.segments),
                        prefill.seq if prefill else None, group.partition, prefix_ms,
                        prefill.stamp_ns if prefill else max(s.stamp_ns for s in state.segments))

    def _ready_group(self) -> int | None:
        """Round robin over groups not waiting for tokens: one with frames in flight, or one that can admit
        the oldest frame of the inbox (not while a partition change waits for the drain)."""
        busy = {entry[0] for entry in self.awaiting.values()}
        for k in range(len(self.groups)):
            index = (self.turn + k) % len(self.groups)
            group = self.groups[index]
            if index in busy:
                continue
            if self.inbox and self.pending_partition is None and len(group.flight) + len(group.waiting) < self.pack:
                group.submit(self.inbox.popleft())
            if group.busy:
                self.turn = index + 1
                return index
        return None

    def _apply_tokens(self) -> None:
        while self.arrived:
            step, tokens, when = self.arrived.popleft()
            waiting = self.awaiting.pop(step, None)
            if waiting is None:
                self.stale_tokens += 1
                continue
            index, state, _, sent_at, _ = waiting
            self.round_trips.add(when - sent_at)
            problem = self._check_tokens(state, tokens)
            if problem:
                self._fail_step(index, state, "invalid_tokens", f"step {step}: {problem}")
                continue
            group = self.groups[index]
            self.completed += group.finish(state, tokens)

    def _check_tokens(self, state: PackedState, tokens: dict[int, int]) -> str:
        expected = {s.seq for s in state.segments}
        if set(tokens) != expected:
            return f"tokens for frames {sorted(tokens)}, the step carried {sorted(expected)}"
        vocab = self.tokens
        bad = {seq: t for seq, t in tokens.items() if not vocab.in_vocabulary(t)}
        return f"tokens {bad} outside the {vocab.label} [{vocab.base}, " \
               f"{vocab.base + vocab.size})" if bad else ""

    def _expire(self, now: float) -> None:
        for step, (index, state, deadline, _, limit_s) in list(self.awaiting.items()):
            if now > deadline:
                del self.awaiting[step]
                self._fail_step(index, state, "token_feedback_timeout",
                                f"no action tokens for step {step} within {limit_s:g} s "
                                f"(is the suffix running and publishing ~/output/action_tokens?)")

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
