"""What a warm standby suffix keeps for a takeover (ros/nodes/standby.py), ROS-free: the boundary messages of the
frames the active suffix has not published yet, by frame, oldest first.

A frame leaves when a trajectory at or after its stamp is published (the active one served it, or it counted it:
it publishes in stamp order). Unpublished frames are kept up to `frames` (what the active one may hold: its
worker's queue) plus the frames that arrived within `window_s` (the takeover time: what reaches the standby after
the active one fell silent), at most `frames` more; `chunks` messages per frame. A frame pushed out beyond that is
remembered by its stamp; if it is still unpublished at a takeover it is lost, and counted then (DROP_REASON), once.
So every frame that leaves is published, counted by the active one, run at the takeover, or counted here.
"""

from __future__ import annotations

import threading
from collections import OrderedDict

DROP_REASON = "standby_full"   # a frame pushed out of the standby's buffer and lost at its takeover
REMEMBERED = 4096              # stamps of pushed-out frames kept until published (an active one that beats but
                               # never publishes: past this the oldest is counted at once, not at a takeover)


class StandbyBuffer:
    def __init__(self, frames: int, chunks: int, window_s: float):
        self.frames, self.chunks, self.window_s = frames, chunks, window_s
        self._kept: OrderedDict[int, list] = OrderedDict()      # stamp -> [first arrival, [item, ...]]
        self._pushed_out: OrderedDict[int, None] = OrderedDict()  # stamps of frames pushed out, unpublished
        self._lock = threading.Lock()
        self.messages, self.published_ns = 0, -1        # messages kept now; the newest stamp published
        self.seen = self.pushed_out = self.lost = 0    # messages seen so far, frames pushed out, frames counted lost

    def bound(self, now: float) -> int:
        """Messages kept at most now: chunks x (frames + the frames that arrived in the last window_s)."""
        recent = 0
        for first, _ in reversed(self._kept.values()):   # arrival order: the newest first, up to the window
            if first < now - self.window_s or recent == self.frames:
                break
            recent += 1
        return self.chunks * (self.frames + recent)

    def keep(self, item, stamp_ns: int, received: float) -> list[int]:
        """One message of frame `stamp_ns`, received at `received` (monotonic seconds). -> stamps of frames
        lost for good now (counted by the caller; normally none)."""
        with self._lock:
            self.seen += 1
            if stamp_ns <= self.published_ns or stamp_ns in self._pushed_out:   # published, or a late chunk of a
                return []                                                       # frame pushed out: nothing to run
            self.messages += 1
            self._kept.setdefault(stamp_ns, [received, []])[1].append(item)
            while self.messages > self.bound(received):   # the oldest frames out (a flood of one stamp: itself)
                stamp, (_, items) = self._kept.popitem(last=False)
                self._pushed_out[stamp] = None
                self.messages -= len(items)
                self.pushed_out += 1
            lost = []
            while len(self._pushed_out) > REMEMBERED:
                lost.append(self._pushed_out.popitem(last=False)[0])
            self.lost += len(lost)
            return lost

    def forget(self, published_ns: int) -> None:
        """A trajectory of stamp `published_ns` is out: older frames are the active one's (served or counted)."""
        with self._lock:
            self.published_ns = max(self.published_ns, published_ns)
            while self._kept and next(iter(self._kept)) <= published_ns:
                self.messages -= len(self._kept.popitem(last=False)[1][1])
            while self._pushed_out and next(iter(self._pushed_out)) <= published_ns:
                self._pushed_out.popitem(last=False)

    def take(self, published_ns: int) -> tuple[list, list[int]]:
        """At a takeover: -> (the messages to run, oldest first: frames newer than `published_ns`; the stamps of
        the frames pushed out and never published: lost, to be counted). The buffer starts over empty."""
        with self._lock:
            items = [item for stamp, (_, kept) in self._kept.items() if stamp > published_ns for item in kept]
            lost = [stamp for stamp in self._pushed_out if stamp > published_ns]
            self._kept.clear()
            self._pushed_out.clear()
            self.messages = 0
            self.lost += len(lost)
            return items, lost


def newest_that_fit(buffered: list, room: int, stamp_of) -> tuple[list, list[int]]:
    """A takeover's messages (oldest first) cut to the `room` the worker's queue has now, by whole frames, the
    newest kept: the buffer may hold twice what the queue does (`frames` plus the window's), and its oldest
    frames are the stalest (the first an age limit refuses), where a full queue would refuse the newest.
    -> (the messages to run, the stamps of the frames left out: the caller counts each once)."""
    if len(buffered) <= room:
        return buffered, []
    cut = len(buffered) - max(0, room)
    while 0 < cut < len(buffered) and stamp_of(buffered[cut]) == stamp_of(buffered[cut - 1]):
        cut += 1   # the frame the cut falls in goes whole
    return buffered[cut:], list(dict.fromkeys(stamp_of(item) for item in buffered[:cut]))


def hand_to_worker(buffered: list, worker, stamp_of) -> None:
    """A takeover's messages into the worker (engine/pipeline/worker.py): the newest that fit its queue; the
    frames left out counted as dropped (queue_full), once each, with their stamps."""
    kept, left_out = newest_that_fit(buffered, worker.room(), stamp_of)
    for stamp_ns in left_out:
        worker.health.drop("queue_full", stamp_ns)
    for item in kept:
        worker.submit(item)
