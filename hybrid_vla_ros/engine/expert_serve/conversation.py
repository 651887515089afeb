"""One split Alpamayo frame in flight at the prefix (ROS-free): its messages out (OutgoingFrame: numbered, timed,
the first with the frame's settings), its exchange as a generator of the answers it awaits, the answers as they came,
the deadline of the one awaited, and its outcome once over (Conversation: a flight of the one serving loop,
engine/serve/loop.py, keyed by the frame's run and seq). prefix_server.py keeps them open."""

from __future__ import annotations

import time
from dataclasses import dataclass, field

from ...errors import HybridVLAError, InputError, expect
from ..serve.loop import Flight
from .envelope import ABORT, CROSSING, REFUSED, Back, FrameSettings, Forward, Tag, encode_forward


@dataclass
class PrefixOutcome:
    tag: Tag
    sent: bool                       # every crossing of the frame went out
    reason: str = ""                 # not sent: why (a diagnostics reason)
    message: str = ""
    counted_here: bool = False       # the prefix counts this loss (else the suffix refused it and counts it)
    times: dict = field(default_factory=dict)   # phase -> the prefix's ms
    settings: FrameSettings | None = None
    images: dict = field(default_factory=dict)  # the window's images: "encoded" by the tower now, "reused" (kept)
    reported: bool = False           # the caller's: accounted for (once, whichever thread ended the frame)


class FrameLost(HybridVLAError):
    def __init__(self, reason: str, message: str, counted_here: bool = True):
        super().__init__(message)
        self.reason, self.counted_here = reason, counted_here


class OutgoingFrame:
    """One frame's messages out: numbered, stamped with the prefix's time so far, the first with the settings."""

    def __init__(self, tag: Tag, settings: FrameSettings, send):
        self.tag, self.settings, self.send_bytes = tag, settings, send
        self.index, self.answers = 0, 0
        self.times = {"prefill": 0.0, "decode": 0.0, "unguided": 0.0, "expert": 0.0}
        self.images: dict = {}   # the prompt's images encoded now / kept from earlier windows (VisionCache)
        self.ended = False   # set when the frame left the server's open frames: nothing but an ABORT goes out

    def timed(self, phase: str, fn, *args):
        start = time.perf_counter()
        out = fn(*args)
        self.times[phase] += (time.perf_counter() - start) * 1e3
        return out

    def send(self, state, kind: int = CROSSING) -> None:
        if self.ended and kind != ABORT:   # ended by another thread (close) while its exchange ran: not sent
            return
        first = self.index == 0
        self.send_bytes(encode_forward(Forward(self.tag, self.index, kind, state, dict(self.times),
                                               self.settings if first else None)))
        self.index += 1


class Conversation(Flight):
    """One frame in flight at the prefix: its exchange (a generator of awaited answer kinds), its answers as they
    came (Flight.answers), the deadline of the one awaited, and its outcome once over. Answers are due (`due`) once
    its prompt went out."""

    def __init__(self, frame: OutgoingFrame, timeout_s: float):
        super().__init__((frame.tag.run, frame.tag.seq), timeout_s, due=False)
        self.frame = frame
        self.awaiting: type | None = None
        self.outcome: PrefixOutcome | None = None
        self.context = None    # the caller's own (the node's frame it came from)
        self._exchange = None

    def start(self, exchange) -> None:
        self._exchange = exchange
        self.awaiting = next(exchange)   # the prefill goes out
        self.renew()

    def take(self, back: Back) -> None:
        """The awaited answer: refused, out of turn or of the wrong kind -> FrameLost / InputError."""
        frame = self.frame
        if back.kind == REFUSED:
            raise FrameLost(back.reason, f"the suffix refused frame {frame.tag.seq}: {back.message}", False)
        index, frame.answers = frame.answers, frame.answers + 1
        expect(back.index == index and isinstance(back.state, self.awaiting), InputError,
               f"frame {frame.tag.seq}: answer {back.index} a {type(back.state).__name__}, expected answer {index} "
               f"a {self.awaiting.__name__}")
        try:
            self.awaiting = self._exchange.send(back.state)
        except StopIteration:
            self.awaiting = None
        self.renew()
