"""A stage worker: one pinned thread applying a handler to items from a mailbox or a source (ROS-free).

The one stage mechanism of the package: the ROS nodes use it so that subscription callbacks only enqueue
while the compute runs on the stage's own cores, and the benchmark pipeline is two of them and a handover.
`latest` drops (and counts) a waiting item when a newer one arrives, `lossless` queues (bounded).
An optional `admit` hook runs before each take (the prefix's frames-in-flight gate, engine/pipeline/flight.py).
"""

from __future__ import annotations

import threading
import time
from collections import Counter, deque
from dataclasses import dataclass, field

from ...errors import HybridVLAError
from ..cpu import pin_current_thread
from .mailbox import STOP, Mailbox

POLICIES = ("latest", "lossless")
STUCK_FACTOR = 5.0   # a frame running this many times the longest recent stage time is stuck (or stuck_after_s)


class WorkerStartError(HybridVLAError):
    """A stage worker's thread could not come up (its cores refused, its start hook raised)."""


OK, WARN, ERROR = 0, 1, 2
LEVEL_NAMES = {OK: "OK", WARN: "WARN", ERROR: "ERROR"}


@dataclass
class StageHealth:
    """Counters and levels behind a node's /diagnostics: stage time, period, backlog, drops, rejections."""
    warn_ms: float = 500.0
    error_after: int = 10
    processed: int = 0
    dropped: int = 0
    drop_reasons: Counter = field(default_factory=Counter)  # displaced (latest wins), queue_full (lossless)
    failed: int = 0
    failures: Counter = field(default_factory=Counter)   # exceptions caught at the frame, by type name
    consecutive_failures: int = 0
    rejected: Counter = field(default_factory=Counter)
    consecutive_nonfinite: int = 0  # rejections for NaN/Inf in a row: ERROR once it reaches error_after
    times_ms: deque = field(default_factory=lambda: deque(maxlen=100))
    ends: deque = field(default_factory=lambda: deque(maxlen=100))
    consecutive_slow: int = 0
    lock: threading.Lock = field(default_factory=threading.Lock)
    # listener(kind, reason, stamp_ns): every frame lost here, one call per frame whose stamp is known
    # (kind: "dropped", "rejected" or "failed"); the nodes publish them on ~/debug/dropped_frames.
    listener: object = None

    def _tell(self, kind: str, reason: str, stamp_ns: int | None) -> None:
        if self.listener is not None and stamp_ns is not None:
            self.listener(kind, reason, stamp_ns)

    def record(self, ms: float) -> None:
        with self.lock:
            self.processed += 1
            self.times_ms.append(ms)
            self.ends.append(time.monotonic())
            self.consecutive_slow = self.consecutive_slow + 1 if ms > self.warn_ms else 0
            self.consecutive_nonfinite = 0

    def handled(self) -> None:
        """A frame whose handler returned (served or rejected with a reason): the failure streak is over."""
        with self.lock:
            self.consecutive_failures = 0

    def fail(self, kind: str, stamp_ns: int | None = None) -> None:
        """A frame whose handler raised: counted by kind; ERROR once it happens error_after times in a row."""
        with self.lock:
            self.failed += 1
            self.failures[kind] += 1
            self.consecutive_failures += 1
        self._tell("failed", kind, stamp_ns)

    def failure_check(self) -> tuple[str, int, str, dict]:
        with self.lock:
            failures, streak = dict(self.failures), self.consecutive_failures
        level = ERROR if streak >= self.error_after else WARN if streak else OK
        return ("failures", level, f"{sum(failures.values())} frames failed, {streak} in a row",
                {"failed": str(sum(failures.values())), **{f"failed.{k}": str(v) for k, v in failures.items()}})

    def drop(self, reason: str, stamp_ns: int | None = None) -> None:
        with self.lock:
            self.dropped += 1
            self.drop_reasons[reason] += 1
        self._tell("dropped", reason, stamp_ns)

    def reject(self, reason: str, stamp_ns: int | None = None) -> None:
        with self.lock:
            self.rejected[reason] += 1
            if reason.startswith("nonfinite"):
                self.consecutive_nonfinite += 1
        self._tell("rejected", reason, stamp_ns)

    def nonfinite_check(self, rejected: dict, streak: int) -> tuple[str, int, str, dict]:
        """NaN/Inf refused (boundary states or outputs): WARN once seen, ERROR while it persists."""
        counts = {k: v for k, v in rejected.items() if k.startswith("nonfinite")}
        level = ERROR if streak >= self.error_after else WARN if counts else OK
        return ("nonfinite", level, f"{sum(counts.values())} refused for NaN/Inf, {streak} in a row",
                {"nonfinite": str(sum(counts.values())), "nonfinite_in_a_row": str(streak),
                 **{f"rejected.{k}": str(v) for k, v in counts.items()}})

    def stage_ms(self, recent: int = 5) -> float:
        """Median of the last `recent` stage times (recent, so a partition change shows up quickly)."""
        with self.lock:
            last = sorted(list(self.times_ms)[-recent:])
        return last[len(last) // 2] if last else 0.0

    def longest_ms(self, recent: int = 16) -> float:
        with self.lock:   # the longest of the last `recent` stage times (0: none yet)
            return max(list(self.times_ms)[-recent:], default=0.0)

    def period_ms(self) -> float:
        with self.lock:
            ends = list(self.ends)
        gaps = sorted(b - a for a, b in zip(ends, ends[1:]))
        return gaps[len(gaps) // 2] * 1e3 if gaps else 0.0

    def time_level(self) -> int:
        if self.consecutive_slow >= self.error_after:
            return ERROR
        return WARN if self.consecutive_slow > 0 else OK

    def checks(self, backlog: int) -> list[tuple[str, int, str, dict]]:
        """(check name, level, message, key values) for each diagnostic status."""
        stage, period = self.stage_ms(), self.period_ms()
        level = self.time_level()
        with self.lock:
            rejected, nonfinite_streak = dict(self.rejected), self.consecutive_nonfinite
            counts = {"processed": self.processed, "dropped": self.dropped, "failed": self.failed,
                      **{f"dropped.{k}": v for k, v in self.drop_reasons.items()}}
        time_msg = {OK: "within threshold", WARN: f"above {self.warn_ms} ms",
                    ERROR: f"above {self.warn_ms} ms for {self.consecutive_slow} frames"}[level]
        return [
            ("processing_time", level, time_msg, {"stage_time_ms": f"{stage:.3f}", "warn_ms": f"{self.warn_ms}",
                                                  "processed": str(counts["processed"])}),
            ("period", OK, "median interval between outputs", {"period_ms": f"{period:.3f}"}),
            ("backlog", OK if backlog <= 1 else WARN, f"{backlog} waiting", {"backlog": str(backlog)}),
            ("drops", OK if not counts["dropped"] else WARN, f"{counts['dropped']} dropped",
             {k: str(v) for k, v in counts.items()}),
            self.nonfinite_check(rejected, nonfinite_streak),
            ("rejected_inputs", OK if not rejected else WARN, f"{sum(rejected.values())} rejected",
             {"rejected": str(sum(rejected.values())), **{f"rejected.{k}": str(v) for k, v in rejected.items()}}),
        ]


class StageWorker:
    """Never dies of a frame: any exception of the handler is caught at that frame, counted by kind in the
    health, passed to `on_error` (the node logs it, throttled), and the worker takes the next item.
    `liveness_check()` says ERROR when the thread is gone or one item has been running for `stuck_after_s`, or
    STUCK_FACTOR x the longest recent stage time where longer (a real-size suffix: seconds per frame)."""

    def __init__(self, name: str, handler, policy: str = "lossless", capacity: int = 16,
                 cores: list[int] | None = None, threads: int | None = None, health: StageHealth | None = None,
                 on_start=None, on_error=None, stuck_after_s: float = 30.0, admit=None, on_admitted_stop=None,
                 source=None, on_displaced=None, stamp_of=None, pending=None):
        """admit(stopped) -> bool: called before each take; False ends the worker (on_admitted_stop() is
        called when a take after a successful admit finds the end of input). source() -> item | None: pull
        items from it instead of the mailbox (None ends the worker); pending() -> the items waiting there.
        on_displaced(item): a latest-policy drop. stamp_of(item) -> an item's frame stamp, or None."""
        self.name, self.handler, self.on_start, self.on_error = name, handler, on_start, on_error
        self.stuck_after_s, self.admit, self.on_admitted_stop = stuck_after_s, admit, on_admitted_stop
        self.source, self.on_displaced, self.pending = source, on_displaced, pending or (lambda: 0)
        self.stamp_of = stamp_of or (lambda item: None)
        self._busy_since: float | None = None
        self._hard_stop = False
        self.cores, self.threads = cores, threads
        self.health = health or StageHealth()
        self._mailbox = Mailbox(policy, capacity)
        self._thread = threading.Thread(target=self._loop, name=f"hvla-{name}", daemon=True)
        self._up = threading.Event()            # set by the thread once pinned and started, or failed to
        self._start_error: BaseException | None = None
        self.busy = False
        self.cpu_s = 0.0   # the thread's CPU seconds (time.thread_time), set when it ends

    def start(self) -> "StageWorker":
        """Returns once the thread is up: pinned to its cores, `on_start` done. A thread that cannot get there
        ends at once and this raises WorkerStartError with the reason (nothing is left running)."""
        self._thread.start()
        while not self._up.wait(0.05) and self._thread.is_alive():
            pass   # on_start may take long (a suffix's weights copied to its NUMA node): no time limit
        if self._start_error is not None or not self._up.is_set():
            self._thread.join()
            raise WorkerStartError(f"worker {self.name} could not start on cores {self.cores or 'unpinned'}: "
                                   f"{type(self._start_error).__name__}: {self._start_error}")
        return self

    def submit(self, item, timeout_s: float = 0.0) -> bool:
        """Never blocks an executor for long: False when the item displaced a waiting one (latest policy) or
        found a lossless mailbox still full after `timeout_s`; either is counted as a drop with its reason."""
        try:
            displaced = self._mailbox.put(item, timeout_s)
        except TimeoutError:
            self.health.drop("queue_full", self.stamp_of(item))
            return False
        if displaced is not None:
            self.health.drop("displaced", self.stamp_of(displaced))
            if self.on_displaced is not None:
                self.on_displaced(displaced)
            return False
        return True

    @property
    def closed(self) -> bool:
        return self._mailbox.closed

    def join(self, timeout_s: float) -> None:
        self._thread.join(timeout_s)

    @property
    def alive(self) -> bool:
        return self._thread.is_alive()

    def backlog(self) -> int:
        with self._mailbox.cond:
            waiting = len(self._mailbox.items)
        return waiting + self.pending() + (1 if self.busy else 0)

    def room(self) -> int:
        return self._mailbox.room()

    def stuck_after(self) -> float:
        return max(self.stuck_after_s, STUCK_FACTOR * self.health.longest_ms() / 1e3)

    def liveness_check(self) -> tuple[str, int, str, dict]:
        alive = self._thread.is_alive()
        busy_since = self._busy_since
        busy_s = time.monotonic() - busy_since if busy_since is not None else 0.0
        if not alive:
            level, message = ERROR, f"worker thread {self._thread.name} is not running"
        elif busy_s > self.stuck_after():
            level, message = ERROR, f"one frame has been running for {busy_s:.1f} s (stuck?)"
        else:
            level, message = OK, "alive"
        return ("worker", level, message, {"alive": str(alive), "busy_s": f"{busy_s:.3f}"})

    def _take(self):
        if self.source is None:
            return self._mailbox.take()
        if self._mailbox.closed:
            return STOP
        item = self.source()
        return STOP if item is None else item

    def close(self, timeout_s: float = 5.0, drain: bool = False) -> None:
        """Stop taking input. drain=False: stop now (an item in progress finishes; waiting ones are dropped,
        each counted as `shutdown` with its stamp); drain=True: finish what is waiting first. Bounded: a stuck
        handler is abandoned (daemon thread)."""
        self._hard_stop = not drain
        if not drain:
            with self._mailbox.cond:
                left, self._mailbox.items = self._mailbox.items, []
            for item in left:
                self.health.drop("shutdown", self.stamp_of(item))
        self._mailbox.close()
        self._thread.join(timeout_s)

    def _come_up(self) -> bool:
        """On the worker's thread: pin it and run on_start; -> False (the reason kept for start()) when either
        raised."""
        try:
            pin_current_thread(self.cores, self.threads)
            if self.on_start is not None:
                self.on_start()
        except Exception as exc:  # noqa: BLE001 - any failure here is start()'s to report
            self._start_error = exc
        finally:
            self._up.set()
        return self._start_error is None

    def _loop(self) -> None:
        try:
            self._serve()
        finally:
            self.cpu_s = time.thread_time()

    def _serve(self) -> None:
        if not self._come_up():
            return
        while True:
            if self.admit is not None and not self.admit(lambda: self._mailbox.closed and self._hard_stop):
                return
            item = self._take()
            if item is STOP:
                if self.admit is not None and self.on_admitted_stop is not None:
                    self.on_admitted_stop()
                return
            self.busy, self._busy_since = True, time.monotonic()
            try:
                self.handler(item)
                self.health.handled()
            except Exception as exc:  # noqa: BLE001 - a frame's failure must never end the stage
                self.health.fail(type(exc).__name__, self.stamp_of(item))
                if self.on_error is not None:
                    self.on_error(exc)
            finally:
                self.busy, self._busy_since = False, None
