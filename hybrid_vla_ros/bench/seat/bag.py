"""A recording of a planner's output, read for `hybrid-vla seat-report` (bench/seat): the candidate sets of one
CandidateTrajectories topic (or one Trajectory topic: a set of one), the package's trajectory_info, the bag's
/clock and its odometry stamps. Decoded with the bag type store (pure Python, no rclpy); a message that does
not decode is left out and counted per topic, never a crash."""

from __future__ import annotations

import math
import struct
from pathlib import Path

from rosbags.serde import SerdeError

from ...ros.bags.storage import bag_info, header_stamp_ns, stream_bag, typestore_with
from .timing import WAITS_MS, CandidateSet, FrameInfo, Recording
from ...errors import ConfigError, expect

CANDIDATES_TYPE = "autoware_internal_planning_msgs/msg/CandidateTrajectories"
TRAJECTORY_TYPES = ("autoware_planning_msgs/msg/Trajectory", "autoware_auto_planning_msgs/msg/Trajectory")
INFO_TYPE, INFO_SUFFIX = "diagnostic_msgs/msg/DiagnosticStatus", "/debug/trajectory_info"
CLOCK_TYPE, ODOMETRY_TYPE = "rosgraph_msgs/msg/Clock", "nav_msgs/msg/Odometry"
DAMAGED = (SerdeError, ConfigError, ValueError, IndexError, KeyError, AttributeError, TypeError, OverflowError,
           struct.error, UnicodeDecodeError)


def choose_topic(types: dict[str, str], topic: str | None) -> str:
    """The topic to report: `topic` (it must hold candidates or a Trajectory), else the bag's one
    CandidateTrajectories topic, else its one Trajectory topic."""
    if topic is not None:
        expect(types.get(topic) in (CANDIDATES_TYPE, *TRAJECTORY_TYPES), ConfigError,
               f"topic '{topic}' is not a {CANDIDATES_TYPE} or Trajectory topic of the bag "
               f"({types.get(topic) or 'not in it'}); its topics: {sorted(types)}")
        return topic
    for wanted in ((CANDIDATES_TYPE,), TRAJECTORY_TYPES):
        found = sorted(t for t, m in types.items() if m in wanted)
        expect(len(found) <= 1, ConfigError, f"the bag has {len(found)} {' or '.join(wanted)} topics {found}: "
                                             "say which with --topic")
        if found:
            return found[0]
    raise ConfigError(f"the bag has no {CANDIDATES_TYPE} or Trajectory topic; its topics: "
                      f"{ {t: m for t, m in sorted(types.items())} }")


def _ns(time) -> int:
    return int(time.sec) * 1_000_000_000 + int(time.nanosec)


def candidate_set(receive_ns: int, candidates) -> CandidateSet:
    """A set from decoded candidates (each with header.stamp and points[].time_from_start)."""
    stamps, points, horizons, spacings = [], [], [], []
    for candidate in candidates:
        times = [_ns(p.time_from_start) for p in candidate.points]
        stamps.append(_ns(candidate.header.stamp))
        points.append(len(times))
        horizons += times[-1:]
        if len(times) > 1:
            steps = sorted(b - a for a, b in zip(times, times[1:]))
            spacings.append(steps[len(steps) // 2])
    return CandidateSet(receive_ns, tuple(stamps), tuple(points), tuple(horizons), tuple(spacings))


def frame_info(msg) -> FrameInfo:
    """A trajectory_info: a value that is not a number refuses the whole info (counted); a non-finite one is
    left out."""
    values = {kv.key: kv.value for kv in msg.values}
    camera = int(values["stamp_ns"])
    waits = ((key, float(values[key])) for key in WAITS_MS if values.get(key))
    return FrameInfo(camera, int(values.get("output_stamp_ns") or camera),
                     tuple((key, ms) for key, ms in waits if math.isfinite(ms)))


def read_seat_bag(path: str | Path, topic: str | None = None) -> Recording:
    """The bag's candidate sets on `topic` (choose_topic), with what explains their stamps."""
    types = bag_info(path).types
    topic = choose_topic(types, topic)
    info_topics = {t for t, m in types.items() if m == INFO_TYPE and t.endswith(INFO_SUFFIX)}
    store = typestore_with({types[topic], *(types[t] for t in info_topics), CLOCK_TYPE})
    sets, infos, odometry, clock, damaged = [], [], set(), [], {}
    for message in stream_bag(path):
        try:
            if message.topic == topic:
                msg = store.deserialize_cdr(message.raw, message.msgtype)
                candidates = msg.candidate_trajectories if message.msgtype == CANDIDATES_TYPE else [msg]
                sets.append(candidate_set(message.receive_ns, candidates))
            elif message.topic in info_topics:
                infos.append(frame_info(store.deserialize_cdr(message.raw, message.msgtype)))
            elif message.msgtype == ODOMETRY_TYPE:
                odometry.add(header_stamp_ns(message.raw))
            elif message.msgtype == CLOCK_TYPE:
                clock.append((message.receive_ns, _ns(store.deserialize_cdr(message.raw, CLOCK_TYPE).clock)))
        except DAMAGED:
            damaged[message.topic] = damaged.get(message.topic, 0) + 1
    return Recording(topic, types[topic], sets, infos, frozenset(odometry), clock, damaged)
