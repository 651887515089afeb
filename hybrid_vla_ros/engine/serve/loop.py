"""The prefix's serving loop for a model kind whose suffix answers back (ROS-free).

Frames wait in an inbox (bounded: the newest pushes the oldest out, or a lossless queue turns the new one away). What
was sent and awaits the suffix's answer is a Flight, keyed as the answers name it (a packed step's id; an Alpamayo
frame's run and seq); an answer is routed to its flight on arrival, and one for no flight is counted stale. A flight
whose answer is not in by its deadline is the policy's to report. What the worker does next is the policy's choice
(policy.py), made under the loop's one lock: an answer to take in, a late flight to fail, a new frame to start, a group
to step. The node's threads call `submit` and `deliver`; the worker's thread calls `next_event`.
"""

from __future__ import annotations

import threading
import time
from collections import deque
from typing import Callable, Hashable

POLL_S = 0.05


class Flight:
    """Sent and awaiting the suffix's answers: those in (arrival order) and when the next is due by."""

    def __init__(self, key: Hashable, timeout_s: float, due: bool = True):
        """due: answers are due now (False until the first message is out: its deadline does not run before)."""
        self.key, self.timeout_s, self.due = key, timeout_s, due
        self.answers: deque = deque()
        self.sent_at = time.monotonic()
        self.deadline = self.sent_at + timeout_s

    def renew(self) -> None:
        """The next answer is due timeout_s from now (after a message went out)."""
        self.deadline, self.due = time.monotonic() + self.timeout_s, True


class ServeLoop:
    def __init__(self, capacity: int = 1, keep_newest: bool = True):
        """capacity: frames waiting to start; keep_newest: a frame submitted to a full inbox pushes the oldest out
        (capacity 1: the newest wins), else it is turned away (a lossless queue keeps what came first)."""
        self.capacity, self.keep_newest = capacity, keep_newest
        self.cond = threading.Condition()
        self.inbox: deque = deque()
        self.flights: dict[Hashable, Flight] = {}   # key -> flight, oldest first
        self.stale = 0          # answers for no flight (late past their deadline, repeated, of an earlier run)
        self.closed = False

    # ---- the node's threads ----------------------------------------------------------------------------
    def submit(self, item) -> tuple:
        """A frame to start -> (the frame lost, why): (None, "") when none was; the oldest waiting (keep_newest) or
        this one turned away when the inbox was full ("full"); this one after close ("shutdown")."""
        with self.cond:
            full = len(self.inbox) >= self.capacity
            if self.closed or (full and not self.keep_newest):   # never started
                return item, "shutdown" if self.closed else "full"
            dropped = self.inbox.popleft() if full else None
            self.inbox.append(item)
            self.cond.notify_all()
        return dropped, "full" if full else ""

    def deliver(self, key: Hashable, answer) -> bool:
        """An answer to the flight `key`; False (counted stale) when no such flight is awaited."""
        with self.cond:
            flight = self.flights.get(key)
            if flight is None:
                self.stale += 1
                return False
            flight.answers.append(answer)
            self.cond.notify_all()
            return True

    def close(self) -> list:
        """No event after this; -> the frames that waited to start (the caller accounts for them)."""
        with self.cond:
            self.closed = True
            waiting = list(self.inbox)
            self.inbox.clear()   # in place: the servers hold this deque (their waiting counts read it)
            self.cond.notify_all()
        return waiting

    # ---- the worker's thread ---------------------------------------------------------------------------
    def open(self, flight: Flight) -> bool:
        """Awaited from now; False when a flight of that key is open already."""
        with self.cond:
            if flight.key in self.flights:
                return False
            self.flights[flight.key] = flight
            return True

    def settle(self, flight: Flight) -> bool:
        """No longer awaited (answers still queued for it count stale); False when it was settled already."""
        with self.cond:
            if self.flights.get(flight.key) is not flight:
                return False
            del self.flights[flight.key]
            self.stale += len(flight.answers)
            flight.answers.clear()
            return True

    def next_event(self, choose: Callable, wait_s: float | None = None):
        """Blocks until choose(loop, now) names something to do, -> it; None once closed or after wait_s (None: no
        limit). choose runs under the loop's lock."""
        end = None if wait_s is None else time.monotonic() + wait_s
        with self.cond:
            while not self.closed:
                now = time.monotonic()
                event = choose(self, now)
                if event is not None:
                    return event
                if end is not None and now >= end:
                    return None
                self.cond.wait(POLL_S if end is None else max(0.0, min(POLL_S, end - now)))
        return None
