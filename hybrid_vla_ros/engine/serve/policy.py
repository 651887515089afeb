"""What a prefix's serving loop does next (loop.py), under its lock: the scheduling policies of the one path.

Both take an answer in before anything else, then fail a flight past its deadline, oldest first, and only then start
work: OnePerForward starts the oldest waiting frame while fewer than `max_open` are in flight (a forward carries one
frame: the Alpamayo releases; frame t+1's prefill runs while frame t decodes); Packed is ActionFlow's packing
(engine/actionflow/packing.py): groups of up to `pack` frames, each step of a group one forward carrying the newest
frame's prefill beside one decode row of every frame in flight in it, and a group steps only once its last step's
answer is in (with two groups, one steps on the prefix while the other's step runs on the suffix).
Events: ("answer", flight, answer), ("late", flight, None), ("frame", item, None), ("step", group index, None).
"""

from __future__ import annotations

from typing import Callable


def answered_or_late(loop, now: float):
    """The oldest flight with an answer in, or past its deadline (a flight with an answer is never late)."""
    for flight in loop.flights.values():
        if flight.answers:
            return "answer", flight, flight.answers.popleft()
        if flight.due and now >= flight.deadline:
            return "late", flight, None
    return None


class OnePerForward:
    def __init__(self, max_open: int):
        self.max_open = max_open

    def choose(self, loop, now: float):
        event = answered_or_late(loop, now)
        if event is None and loop.inbox and len(loop.flights) < self.max_open:
            return "frame", loop.inbox.popleft(), None
        return event


class Packed:
    def __init__(self, groups: list, pack: int, admitting: Callable[[], bool] = lambda: True):
        """groups: ActionFlow groups (`submit`, `flight`, `waiting`, `busy`); admitting(): False while nothing may be
        admitted (a partition change waiting for the drain)."""
        self.groups, self.pack, self.admitting, self.turn = groups, pack, admitting, 0

    def choose(self, loop, now: float):
        """Round robin over the groups not awaiting an answer: one with frames in flight, or one that takes the oldest
        waiting frame."""
        event = answered_or_late(loop, now)
        if event is not None:
            return event
        busy = {flight.group for flight in loop.flights.values()}
        for k in range(len(self.groups)):
            index = (self.turn + k) % len(self.groups)
            group = self.groups[index]
            if index in busy:
                continue
            if loop.inbox and self.admitting() and len(group.flight) + len(group.waiting) < self.pack:
                group.submit(loop.inbox.popleft())
            if group.busy:
                self.turn = index + 1
                return "step", index, None
        return None
