"""Replaying a rosbag2 drive into the graph: streaming, camera images grouped into frames by header stamp,
each topic published with the QoS its recorder saw offered, optionally with /clock for use_sim_time graphs."""

from __future__ import annotations

import time
from pathlib import Path
from typing import Iterable, Iterator, NamedTuple

from ...errors import ConfigError, expect
from ..nodes.diagnostics import EndpointReports, quiet_events
from .storage import (BagMessage, bag_info, header_first, header_stamp_ns, message_class, qos_from_bag, stream_bag,
                      with_header_stamp)

CAMERA_TYPES = ("sensor_msgs/msg/Image", "sensor_msgs/msg/CompressedImage")
REPORT_WAIT_S = 2.5   # a listed reader with no endpoints report by then is not the package's (its period: 1 s shipped)
WINDOW_POLL_S = 0.1   # the closed loop's longest spin while it waits for an answer (an answer ends it earlier)


class BagFrame(NamedTuple):
    """What is published together: the non-camera messages received since the previous frame, then one
    image per camera whose header stamps lie within the skew. A frame with no camera images is a step of
    a bag without cameras."""
    stamp_ns: int  # the newest camera header stamp (what the graph stamps its output with); else receive time
    receive_ns: int  # the latest receive time among the messages (replay timing)
    messages: list[BagMessage]
    complete: bool  # every camera topic present


class FrameGrouper:
    """Streams frames out of messages in receive order. Real bags receive each camera's image of one
    instant at a different time (and a driver may drop one): images join the open frame whose stamp is
    within `skew_ns` and lacks their camera; a frame is emitted when every camera is in it, or, incomplete,
    when a newer frame completes first or `hold_ns` of receive time passed. Memory: the open frames only."""

    def __init__(self, camera_topics: Iterable[str], skew_ns: int, hold_ns: int = 1_000_000_000):
        self.cameras = set(camera_topics)
        self.skew_ns, self.hold_ns = skew_ns, hold_ns
        self.open: list[dict] = []  # {"stamp" (first image's), "newest", "images": {topic: message}, "first_receive"}
        self.others: list[BagMessage] = []

    def _frame(self, entry: dict) -> BagFrame:
        images = [entry["images"][t] for t in sorted(entry["images"])]
        messages, self.others = self.others + images, []
        return BagFrame(entry["newest"], max(m.receive_ns for m in messages), messages,
                        set(entry["images"]) == self.cameras)

    def push(self, message: BagMessage) -> list[BagFrame]:
        if not self.cameras:  # no cameras: each message is a step of its own
            return [BagFrame(message.receive_ns, message.receive_ns, [message], True)]
        if message.topic not in self.cameras:
            self.others.append(message)
            return self._expire(message.receive_ns)
        stamp = header_stamp_ns(message.raw)
        entry = next((e for e in self.open if abs(e["stamp"] - stamp) <= self.skew_ns
                      and message.topic not in e["images"]), None)
        if entry is None:
            entry = {"stamp": stamp, "newest": stamp, "images": {}, "first_receive": message.receive_ns}
            self.open.append(entry)
        entry["images"][message.topic] = message
        entry["newest"] = max(entry["newest"], stamp)
        if set(entry["images"]) == self.cameras:  # complete: it and every older open frame go out
            index = self.open.index(entry)
            done, self.open = self.open[:index + 1], self.open[index + 1:]
            return [self._frame(e) for e in done]
        return self._expire(message.receive_ns)

    def _expire(self, now_ns: int) -> list[BagFrame]:
        done = [e for e in self.open if now_ns - e["first_receive"] > self.hold_ns]
        self.open = [e for e in self.open if e not in done]
        return [self._frame(e) for e in done]

    def flush(self) -> list[BagFrame]:
        frames = [self._frame(e) for e in self.open]
        self.open = []
        if self.others:
            leftovers, self.others = self.others, []
            frames.append(BagFrame(leftovers[-1].receive_ns, leftovers[-1].receive_ns, leftovers, True))
        return frames


def bag_frames(path: str | Path, skew_ns: int, camera_topics: Iterable[str] | None = None) -> Iterator[BagFrame]:
    """The bag as a stream of frames (camera topics: every Image/CompressedImage topic unless given)."""
    types = bag_info(path).types
    cameras = [t for t, m in types.items() if m in CAMERA_TYPES] if camera_topics is None else list(camera_topics)
    grouper = FrameGrouper([c for c in cameras if c in types and header_first(types[c])], skew_ns)
    for message in stream_bag(path):
        yield from grouper.push(message)
    yield from grouper.flush()


class Replayer:
    """Publishes a bag's frames. rate > 0: recorded receive timing scaled by rate; rate == 0: as fast as
    the graph takes it (closed loop: at most `window` frames published and not yet answered). With
    `clock=True`, /clock carries the bag's time (ros2 bag play --clock): nodes with use_sim_time follow it.
    `quiet=True`: its publishers without rclpy's default event handlers (a driver in the graph's own process,
    whose executor would otherwise re-add two of them per topic at every wake-up: ros/nodes/diagnostics.py).
    Topics whose message type is not installed here are skipped (listed in `skipped`)."""

    def __init__(self, node, path: str | Path, remap: dict[str, str] | None = None, skew_ms: float = 20.0,
                 clock: bool = False, clock_hz: float = 40.0, quiet: bool = False):
        self.node, self.path, self.skew_ns = node, Path(path), int(skew_ms * 1e6)
        info = bag_info(path)
        self.remap, self.message_count = remap or {}, info.message_count
        self.types, self.skipped = {}, {}
        for topic, msgtype in info.types.items():
            try:
                message_class(msgtype)
                self.types[topic] = msgtype
            except (ImportError, AttributeError):
                self.skipped[topic] = msgtype
        events = quiet_events("publisher") if quiet else {}
        self.publishers = {topic: node.create_publisher(message_class(t), self.remap.get(topic, topic),
                                                        qos_from_bag(info.offered.get(topic, [])), **events)
                           for topic, t in self.types.items()}
        self.clock = self._clock_publisher() if clock else None
        self.clock_period_s, self._clock_sent = 1.0 / clock_hz, 0.0
        self.published_frames: list[tuple[int, float]] = []  # (frame stamp, wall time published)
        self.incomplete_frames = 0  # a camera's image missing: published, not waited for
        self.presumed_lost = 0  # closed loop: frames never answered within the wait (dropped by the graph)
        self.frame_time_s = 0.0  # the probe's answer time: what every wait for an answer scales with (real size)

    def _clock_publisher(self):
        from rosgraph_msgs.msg import Clock
        return self.node.create_publisher(Clock, "/clock", 10)

    def publish_clock(self, bag_ns: int) -> None:
        if self.clock is not None:
            from rosgraph_msgs.msg import Clock
            msg = Clock()
            msg.clock.sec, msg.clock.nanosec = bag_ns // 1_000_000_000, bag_ns % 1_000_000_000
            self.clock.publish(msg)
            self._clock_sent = time.perf_counter()

    def topics(self) -> dict[str, str]:
        return {self.remap.get(topic, topic): t for topic, t in self.types.items()}

    def frames(self) -> Iterator[BagFrame]:
        for frame in bag_frames(self.path, self.skew_ns):
            kept = [m for m in frame.messages if m.topic in self.types]
            if kept:
                yield frame._replace(messages=kept)

    def wait_for_subscribers(self, timeout_s: float = 10.0, spin=None, grace_s: float = 1.0) -> bool:
        """Every camera topic has a subscriber; then every other topic (a route, /tf_static: the context a frame
        is refused without) too, unless nobody in the graph reads it: a topic the graph lists no reader of is
        given up `grace_s` after the cameras matched (a kinematic state nobody reads). Without this wait a
        route matched a moment after the cameras reaches the graph after the first frame, which it refuses.
        Then the readers' own side: a reader of the package's nodes reports (its `endpoints` diagnostic) that it
        matched every writer on the topic, this replayer's included (a best-effort image sent before is lost); a
        listed reader with no report REPORT_WAIT_S after the cameras matched is another program's. A reader left
        unconfirmed at the timeout is logged; True once the cameras matched."""
        cameras = [p for topic, p in self.publishers.items() if self.types[topic] in CAMERA_TYPES] or \
            list(self.publishers.values())
        self.reports = EndpointReports(self.node)   # the graph's own matched counts, for this wait
        deadline, cameras_matched, waiting = time.monotonic() + timeout_s, None, ["the cameras' subscribers"]
        while time.monotonic() < deadline:
            if cameras_matched is None and all(p.get_subscription_count() > 0 for p in cameras):
                cameras_matched = time.monotonic()
            if cameras_matched is not None and all(self._context_matched(topic, cameras_matched + grace_s)
                                                   for topic in self.publishers):
                waiting = self._unconfirmed(time.monotonic() - cameras_matched >= REPORT_WAIT_S)
                if not waiting:
                    break
            spin(0.05) if spin else time.sleep(0.05)
        self.reports.close()
        if waiting and cameras_matched is not None:
            self.node.get_logger().warning(f"replay: starting without {', '.join(waiting)} (a first frame may be "
                                           f"lost before its reader matched this replayer)")
        return cameras_matched is not None

    def _unconfirmed(self, reports_due: bool) -> list[str]:
        """The readers the ROS graph lists on a replayed topic that do not (yet) report having matched every writer
        there; one that has not reported at all counts only until reports_due (the package's nodes report every
        diagnostics period; another program's never)."""
        waiting = []
        for topic in self.publishers:
            name = self.remap.get(topic, topic)
            for reader in sorted({info.node_name for info in self.node.get_subscriptions_info_by_topic(name)}):
                reported = reader in self.reports.values
                if (reported and not self.reports.matched(reader, "subscription", name)) or \
                        (not reported and not reports_due):
                    waiting.append(f"{reader}'s report on {name}")
        return waiting

    def _context_matched(self, topic: str, give_up_at: float) -> bool:
        if self.publishers[topic].get_subscription_count() > 0:
            return True
        read = self.node.count_subscribers(self.remap.get(topic, topic)) > 0  # the graph lists a reader: wait
        return not read and time.monotonic() >= give_up_at

    def _period_s(self) -> float:
        times = [wall for _, wall in self.published_frames[-6:]]
        return (times[-1] - times[0]) / (len(times) - 1) if len(times) > 1 else 1.0

    def publish_frame(self, frame: BagFrame) -> None:
        self.publish_clock(frame.receive_ns)
        for message in frame.messages:
            self.publishers[message.topic].publish(message.raw)
        if frame.complete:
            self.published_frames.append((frame.stamp_ns, time.perf_counter()))
        else:
            self.incomplete_frames += 1

    def wait_for_acks(self, timeout_s: float) -> list[str]:
        """Before the replayer goes: every reliable reader has acknowledged what was published (a process that
        exits with a sample still unacknowledged takes it along: its readers never get the bag's last frame).
        Best-effort topics have nothing to wait for. -> the topics still unacknowledged after timeout_s."""
        from rclpy.duration import Duration
        deadline, waiting = time.monotonic() + timeout_s, []
        named = {self.remap.get(topic, topic): p for topic, p in self.publishers.items()}
        if self.clock is not None:
            named["/clock"] = self.clock
        for name, publisher in named.items():
            left = max(0.0, deadline - time.monotonic())
            if not publisher.wait_for_all_acked(Duration(nanoseconds=int(left * 1e9))):
                waiting.append(name)
        return waiting

    def first_frame(self) -> BagFrame:
        frame = next((f for f in self.frames() if f.complete), None)
        expect(frame is not None, ConfigError, f"bag '{self.path}': no frame with an image from every camera")
        return frame

    def first_stamp(self) -> int:
        return self.first_frame().stamp_ns

    def probe(self, spin, answered, timeout_s: float = 60.0, every_s: float = 3.0) -> int:
        """Readiness probe: publish the first frame, stamped before the bag starts, until the graph answers
        (DDS matching is asymmetric: the first messages after start-up can be lost before both sides match).
        Each attempt carries a newer stamp (10 s before the bag, +10 ms per attempt) so the graph does not
        reject a retry as out of order. Returns the number of attempts sent once answered, 0 on timeout."""
        frame = self.first_frame()
        stamped = [(m.topic, header_first(m.msgtype)) for m in frame.messages]
        start, deadline, attempt = answered(), time.monotonic() + timeout_s, 0
        first_sent = time.monotonic()
        while time.monotonic() < deadline:
            ns = frame.stamp_ns - 10_000_000_000 + attempt * 10_000_000
            self.publish_clock(ns)
            for message, (topic, has_header) in zip(frame.messages, stamped):
                # the recorded bytes with only the stamp rewritten: nothing of the bag is deserialised (rclpy's
                # deserialize_message crashes the process on some malformed payloads, e.g. 00 0a 17 6b)
                self.publishers[topic].publish(with_header_stamp(message.raw, ns) if has_header else message.raw)
            attempt += 1
            until = time.monotonic() + every_s * 2 ** (attempt - 1)   # a real-size frame takes a minute: back off
            while time.monotonic() < until:
                if answered() > start:
                    self.frame_time_s = time.monotonic() - first_sent   # one frame through the graph, at most
                    return attempt
                spin(0.02)
        return 0

    def _wait_until_due(self, spin, due_wall: float, start_wall: float, start_bag: int, rate: float) -> None:
        while (now := time.perf_counter()) < due_wall:
            if self.clock is not None and now - self._clock_sent >= self.clock_period_s:
                self.publish_clock(start_bag + int((now - start_wall) * rate * 1e9))
            spin(min(0.01, max(0.0, due_wall - time.perf_counter())))

    def _wait_for_window(self, spin, index: int, answered, window: int, timeout_s: float) -> None:
        """Closed loop: wait for an answer; a frame the graph dropped (and counted) must not stall us.
        spin(timeout, until) returns when an answer came (a callback ran): the timeout is only the poll."""
        deadline = time.monotonic() + max(min(timeout_s, max(2.0, 5 * self._period_s())), 3 * self.frame_time_s)
        free = lambda: index - answered() - self.presumed_lost < window  # noqa: E731
        while not free():
            left = deadline - time.monotonic()
            if left <= 0:
                self.presumed_lost += 1
                return
            spin(min(WINDOW_POLL_S, left), free)

    def run(self, spin, answered, rate: float = 0.0, window: int = 2, timeout_s: float = 30.0) -> int:
        """spin(timeout[, until]) runs the executor (until() true: it may return before the timeout); answered()
        counts outputs so far. Returns complete frames published."""
        start_wall, start_bag = time.perf_counter(), None
        for frame in self.frames():
            start_bag = frame.receive_ns if start_bag is None else start_bag
            if rate > 0:
                self._wait_until_due(spin, start_wall + (frame.receive_ns - start_bag) / 1e9 / rate,
                                     start_wall, start_bag, rate)
            elif frame.complete:
                self._wait_for_window(spin, len(self.published_frames), answered, window, timeout_s)
            self.publish_frame(frame)
            spin(0)
        return len(self.published_frames)


def wait_for_answers(spin, answered, published: int, quiet_s: float, settle_s: float) -> None:
    """After the bag: until every frame is answered, or no answer came for quiet_s (the rest are lost), or
    settle_s in all. Frames still in flight keep it waiting (an action-token model's last frames need T more
    steps after the last one is published)."""
    end = time.monotonic() + settle_s
    count, last_answer = answered(), time.monotonic()
    while count < published and time.monotonic() < end and time.monotonic() - last_answer < quiet_s:
        spin(0.02)
        if answered() != count:
            count, last_answer = answered(), time.monotonic()
