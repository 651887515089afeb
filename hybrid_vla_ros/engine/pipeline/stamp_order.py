"""Frames in stamp order, and what a stamp going back means. A frame older than the last one taken is refused
(out_of_order: a late or duplicated message), unless it is older by TIME_JUMP_S or more: then time itself went
back (a bag replayed in a loop, a simulator's /clock reset) and the order starts over from it. Two seconds is
several frames even at a real-size model's 2 Hz with two in flight, so no reordering inside the pipeline is
ever that late."""

from __future__ import annotations

TIME_JUMP_S = 2.0


def stamp_order(last_ns: int, stamp_ns: int, jump_s: float = TIME_JUMP_S) -> str:
    """-> 'newer', 'jump' (older by jump_s or more: time went back) or 'older'."""
    if stamp_ns > last_ns:
        return "newer"
    return "jump" if last_ns >= 0 and last_ns - stamp_ns >= jump_s * 1e9 else "older"
