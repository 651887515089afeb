"""rosbag2 record and replay with the pure-Python `rosbags` library (mcap by default, or sqlite3).

Messages travel as raw CDR bytes: replay publishes the recorded bytes unchanged (rclpy publishes bytes),
record subscribes with raw=True, so nothing is converted on the way. Bags written here are read by
`ros2 bag info/play` on a ROS machine (metadata version 8: Jazzy and newer; Humble's rosbag2 may refuse it).
"""

from __future__ import annotations

import importlib
import queue
import threading
import time
from collections import defaultdict
from pathlib import Path

from rosbags.rosbag2 import Reader, StoragePlugin, Writer

from ..errors import ConfigError, expect

STORAGE = {"mcap": StoragePlugin.MCAP, "sqlite3": StoragePlugin.SQLITE3}
BAG_VERSION = 8


def message_class(msgtype: str):
    """'sensor_msgs/msg/Image' -> the rclpy class."""
    package, _, name = msgtype.split("/")
    return getattr(importlib.import_module(f"{package}.msg"), name)


class BagWriter:
    """rosbag2 writer for raw CDR messages, safe to call from any thread: one thread owns the storage
    (sqlite3 connections are bound to the thread that made them) and drains a queue."""

    def __init__(self, path: str | Path, storage: str = "mcap"):
        expect(storage in STORAGE, ConfigError, f"storage '{storage}' is not one of {sorted(STORAGE)}")
        self.path = Path(path)
        expect(not self.path.exists(), ConfigError, f"bag '{self.path}' already exists; rosbag2 will not overwrite it")
        self.storage = storage
        self.count = defaultdict(int)
        self.queue: queue.Queue = queue.Queue()
        self.error: BaseException | None = None
        self.thread = threading.Thread(target=self._drain, name="hvla-bag-writer", daemon=True)
        self.thread.start()

    def _drain(self) -> None:
        connections = {}
        try:
            writer = Writer(self.path, version=BAG_VERSION, storage_plugin=STORAGE[self.storage])
            writer.open()
        except BaseException as exc:  # reported by close()
            self.error = exc
            return
        try:
            while (item := self.queue.get()) is not None:
                topic, msgtype, stamp_ns, data = item
                if topic not in connections:
                    connections[topic] = writer.add_connection(topic, msgtype, typestore=_typestore())
                writer.write(connections[topic], stamp_ns, data)
                self.count[topic] += 1
        except BaseException as exc:
            self.error = exc
        finally:
            writer.close()

    def write(self, topic: str, msgtype: str, stamp_ns: int, data: bytes) -> None:
        self.queue.put((topic, msgtype, stamp_ns, bytes(data)))

    def close(self) -> None:
        self.queue.put(None)
        self.thread.join(60)
        if self.error is not None:
            raise ConfigError(f"bag '{self.path}': writing failed ({self.error})") from self.error


def _typestore():
    from rosbags.typesys import Stores, get_typestore
    return get_typestore(Stores.ROS2_KILTED)


def read_bag(path: str | Path):
    """-> list of (timestamp ns, topic, msgtype, raw bytes) in time order, and the topic -> type map."""
    path = Path(path)
    expect(path.is_dir() and (path / "metadata.yaml").is_file(), ConfigError,
           f"bag '{path}': not a rosbag2 folder (no metadata.yaml)")
    with Reader(path) as reader:
        types = {c.topic: c.msgtype for c in reader.connections}
        messages = [(t, c.topic, c.msgtype, bytes(raw)) for c, t, raw in reader.messages()]
    return sorted(messages, key=lambda m: m[0]), types


def frame_groups(messages):
    """Messages sharing a timestamp form one frame (cameras + kinematic state of one time step)."""
    groups: dict[int, list] = defaultdict(list)
    for message in messages:
        groups[message[0]].append(message)
    # within a step, non-image messages (kinematic state) go first so the frame sees them
    return [sorted(groups[t], key=lambda m: "Image" in m[2]) for t in sorted(groups)]


class Replayer:
    """Publishes a bag's messages. rate > 0: recorded timing scaled by rate; rate == 0: as fast as the graph
    takes it (closed loop: at most `window` frames published and not yet answered)."""

    def __init__(self, node, path: str | Path, remap: dict[str, str] | None = None):
        self.node = node
        self.messages, self.types = read_bag(path)
        self.remap = remap or {}
        self.publishers = {topic: node.create_publisher(message_class(t), self.remap.get(topic, topic), 10)
                           for topic, t in self.types.items()}
        self.published_frames: list[tuple[int, float]] = []  # (bag stamp, wall time published)
        self.presumed_lost = 0  # closed loop: frames never answered within the wait (dropped by the graph)

    def topics(self) -> dict[str, str]:
        return {self.remap.get(topic, topic): t for topic, t in self.types.items()}

    def wait_for_subscribers(self, timeout_s: float = 10.0, spin=None) -> bool:
        """Every camera topic has a subscriber (other topics, e.g. a kinematic state nobody reads, may not)."""
        cameras = [p for topic, p in self.publishers.items() if "Image" in self.types[topic]] or \
            list(self.publishers.values())
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            if all(p.get_subscription_count() > 0 for p in cameras):
                return True
            spin(0.05) if spin else time.sleep(0.05)
        return False

    def _period_s(self) -> float:
        times = [wall for _, wall in self.published_frames[-6:]]
        return (times[-1] - times[0]) / (len(times) - 1) if len(times) > 1 else 1.0

    def publish_group(self, group) -> None:
        for stamp, topic, _msgtype, raw in group:
            self.publishers[topic].publish(raw)
        self.published_frames.append((group[0][0], time.perf_counter()))

    def first_stamp(self) -> int:
        return frame_groups(self.messages)[0][0][0]

    def probe(self, spin, answered, timeout_s: float = 60.0, every_s: float = 3.0) -> int:
        """Readiness probe: publish the first frame, stamped before the bag starts, until the graph answers
        (DDS matching is asymmetric: the first messages after start-up can be lost before both sides match).
        Each attempt carries a newer stamp (10 s before the bag, +10 ms per attempt) so the graph does not
        reject a retry as out of order. Returns the number of attempts sent once answered, 0 on timeout."""
        from rclpy.serialization import deserialize_message, serialize_message
        group = frame_groups(self.messages)[0]
        decoded = [(topic, deserialize_message(raw, message_class(msgtype))) for _, topic, msgtype, raw in group]
        start, deadline, attempt = answered(), time.monotonic() + timeout_s, 0
        while time.monotonic() < deadline:
            for topic, msg in decoded:
                if hasattr(msg, "header"):
                    ns = group[0][0] - 10_000_000_000 + attempt * 10_000_000
                    msg.header.stamp.sec, msg.header.stamp.nanosec = ns // 1_000_000_000, ns % 1_000_000_000
                self.publishers[topic].publish(serialize_message(msg))
            attempt += 1
            until = time.monotonic() + every_s
            while time.monotonic() < until:
                if answered() > start:
                    return attempt
                spin(0.02)
        return 0

    def run(self, spin, answered, rate: float = 0.0, window: int = 2, timeout_s: float = 30.0) -> int:
        """spin(timeout) runs the executor; answered() counts outputs so far. Returns frames published."""
        groups = frame_groups(self.messages)
        start_wall, start_bag = time.perf_counter(), groups[0][0][0] if groups else 0
        for index, group in enumerate(groups):
            if rate > 0:
                due = start_wall + (group[0][0] - start_bag) / 1e9 / rate
                while time.perf_counter() < due:
                    spin(min(0.01, max(0.0, due - time.perf_counter())))
            else:
                # closed loop: wait for an answer; a frame the graph dropped (and counted) must not stall us
                deadline = time.monotonic() + min(timeout_s, max(2.0, 5 * self._period_s()))
                while index - answered() - self.presumed_lost >= window:
                    if time.monotonic() > deadline:
                        self.presumed_lost += 1
                        break
                    spin(0.005)
            self.publish_group(group)
            spin(0)
        return len(groups)


class Recorder:
    """Subscribes (raw) to topics and writes every message into a bag with its receive time."""

    def __init__(self, node, path: str | Path, topics: dict[str, str], storage: str = "mcap", qos=10):
        self.writer = BagWriter(path, storage)
        self.subscriptions = [
            node.create_subscription(message_class(msgtype), topic,
                                     lambda raw, t=topic, m=msgtype: self.writer.write(t, m, time.time_ns(), raw),
                                     qos, raw=True)
            for topic, msgtype in topics.items()]

    def close(self) -> dict[str, int]:
        self.writer.close()
        return dict(self.writer.count)
