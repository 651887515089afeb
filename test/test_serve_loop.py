"""The one serving loop of a prefix whose suffix answers (engine/serve/): what both the action-token prefix and the
Alpamayo prefix run on. The kinds' own tests (test_packed_serve, test_alpamayo_servers) check it with real models;
these pin the loop's rules alone: answers routed by key and stale ones counted, the order of events, the bounds."""

import threading
import time

from hybrid_vla_ros.engine.serve.loop import Flight, ServeLoop
from hybrid_vla_ros.engine.serve.policy import OnePerForward, Packed


class Group:
    """An ActionFlow group's admission surface (submit / flight / waiting / busy)."""

    def __init__(self):
        self.flight, self.waiting = {}, []

    def submit(self, frame):
        self.waiting.append(frame)

    @property
    def busy(self):
        return bool(self.flight or self.waiting)


def test_an_answer_reaches_its_flight_and_one_for_no_flight_is_counted_stale():
    loop = ServeLoop()
    flight = Flight(("run", 1), 10.0)
    assert loop.open(flight) and not loop.open(Flight(("run", 1), 10.0))   # one flight per key
    assert loop.deliver(("run", 1), "a") and not loop.deliver(("run", 2), "b")
    assert list(flight.answers) == ["a"] and loop.stale == 1
    loop.deliver(("run", 1), "repeated")
    flight.answers.popleft()
    assert loop.settle(flight) and not loop.settle(flight)
    assert loop.stale == 2   # the answer still queued when it settled
    assert not loop.deliver(("run", 1), "late") and loop.stale == 3


def test_one_per_forward_takes_the_oldest_flights_answer_or_lateness_then_new_frames_up_to_max_open():
    loop, policy = ServeLoop(capacity=4), OnePerForward(max_open=2)
    for frame in ("f0", "f1", "f2"):
        loop.submit(frame)
    choose = policy.choose
    assert loop.next_event(choose, 0.0)[:2] == ("frame", "f0")
    first = Flight("f0", 10.0, due=False)
    first.deadline = 0.0   # not due yet: a deadline long past does not count
    loop.open(first)
    assert loop.next_event(choose, 0.0)[:2] == ("frame", "f1")
    second = Flight("f1", 10.0)
    loop.open(second)
    assert loop.next_event(choose, 0.0) is None   # two in flight: f2 waits
    first.renew()
    first.deadline = second.deadline = time.monotonic() - 1   # both past their deadline ...
    loop.deliver("f0", "answer")
    assert loop.next_event(choose, 0.0) == ("answer", first, "answer")   # ... but one with an answer is not late
    first.renew()   # as the worker does once it sent the answer's reply
    assert loop.next_event(choose, 0.0) == ("late", second, None)
    loop.settle(second)
    assert loop.next_event(choose, 0.0)[:2] == ("frame", "f2")


def test_the_inbox_is_bounded_as_asked_and_refuses_after_close():
    newest, lossless = ServeLoop(capacity=2), ServeLoop(capacity=2, keep_newest=False)
    assert [newest.submit(f) for f in "abc"] == [(None, ""), (None, ""), ("a", "full")]
    assert [lossless.submit(f) for f in "abc"] == [(None, ""), (None, ""), ("c", "full")]
    assert newest.close() == ["b", "c"] and newest.submit("d") == ("d", "shutdown")


def test_next_event_wakes_on_an_answer_and_ends_at_close():
    loop, policy = ServeLoop(), OnePerForward(1)
    flight = Flight("k", 30.0)
    loop.open(flight)
    threading.Timer(0.1, loop.deliver, ("k", "late answer")).start()
    start = time.monotonic()
    assert loop.next_event(policy.choose, 5.0) == ("answer", flight, "late answer")
    assert time.monotonic() - start < 2.0
    threading.Timer(0.1, loop.close).start()
    assert loop.next_event(policy.choose) is None


def test_packed_steps_groups_round_robin_and_never_one_awaiting_its_answer():
    groups = [Group(), Group()]
    loop, admitting = ServeLoop(capacity=8), [True]
    policy = Packed(groups, pack=2, admitting=lambda: admitting[0])
    for frame in range(5):
        loop.submit(frame)
    assert policy.choose(loop, 0.0) == ("step", 0, None) and groups[0].waiting == [0]
    step = Flight(100, 10.0)
    step.group = 0
    loop.open(step)
    assert policy.choose(loop, 0.0) == ("step", 1, None) and groups[1].waiting == [1]
    other = Flight(101, 10.0)
    other.group = 1
    loop.open(other)
    assert policy.choose(loop, 0.0) is None   # both groups await their step's tokens
    loop.deliver(100, {0: 7})
    assert policy.choose(loop, 0.0) == ("answer", step, {0: 7})
    loop.settle(step)
    admitting[0] = False   # a partition change waits for the drain: nothing admitted
    assert policy.choose(loop, 0.0) == ("step", 0, None) and groups[0].waiting == [0]
    admitting[0] = True
    assert policy.choose(loop, 0.0) == ("step", 0, None) and groups[0].waiting == [0, 2]   # up to pack
