"""A warm standby for the suffix: a second suffix process with its weights loaded, subscribed and idle, that
takes over within a fraction of a second when the active one goes silent (respawn alone takes seconds:
a new interpreter, torch, the model, discovery).

Every suffix of a graph with `warm_standby` runs a `SuffixRole`. The active one beats on ROLE_TOPIC every
BEAT_S from its executor (never from a compute thread, so a long frame does not silence it). A standby keeps
the boundary messages of the frames not yet published without running them (it never reads a shared-memory slot:
that would take it from the active one) and follows the frames published (their camera stamps, from
trajectory_info: a re-timed trajectory's header is its publish time). Its buffer
(engine/pipeline/standby_buffer.py) holds, per frame of `chunks` messages, the frames the active one may hold
(its queue, frames_in_flight) plus those of the takeover window (TAKEOVER_S and two beats); a frame pushed out
and still unpublished at a takeover is counted as dropped (standby_full). When no beat came for TAKEOVER_S it
becomes active: it runs the buffered messages newer than the last published trajectory, then serves as usual;
nothing already published is published again (the stage refuses stamps not newer).
Everyone starts by listening for LISTEN_S: a respawned primary that hears the promoted standby stands by in
its turn. Of two active ones (a stalled primary that comes back), the one active longer stays.
"""

from __future__ import annotations

import secrets
import time

from diagnostic_msgs.msg import DiagnosticStatus, KeyValue

from ...engine.pipeline.standby_buffer import DROP_REASON, StandbyBuffer
from ..topics import SUFFIX_ROLE_TOPIC

BEAT_S = 0.05            # the active suffix's heartbeat period
TAKEOVER_S = 0.3         # silence after which a standby takes over (six beats missed)
LISTEN_S = 2.0           # every suffix listens this long before it may become active: DDS discovery of a
                         # new process takes up to ~1.5 s here (at 0.6 s a respawned primary missed the
                         # standby's beats and both served for 1.6 s)
FIRST_WAIT_S = 5.0       # a primary that sees another suffix but never heard it beat goes active after
                         # this (twice this for a standby that never heard an active one)
WINDOW_S = TAKEOVER_S + 2 * BEAT_S   # frames that reach a standby after the active one's last beat and before
                                     # it takes over (the silence is noticed at a tick: up to a beat late)


class SuffixRole:
    def __init__(self, node, standby: bool, on_promote, frames_in_flight: int, chunks: int):
        """standby: start as the standby (else: become active once nobody else is). on_promote(buffered):
        the messages to run, oldest first, when this one becomes active. frames_in_flight: the frames an active
        suffix may hold unpublished (its queue); chunks: boundary messages per frame (the `chunks` parameter)."""
        self.node, self.on_promote, self.prefers_standby = node, on_promote, standby
        self.instance, self.started = secrets.randbits(62), time.monotonic()
        self.active_since_ns = 0          # wall clock when this one became active (0: standing by)
        self.heard: float | None = None   # when the last beat of another active suffix came
        self.buffer = StandbyBuffer(frames_in_flight, chunks, WINDOW_S)
        self.takeovers = 0
        self.pub = node.configured_publisher(DiagnosticStatus, SUFFIX_ROLE_TOPIC, 10)
        node.configured_subscription(DiagnosticStatus, SUFFIX_ROLE_TOPIC, self._on_beat, 10)
        # the frames' camera stamps: a re-timed trajectory's header is its publish time (ros/outputs/present.py)
        node.configured_subscription(DiagnosticStatus, "~/debug/trajectory_info", self._on_published, 10)
        node.configured_timer(BEAT_S, self._tick)

    def _on_published(self, msg) -> None:
        """The newest frame stamp published by any suffix (its trajectory_info's stamp_ns), so nothing is
        published twice (also in the moment two are active, before the later one stands by)."""
        stamp_ns = next((int(kv.value) for kv in msg.values if kv.key == "stamp_ns"), None)
        if stamp_ns is None:
            return
        self.node.last_stamp_ns = max(self.node.last_stamp_ns, stamp_ns)
        self.buffer.forget(self.node.last_stamp_ns)

    @property
    def active(self) -> bool:
        return self.active_since_ns > 0

    def keep(self, item, stamp_ns: int | None) -> None:
        """A standby's boundary message (data, received), kept for a takeover; one without a frame stamp (not an
        envelope: the active one refuses and counts it) is not."""
        if stamp_ns is None:
            return
        for lost in self.buffer.keep(item, stamp_ns, item[1]):
            self.node.health.drop(DROP_REASON, lost)

    def _on_beat(self, msg: DiagnosticStatus) -> None:
        values = {kv.key: kv.value for kv in msg.values}
        try:
            theirs = (int(values["active_since_ns"]), int(values["instance"]))
        except (KeyError, ValueError):
            return
        if theirs[1] == self.instance:
            return
        self.heard = time.monotonic()
        if self.active and theirs < (self.active_since_ns, self.instance):  # it was active first: it stays
            self.active_since_ns = 0
            self.node.get_logger().warning("another suffix has been active longer: standing by")

    def _tick(self) -> None:
        if self.active:
            self.pub.publish(DiagnosticStatus(name=f"{self.node.get_name()}: role", message="active", values=[
                KeyValue(key="instance", value=str(self.instance)),
                KeyValue(key="active_since_ns", value=str(self.active_since_ns))]))
            return
        now = time.monotonic()
        age = now - self.started
        if age < LISTEN_S:
            return
        if self.heard is not None:
            silent = now - self.heard > TAKEOVER_S
        elif self.prefers_standby:
            silent = age > 2 * FIRST_WAIT_S
        else:  # a primary alone (no other suffix discovered, no boundary traffic yet: a fresh graph) starts at
            # once; one that finds the graph running (a respawn) gives an active one's beats time to arrive
            # (discovery of a new process can lag: a respawned primary once served beside the standby)
            alone = self.node.count_publishers(SUFFIX_ROLE_TOPIC) <= 1 and not self.buffer.seen
            silent = alone or age > FIRST_WAIT_S
        if silent:
            self._promote()

    def _promote(self) -> None:
        self.active_since_ns, self.takeovers = time.time_ns(), self.takeovers + 1
        buffered, lost = self.buffer.take(self.node.last_stamp_ns)
        for stamp_ns in lost:   # pushed out of the buffer, never published: lost with the active one
            self.node.health.drop(DROP_REASON, stamp_ns)
        if self.heard is not None:
            self.node.get_logger().warning(f"no active suffix for {TAKEOVER_S:g} s: taking over "
                                           f"({len(buffered)} boundary messages buffered, {len(lost)} frames "
                                           f"pushed out of the buffer lost: {DROP_REASON})")
        self._tick()   # say so at once
        self.on_promote(buffered)

    def check(self) -> tuple:
        """The role's diagnostic status (check name, level, message, values)."""
        role, b = "active" if self.active else "standby", self.buffer
        return ("role", 0, role, {"role": role, "takeovers": str(self.takeovers), "buffered": str(b.messages),
                                  "buffer_frames": f"{b.frames} + up to {b.frames} of the last {b.window_s:g} s",
                                  "chunks": str(b.chunks), "pushed_out": str(b.pushed_out),
                                  "pushed_out_lost": str(b.lost)})
