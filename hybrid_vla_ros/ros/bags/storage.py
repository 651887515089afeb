"""rosbag2 storage with the pure-Python `rosbags` library (mcap by default, or sqlite3): writing, streaming
reading, the offered QoS of each topic, and the message types a bag can hold.

Messages travel as raw CDR bytes: replay publishes the recorded bytes unchanged, record subscribes with
raw=True, so nothing is converted on the way. Bags written here use rosbag2 metadata version 8 (what
Jazzy's rosbag2 writes); `ros2 bag info/play` read them on Jazzy and Kilted. Humble: docs/INTERFACES.md.
"""

from __future__ import annotations

import importlib
import os
import queue
import re
import struct
import sys
import threading
from collections import defaultdict
from contextlib import contextmanager
from functools import lru_cache
from pathlib import Path
from typing import Iterator, NamedTuple

from rosbags.interfaces import Qos, QosDurability, QosHistory, QosLiveliness, QosReliability, QosTime
from rosbags.rosbag2 import Reader, StoragePlugin, Writer

from ...errors import ConfigError, expect

STORAGE = {"mcap": StoragePlugin.MCAP, "sqlite3": StoragePlugin.SQLITE3}
BAG_VERSION = 8
MSG_PATH_ENV = "HVLA_MSG_PATH"  # extra folders holding <package>/msg/<Name>.msg (os.pathsep-separated)


class BagMessage(NamedTuple):
    receive_ns: int  # the bag's log time: when the recorder received it
    topic: str
    msgtype: str
    raw: bytes


def message_class(msgtype: str):
    """'sensor_msgs/msg/Image' -> the rclpy class."""
    package, _, name = msgtype.split("/")
    return getattr(importlib.import_module(f"{package}.msg"), name)


# ---- QoS: rclpy profile <-> the bag's offered_qos_profiles (same enum values on both sides) ----

def qos_to_bag(profile) -> Qos:
    """An rclpy QoSProfile (what a publisher offers) -> rosbags' Qos, for the bag's metadata."""
    def duration(d) -> QosTime:
        ns = d.nanoseconds if hasattr(d, "nanoseconds") else 0
        return QosTime(ns // 1_000_000_000, ns % 1_000_000_000)
    return Qos(QosHistory(int(profile.history)), int(profile.depth), QosReliability(int(profile.reliability)),
               QosDurability(int(profile.durability)), duration(profile.deadline), duration(profile.lifespan),
               QosLiveliness(int(profile.liveliness)), duration(profile.liveliness_lease_duration),
               bool(profile.avoid_ros_namespace_conventions))


def qos_from_bag(offered: list[Qos], depth: int = 10):
    """The profile to publish (replay) or subscribe (record) with, from what the publishers offer: best
    effort if any of them is, transient local only if all are (what rosbag2 does). No profile: reliable."""
    from rclpy.qos import DurabilityPolicy, QoSProfile, ReliabilityPolicy
    reliable = all(q.reliability != QosReliability.BEST_EFFORT for q in offered)
    latched = bool(offered) and all(q.durability == QosDurability.TRANSIENT_LOCAL for q in offered)
    return QoSProfile(depth=depth,
                      reliability=ReliabilityPolicy.RELIABLE if reliable else ReliabilityPolicy.BEST_EFFORT,
                      durability=DurabilityPolicy.TRANSIENT_LOCAL if latched else DurabilityPolicy.VOLATILE)


def reliable_qos() -> Qos:
    """What a state estimator offers (rclpy's default profile: reliable, volatile, depth 10)."""
    from rclpy.qos import QoSProfile
    return qos_to_bag(QoSProfile(depth=10))


def latched_qos() -> Qos:
    """What tf2's static broadcaster offers on /tf_static (reliable, transient local, depth 1)."""
    from rclpy.qos import DurabilityPolicy, QoSProfile
    return qos_to_bag(QoSProfile(depth=1, durability=DurabilityPolicy.TRANSIENT_LOCAL))


def sensor_qos() -> Qos:
    """What a camera driver offers (rclpy's qos_profile_sensor_data)."""
    from rclpy.qos import qos_profile_sensor_data
    return qos_to_bag(qos_profile_sensor_data)


# ---- message types: the bag type store knows every type it writes ----

PRIMITIVES = {"bool", "byte", "char", "float32", "float64", "int8", "uint8", "int16", "uint16", "int32",
              "uint32", "int64", "uint64", "string", "wstring", "time", "duration"}


def msg_search_path() -> list[Path]:
    """Where .msg files are looked up: $HVLA_MSG_PATH, then each ament prefix's share/ (a sourced ROS or
    Autoware install), then this Python's share/ (the ROS wheels put their .msg files there)."""
    dirs = [Path(p) for p in os.environ.get(MSG_PATH_ENV, "").split(os.pathsep) if p]
    dirs += [Path(p) / "share" for p in os.environ.get("AMENT_PREFIX_PATH", "").split(os.pathsep) if p]
    return dirs + [Path(sys.prefix) / "share"]


def find_msg_file(msgtype: str) -> Path | None:
    package, _, name = msgtype.split("/")
    return next((d / package / "msg" / f"{name}.msg" for d in msg_search_path()
                 if (d / package / "msg" / f"{name}.msg").is_file()), None)


def msg_dependencies(text: str, package: str) -> set[str]:
    """The message types a .msg text refers to ('Header' and 'pkg/Name' and same-package 'Name')."""
    deps = set()
    for line in text.splitlines():
        words = line.split("#", 1)[0].split()
        if not words:  # (constants and default values are of primitive types: skipped below)
            continue
        base = re.sub(r"(\[.*\]|<=\d+)$", "", words[0])
        if base in PRIMITIVES or base.startswith(("string<", "wstring<")):
            continue
        deps.add("std_msgs/msg/Header" if base == "Header" else
                 f"{base.split('/')[0]}/msg/{base.split('/')[-1]}" if "/" in base else f"{package}/msg/{base}")
    return deps


@lru_cache(maxsize=1)
def _base_typestore():
    from rosbags.typesys import Stores, get_typestore
    return get_typestore(Stores.ROS2_KILTED)


def typestore_with(msgtypes) -> object:
    """The bag type store, with every type in `msgtypes` (and what they refer to) registered from the .msg
    files found (msg_search_path) when the built-in store does not know it. Unknown and not found: refused."""
    from rosbags.typesys import get_types_from_msg
    store = _base_typestore()
    pending, found = [t for t in msgtypes if t not in store.fielddefs], {}
    while pending:
        msgtype = pending.pop()
        if msgtype in found or msgtype in store.fielddefs:
            continue
        path = find_msg_file(msgtype)
        expect(path is not None, ConfigError,
               f"message type '{msgtype}' is not known to the bag type store and no {msgtype.split('/')[-1]}.msg "
               f"was found under {[str(d) for d in msg_search_path()]} (set {MSG_PATH_ENV} or source its install)")
        text = path.read_text()
        found.update(get_types_from_msg(text, msgtype))
        pending += sorted(msg_dependencies(text, msgtype.split("/")[0]))
    if found:
        store.register(found)
    return store


def header_first(msgtype: str) -> bool:
    """True when the message starts with a std_msgs/Header (its stamp is then readable from the raw CDR)."""
    fields = typestore_with([msgtype]).fielddefs[msgtype][1]
    return bool(fields) and fields[0][1][1] == "std_msgs/msg/Header"


PLAIN_CDR = (b"\x00\x00", b"\x00\x01")  # encapsulation ids of plain CDR, big and little endian (what ROS 2 writes)


def _stamp_format(raw: bytes) -> str:
    expect(len(raw) >= 12 and bytes(raw[:2]) in PLAIN_CDR, ConfigError,
           f"a {len(raw)}-byte message starting {bytes(raw[:4]).hex()} is not a plain CDR message with a header stamp")
    return "<iI" if raw[1] & 1 else ">iI"


def header_stamp_ns(raw: bytes) -> int:
    """The header stamp of a header-first CDR message: after the 4-byte encapsulation, int32 sec and uint32
    nanosec, little or big endian as the encapsulation says."""
    sec, nanosec = struct.unpack(_stamp_format(raw), raw[4:12])
    return sec * 1_000_000_000 + nanosec


def with_header_stamp(raw: bytes, stamp_ns: int) -> bytes:
    """The same header-first CDR message with its header stamp set to stamp_ns; nothing else is decoded."""
    sec, nanosec = divmod(int(stamp_ns), 1_000_000_000)
    expect(-2**31 <= sec < 2**31, ConfigError, f"stamp {stamp_ns} ns does not fit a header stamp (int32 seconds)")
    return bytes(raw[:4]) + struct.pack(_stamp_format(raw), sec, nanosec) + bytes(raw[12:])


# ---- writing and reading ----

class BagWriter:
    """rosbag2 writer for raw CDR messages, safe to call from any thread: one thread owns the storage
    (sqlite3 connections are bound to the thread that made them) and drains a queue. A topic's offered QoS
    is stored when declared before its first message."""

    def __init__(self, path: str | Path, storage: str = "mcap"):
        expect(storage in STORAGE, ConfigError, f"storage '{storage}' is not one of {sorted(STORAGE)}")
        self.path = Path(path)
        expect(not self.path.exists(), ConfigError, f"bag '{self.path}' already exists; rosbag2 will not overwrite it")
        self.storage = storage
        self.count = defaultdict(int)
        self.offered: dict[str, list[Qos]] = {}
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
                    connections[topic] = writer.add_connection(
                        topic, msgtype, typestore=typestore_with([msgtype]),
                        offered_qos_profiles=self.offered.get(topic, ()))
                writer.write(connections[topic], stamp_ns, data)
                self.count[topic] += 1
        except BaseException as exc:
            self.error = exc
        finally:
            writer.close()

    def declare(self, topic: str, offered: list[Qos]) -> None:
        """The QoS the topic's publishers offer (stored with the topic when its first message is written)."""
        self.offered[topic] = list(offered)

    def write(self, topic: str, msgtype: str, stamp_ns: int, data: bytes) -> None:
        self.queue.put((topic, msgtype, stamp_ns, bytes(data)))

    def close(self) -> None:
        self.queue.put(None)
        self.thread.join(60)
        if self.error is not None:
            raise ConfigError(f"bag '{self.path}': writing failed ({self.error})") from self.error


class BagInfo(NamedTuple):
    types: dict[str, str]  # topic -> msgtype
    offered: dict[str, list[Qos]]  # topic -> offered QoS profiles (may be empty)
    message_count: int
    start_ns: int


def _checked(path: str | Path) -> Path:
    path = Path(path)
    expect(path.is_dir() and (path / "metadata.yaml").is_file(), ConfigError,
           f"bag '{path}': not a rosbag2 folder (no metadata.yaml)")
    return path


@contextmanager
def _reading(path: Path):
    """A damaged bag (metadata, index, chunk or database) makes the reader library raise whatever its parser
    met (its own errors, yaml, sqlite3, zstd, struct, KeyError...): that is a ConfigError naming the bag."""
    try:
        yield
    except (ConfigError, GeneratorExit, KeyboardInterrupt):
        raise
    except Exception as exc:  # noqa: BLE001 (third-party parsers of untrusted files)
        raise ConfigError(f"bag '{path}': unreadable ({type(exc).__name__}: {str(exc)[:200]})") from exc


def bag_info(path: str | Path) -> BagInfo:
    path = _checked(path)
    with _reading(path), Reader(path) as reader:
        return BagInfo({c.topic: c.msgtype for c in reader.connections},
                       {c.topic: list(c.ext.offered_qos_profiles) for c in reader.connections},
                       reader.message_count, reader.start_time)


def stream_bag(path: str | Path) -> Iterator[BagMessage]:
    """The bag's messages in log-time order, one at a time (memory stays bounded whatever the bag's size)."""
    path = _checked(path)
    with _reading(path), Reader(path) as reader:
        for connection, receive_ns, raw in reader.messages():
            yield BagMessage(receive_ns, connection.topic, connection.msgtype, bytes(raw))


def read_bag(path: str | Path) -> tuple[list[BagMessage], dict[str, str]]:
    """Every message (small bags: tests, outputs) and the topic -> type map."""
    return list(stream_bag(path)), bag_info(path).types
