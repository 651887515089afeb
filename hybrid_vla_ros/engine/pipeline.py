"""Cross-frame asynchronous pipeline: the prefix runs frame t while the suffix runs frame t-1.

One worker thread per stage, each pinned to its own core set (torch releases the GIL in its kernels).
A semaphore bounds the frames in flight (taken by the prefix, not yet finished by the suffix):
    max_in_flight = 1  -> serial (the same split, no overlap: the paper's ablation)
    max_in_flight >= 2 -> pipelined
Input policies: "latest" (real time: a one-frame mailbox, a newer frame replaces a waiting one and the
replaced frame is counted as dropped) or "lossless" (offline replay: a bounded queue, submit blocks).
Results come out in frame order; a stage error becomes a result with `error` set and the next frame goes on.
"""

from __future__ import annotations

import queue
import threading
import time
from dataclasses import dataclass, field

from ..errors import ConfigError, expect
from .cpu import pin_current_thread
from .stages import PrefixStage, SuffixStage
from .transport import make_transport
from ..types import Frame, Trajectory

POLICIES = ("latest", "lossless")
_STOP = object()


@dataclass
class PipelineConfig:
    max_in_flight: int = 2
    policy: str = "lossless"
    transport: str = "inproc"
    prefix_cores: list[int] | None = None
    suffix_cores: list[int] | None = None
    prefix_threads: int | None = None
    suffix_threads: int | None = None
    join_timeout_s: float = 10.0
    submit_timeout_s: float = 60.0
    # Start the prefix just in time: when the suffix is the slower stage, delay taking the next frame so it
    # finishes when the suffix frees up. Same period, no frame left waiting at the handover (fresher input).
    just_in_time: bool = True

    def __post_init__(self) -> None:
        expect(isinstance(self.max_in_flight, int) and 1 <= self.max_in_flight <= 64, ConfigError,
               f"max_in_flight={self.max_in_flight!r}, expected an integer in 1..64")
        expect(self.policy in POLICIES, ConfigError, f"policy '{self.policy}' is not one of {POLICIES}")
        if self.prefix_cores and self.suffix_cores:
            overlap = sorted(set(self.prefix_cores) & set(self.suffix_cores))
            expect(not overlap, ConfigError, f"prefix and suffix core sets overlap on cores {overlap}")


@dataclass
class FrameResult:
    """One frame's outcome with perf_counter timestamps (seconds)."""
    seq: int
    stamp_ns: int
    partition: int = -1
    trajectory: Trajectory | None = None
    error: str | None = None
    failed_stage: str | None = None
    arrival: float = 0.0
    prefix_start: float = 0.0
    prefix_end: float = 0.0
    sent: float = 0.0
    recv_start: float = 0.0
    suffix_start: float = 0.0
    suffix_end: float = 0.0

    @property
    def ok(self) -> bool:
        return self.error is None

    @property
    def latency_ms(self) -> float:
        """Processing latency: prefix start to trajectory out."""
        return (self.suffix_end - self.prefix_start) * 1e3

    @property
    def age_ms(self) -> float:
        """Arrival to trajectory out (includes waiting for the prefix)."""
        return (self.suffix_end - self.arrival) * 1e3

    @property
    def handover_ms(self) -> float:
        return ((self.sent - self.prefix_end) + (self.suffix_start - self.recv_start)) * 1e3


@dataclass
class PipelineStats:
    submitted: int = 0
    dropped: list[int] = field(default_factory=list)
    completed: int = 0
    failed: int = 0
    prefix_busy_s: float = 0.0
    suffix_busy_s: float = 0.0
    max_in_flight_seen: int = 0


def _ema(previous: float, sample: float, weight: float = 0.3) -> float:
    return sample if previous == 0.0 else (1 - weight) * previous + weight * sample


class Mailbox:
    """The input buffer. latest: capacity 1, newest wins. lossless: bounded FIFO, put blocks."""

    def __init__(self, policy: str, capacity: int):
        self.policy = policy
        self.capacity = 1 if policy == "latest" else capacity
        self.items: list = []
        self.cond = threading.Condition()
        self.closed = False

    def put(self, item, timeout_s: float):
        """Returns the item it displaced (latest policy) or None."""
        with self.cond:
            if self.policy == "latest":
                displaced = self.items.pop() if self.items else None
                self.items.append(item)
                self.cond.notify_all()
                return displaced
            if not self.cond.wait_for(lambda: len(self.items) < self.capacity or self.closed, timeout_s):
                raise TimeoutError(f"pipeline input full for {timeout_s} s (lossless back-pressure)")
            self.items.append(item)
            self.cond.notify_all()
            return None

    def take(self):
        with self.cond:
            self.cond.wait_for(lambda: self.items or self.closed)
            if not self.items:
                return _STOP
            item = self.items.pop(0)
            self.cond.notify_all()
            return item

    def close(self) -> None:
        with self.cond:
            self.closed = True
            self.cond.notify_all()


class Pipeline:
    def __init__(self, prefix: PrefixStage, suffix: SuffixStage, config: PipelineConfig = PipelineConfig(),
                 source=None):
        """source: optional callable () -> Frame | None used instead of submit(): the prefix pulls a fresh
        frame whenever it is free (a camera whose newest frame is always ready); None ends the stream."""
        self.prefix, self.suffix, self.config, self.source = prefix, suffix, config, source
        self.transport = make_transport(config.transport, slots=config.max_in_flight)
        self.stats = PipelineStats()
        self._inbox = Mailbox(config.policy, config.max_in_flight)
        self._handover: queue.Queue = queue.Queue()
        self._results: queue.Queue = queue.Queue()
        self._in_flight = threading.BoundedSemaphore(config.max_in_flight)
        self._in_flight_count = 0
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._threads: list[threading.Thread] = []
        self._host_buffers: queue.Queue = queue.Queue()  # reused pinned buffers (GPU prefix only)
        self._host_buffers_made = 0
        self._prefix_ema_s = 0.0
        self._suffix_ema_s = 0.0
        self._suffix_started: float | None = None

    # ---- control ------------------------------------------------------------------------------------------
    def start(self) -> "Pipeline":
        self._threads = [threading.Thread(target=self._prefix_loop, name="hvla-prefix", daemon=True),
                         threading.Thread(target=self._suffix_loop, name="hvla-suffix", daemon=True)]
        for thread in self._threads:
            thread.start()
        return self

    def submit(self, frame: Frame) -> bool:
        """Hand a frame to the pipeline. Returns False if it displaced (dropped) an older waiting frame."""
        expect(not self._stop.is_set(), ConfigError, "pipeline is closed")
        with self._lock:
            self.stats.submitted += 1
        displaced = self._inbox.put((frame, time.perf_counter()), self.config.submit_timeout_s)
        if displaced is not None:
            with self._lock:
                self.stats.dropped.append(displaced[0].seq)
            return False
        return True

    def set_partition(self, partition: int) -> None:
        """Takes effect at the next frame boundary of the prefix (never inside a frame)."""
        self.prefix.set_partition(partition)  # validates against the zone now; harmless to apply early
        self.suffix.set_partition(partition)

    def get(self, timeout: float | None = None) -> FrameResult | None:
        try:
            return self._results.get(timeout=timeout)
        except queue.Empty:
            return None

    def finish(self, timeout_s: float = 120.0) -> list[FrameResult]:
        """Stop taking input (or, with a source, wait for it to run dry), let frames in flight complete,
        return every result not yet fetched."""
        if self.source is None:
            self._inbox.close()
        deadline = time.monotonic() + timeout_s
        for thread in self._threads:
            thread.join(max(0.0, deadline - time.monotonic()))
        results = []
        while True:
            item = self.get(timeout=0)
            if item is None:
                break
            results.append(item)
        self.close()
        return results

    def close(self) -> None:
        """Stop now. Joins are bounded; a stuck stage is abandoned (daemon thread), never waited on forever."""
        self._stop.set()
        self._inbox.close()
        self._handover.put(_STOP)
        for thread in self._threads:
            thread.join(self.config.join_timeout_s)
        self.transport.close()

    @property
    def alive(self) -> bool:
        return any(t.is_alive() for t in self._threads)

    # ---- workers ------------------------------------------------------------------------------------------
    def _acquire_slot(self) -> bool:
        while not self._stop.is_set():
            if self._in_flight.acquire(timeout=0.05):
                with self._lock:
                    self._in_flight_count += 1
                    self.stats.max_in_flight_seen = max(self.stats.max_in_flight_seen, self._in_flight_count)
                return True
        return False

    def _release_slot(self) -> None:
        with self._lock:
            self._in_flight_count -= 1
        self._in_flight.release()

    def _next_frame(self):
        if self.source is None:
            return self._inbox.take()
        if self._inbox.closed:
            return _STOP
        frame = self.source()
        if frame is None:
            return _STOP
        with self._lock:
            self.stats.submitted += 1
        return frame, time.perf_counter()

    def _stage_to_host(self, state) -> None:
        """GPU -> one of max_in_flight preallocated pinned host buffers (non-blocking copy, then sync)."""
        try:
            buffer = self._host_buffers.get_nowait()
        except queue.Empty:
            buffer = self.prefix.placement.host_buffer(state.hidden.shape, state.hidden.dtype)
            self._host_buffers_made += 1
        if buffer.shape != state.hidden.shape or buffer.dtype != state.hidden.dtype:
            buffer = self.prefix.placement.host_buffer(state.hidden.shape, state.hidden.dtype)
        state.hidden = self.prefix.placement.to_host(state.hidden, out=buffer)
        state.position_ids = state.position_ids.cpu()
        state.attention_mask = state.attention_mask.cpu()
        state.timings["host_buffer"] = buffer

    def _suffix_free_in(self) -> float:
        """Estimated seconds until the suffix has finished everything handed to it so far."""
        with self._lock:
            queued = self._handover.qsize()
            busy_left = 0.0
            if self._suffix_started is not None:
                busy_left = max(0.0, self._suffix_started + self._suffix_ema_s - time.perf_counter())
            return busy_left + queued * self._suffix_ema_s

    def _wait_just_in_time(self) -> None:
        if self.config.just_in_time and self.config.max_in_flight > 1 and self._prefix_ema_s > 0:
            delay = self._suffix_free_in() - self._prefix_ema_s
            if delay > 0.0005:
                self._stop.wait(delay)

    def _prefix_loop(self) -> None:
        pin_current_thread(self.config.prefix_cores, self.config.prefix_threads)
        while self._acquire_slot():
            self._wait_just_in_time()
            item = self._next_frame()
            if item is _STOP:
                self._release_slot()
                break
            frame, arrival = item
            record = FrameResult(seq=frame.seq, stamp_ns=frame.stamp_ns, arrival=arrival)
            record.prefix_start = time.perf_counter()
            try:
                state = self.prefix.run(frame)
                record.partition = state.partition
                record.prefix_end = time.perf_counter()
                if self.prefix.placement.uses_cuda:
                    self._stage_to_host(state)
                handle = self.transport.send(state)
                if self.transport.name != "inproc" and "host_buffer" in state.timings:
                    self._host_buffers.put(state.timings.pop("host_buffer"))  # the bytes are copied out
                record.sent = time.perf_counter()
            except Exception as exc:  # reported in order through the suffix, the next frame goes on
                record.prefix_end = record.sent = time.perf_counter()
                record.error, record.failed_stage, handle = f"{type(exc).__name__}: {exc}", "prefix", None
            with self._lock:
                self.stats.prefix_busy_s += record.sent - record.prefix_start
                self._prefix_ema_s = _ema(self._prefix_ema_s, record.sent - record.prefix_start)
            self._handover.put((record, handle))
        self._handover.put(_STOP)

    def _suffix_loop(self) -> None:
        pin_current_thread(self.config.suffix_cores, self.config.suffix_threads)
        while True:
            item = self._handover.get()
            if item is _STOP:
                break
            record, handle = item
            record.recv_start = time.perf_counter()
            with self._lock:
                self._suffix_started = record.recv_start
            if record.error is None:
                try:
                    state = self.transport.receive(handle)
                    record.suffix_start = time.perf_counter()
                    record.trajectory = self.suffix.run(state)
                    buffer = state.timings.pop("host_buffer", None)
                    if buffer is not None:
                        self._host_buffers.put(buffer)
                except Exception as exc:
                    record.error, record.failed_stage = f"{type(exc).__name__}: {exc}", "suffix"
            if not record.suffix_start:
                record.suffix_start = record.recv_start
            record.suffix_end = time.perf_counter()
            with self._lock:
                self._suffix_started = None
                self._suffix_ema_s = _ema(self._suffix_ema_s, record.suffix_end - record.recv_start)
                self.stats.suffix_busy_s += record.suffix_end - record.recv_start
                self.stats.completed += record.ok
                self.stats.failed += not record.ok
            self._results.put(record)
            self._release_slot()
