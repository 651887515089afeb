"""The numbers of `hybrid-vla seat-report` from a recording's candidate sets. Every time is an integer of
nanoseconds, so a recording with known receive times and stamps gives known shares exactly.

The consumer is autoware_trajectory_concatenator as its source has it: a 100 ms timer keeps a generator's newest
set while its first candidate's header.stamp is at most `duration_time` (0.2 s) older than the timer's now, and
drops it otherwise (docs/INTERFACES.md, *The diffusion planner's seat*). Its now is taken as the recorder's
receive time, or the bag's /clock where it has one (a sim-time graph: its stamps and its consumers' now are
/clock values).
"""

from __future__ import annotations

from typing import NamedTuple

import numpy as np

from ...errors import ConfigError, expect

CONSUMER_HZ, WINDOW_S, PHASES = 10.0, 0.2, 10
FAR_S = 60.0   # a median age at receipt beyond this: stamps and receiving clock are not one clock


class CandidateSet(NamedTuple):
    receive_ns: int                  # when the recorder received it (its clock)
    stamps_ns: tuple[int, ...]       # each candidate's header stamp
    points: tuple[int, ...]          # each candidate's number of points
    horizons_ns: tuple[int, ...]     # each candidate's last point's time_from_start (candidates with points)
    spacings_ns: tuple[int, ...]     # each candidate's median step of time_from_start (candidates with 2+ points)


class FrameInfo(NamedTuple):
    """One ~/debug/trajectory_info of the package's suffix: the frame's camera stamp, the stamp published and
    where the frame's time went (WAITS_MS, those it has)."""
    camera_stamp_ns: int
    output_stamp_ns: int
    waits_ms: tuple[tuple[str, float], ...] = ()


WAITS_MS = ("to_suffix_ms", "queue_ms", "suffix_ms", "output_wait_ms")   # trajectory_info's, camera to publish


class Recording(NamedTuple):
    topic: str
    msgtype: str
    sets: list[CandidateSet]
    infos: list[FrameInfo]
    odometry_stamps: frozenset      # header stamps of the bag's nav_msgs/Odometry messages
    clock: list[tuple[int, int]]    # (receive_ns, /clock value ns), in receive order
    undecodable: dict[str, int]     # topic -> its messages that did not decode (left out, counted)


def spread(values, per: float = 1.0) -> dict | None:
    """min / p10 / median / p90 / max of `values` / per (None when empty): ns / 1e9 is s, as exact as a float is."""
    if len(values) == 0:
        return None
    arr = np.asarray(values, dtype=np.float64) / per
    p10, median, p90 = np.percentile(arr, [10, 50, 90])
    return {"n": int(arr.size), "min": float(arr.min()), "p10": float(p10), "median": float(median),
            "p90": float(p90), "max": float(arr.max())}


def on_clock(times_ns: np.ndarray, clock: list[tuple[int, int]]) -> np.ndarray:
    """Receive times -> what a node with use_sim_time reads then: the newest /clock value received by then (its
    clock steps at each /clock message); before the first, that value less the time until it. No /clock:
    unchanged."""
    if not clock:
        return times_ns
    received = np.array([c[0] for c in clock], dtype=np.int64)
    value = np.array([c[1] for c in clock], dtype=np.int64)
    index = np.clip(np.searchsorted(received, times_ns, side="right") - 1, 0, len(clock) - 1)
    return value[index] + np.minimum(times_ns - received[index], 0)


def held_share(receive_ns: np.ndarray, stamp_ns: np.ndarray, valid: np.ndarray, hz: float = CONSUMER_HZ,
               window_s: float = WINDOW_S, phases: int = PHASES) -> dict | None:
    """How often a consumer ticking at `hz` finds the newest set received within `window_s` of its stamp (now -
    stamp <= window, the concatenator's test), from the first set's receipt to the last's. Ticks: one series per
    phase (0, 1/phases, ... of a period after the first receipt; a phase whose first tick falls after the last
    receipt, in a span shorter than a period, has none and counts for nothing): the share of the worst, mean and
    best phase; time: the share of that span during which the newest set is held (the mean over every phase)."""
    expect(hz > 0 and window_s >= 0 and phases >= 1, ConfigError,
           f"consumer {hz} Hz, window {window_s} s, {phases} phases: need hz > 0, window >= 0, phases >= 1")
    if len(receive_ns) < 2 or receive_ns[-1] <= receive_ns[0]:
        return None
    period, window = int(round(1e9 / hz)), int(round(window_s * 1e9))
    shares, ticks_total = [], 0
    for phase in range(phases):
        ticks = np.arange(receive_ns[0] + phase * period // phases, receive_ns[-1], period, dtype=np.int64)
        if not len(ticks):
            continue
        newest = np.searchsorted(receive_ns, ticks, side="right") - 1
        held = valid[newest] & (ticks - stamp_ns[newest] <= window)
        shares.append(int(held.sum()) / len(ticks))
        ticks_total += len(ticks)
    until = np.minimum(receive_ns[1:], stamp_ns[:-1] + window)   # held from each receipt until this, if later
    held_ns = np.where(valid[:-1], np.clip(until - receive_ns[:-1], 0, None), 0)
    return {"hz": hz, "window_s": window_s, "ticks": round(ticks_total / phases, 1), "held_ticks_min": min(shares),
            "held_ticks_mean": float(np.mean(shares)), "held_ticks_max": max(shares),
            "held_time": int(held_ns.sum()) / int(receive_ns[-1] - receive_ns[0])}


def stamp_convention(stamps: list[int], infos: list[FrameInfo], odometry: frozenset) -> dict:
    """What a set's stamp is: from the package's trajectory_info (the frame's camera stamp, or the publish time
    when re-timed: then camera stamp to publish is the frame's age), else the bag's odometry (a stamp equal to
    an odometry message's: the diffusion planner's convention), else unknown."""
    if not stamps:
        return {"convention": "unknown", "source": "no candidate in the recording"}
    by_output = {info.output_stamp_ns: info for info in infos}
    matched = [by_output[s] for s in stamps if s in by_output]
    if matched:
        retimed = sum(info.output_stamp_ns != info.camera_stamp_ns for info in matched)
        convention = ("publish time" if retimed == len(matched) else
                      "the camera frame's stamp" if retimed == 0 else "mixed: publish time and camera stamp")
        ages = [info.output_stamp_ns - info.camera_stamp_ns for info in matched]
        return {"convention": convention, "source": f"trajectory_info ({len(matched)} of {len(stamps)} sets)",
                "frame_age_at_publish_ms": spread(ages, 1e6) if retimed else None}
    on_odometry = sum(s in odometry for s in stamps)
    if odometry and on_odometry == len(stamps):
        return {"convention": "the input odometry's stamp", "source": f"odometry ({on_odometry} of {len(stamps)} sets)"}
    return {"convention": "unknown", "source": "no trajectory_info matches a set"
            + (f"; {on_odometry} of {len(stamps)} stamps equal an odometry stamp" if odometry else
               " and the bag has no odometry")}


def frame_waits(stamps: list[int], infos: list[FrameInfo]) -> dict:
    """Of the sets' frames (trajectory_info matched by the stamp published): each wait's spread."""
    wanted = set(stamps)
    waits: dict[str, list[float]] = {}
    for info in infos:
        if info.output_stamp_ns in wanted:
            for key, ms in info.waits_ms:
                waits.setdefault(key, []).append(ms)
    return {key: spread(waits[key]) for key in WAITS_MS if key in waits}


def analyse(recording: Recording, hz: float = CONSUMER_HZ, window_s: float = WINDOW_S) -> dict:
    """The report of `hybrid-vla seat-report` (JSON-ready)."""
    sets = sorted(recording.sets, key=lambda s: s.receive_ns)
    receive = on_clock(np.array([s.receive_ns for s in sets], dtype=np.int64), recording.clock)
    valid = np.array([bool(s.stamps_ns) for s in sets], dtype=bool)
    stamp = np.array([s.stamps_ns[0] if s.stamps_ns else 0 for s in sets], dtype=np.int64)
    intervals = np.diff(receive)
    ages = (receive - stamp)[valid]
    flat = lambda field: [v for s in sets for v in getattr(s, field)]   # noqa: E731
    median_interval = float(np.median(intervals)) if len(intervals) else 0.0
    report = {
        "topic": recording.topic, "type": recording.msgtype, "clock": "/clock" if recording.clock else "recorder",
        "sets": len(sets), "empty_sets": int((~valid).sum()), "undecodable": dict(recording.undecodable),
        "rate_hz": {"median": 1e9 / median_interval if median_interval > 0 else None,
                    "mean": (len(sets) - 1) * 1e9 / float(receive[-1] - receive[0])
                    if len(sets) > 1 and receive[-1] > receive[0] else None},
        "interval_s": spread(intervals, 1e9),
        "candidates_per_set": spread([len(s.stamps_ns) for s in sets]),
        "points": spread(flat("points")), "horizon_s": spread(flat("horizons_ns"), 1e9),
        "spacing_s": spread(flat("spacings_ns"), 1e9), "age_at_receipt_ms": spread(ages, 1e6),
        "stamp": stamp_convention(stamp[valid].tolist(), recording.infos, recording.odometry_stamps),
        "frame_waits_ms": frame_waits(stamp[valid].tolist(), recording.infos),
        "consumer": held_share(receive, stamp, valid, hz, window_s),
        "series": {"t_s": ((receive - receive[0]) / 1e9).tolist() if len(sets) else [],
                   "age_ms": [float(a) if v else None for a, v in zip((receive - stamp) / 1e6, valid)]},
    }
    report["notes"] = notes(report)
    return report


def notes(report: dict) -> list[str]:
    """What a reader should know before trusting the numbers."""
    said = []
    if report["sets"] < 2:
        said.append(f"{report['sets']} set(s): no rate and no consumer share")
    age = report["age_at_receipt_ms"]
    if age and abs(age["median"]) > FAR_S * 1e3:
        said.append(f"the stamps lie {age['median'] / 1e3:.0f} s from the receiving clock: not one clock (a "
                    "replayed drive's stamps, or a sim-time graph recorded without /clock), so the consumer "
                    "share says what a consumer on the receiving clock would see")
    for topic, count in sorted(report["undecodable"].items()):
        said.append(f"{count} message(s) on {topic} did not decode: left out")
    return said
