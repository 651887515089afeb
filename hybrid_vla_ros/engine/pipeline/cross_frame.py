"""Cross-frame asynchronous pipeline: the prefix runs frame t while the suffix runs frame t-1.

The same mechanism as the ROS graph: two stage workers (engine/pipeline/worker.py, each pinned to its own core set;
torch releases the GIL in its kernels), the handover of engine/handover/endpoints.py (envelope, in-process registry,
shared-memory ring or inline bytes), and the frames-in-flight gate with its just-in-time start
(engine/pipeline/flight.py):
    max_in_flight = 1  -> serial (the same split, no overlap: the paper's ablation)
    max_in_flight >= 2 -> pipelined
Input policies: "latest" (real time: a one-frame mailbox, a newer frame replaces a waiting one and the
replaced frame is counted as dropped) or "lossless" (offline replay: a bounded queue, submit blocks).
Results come out in frame order; a stage error becomes a result with `error` set and the next frame goes on.
"""

from __future__ import annotations

import itertools
import queue
import threading
import time
from dataclasses import dataclass

from ...errors import ConfigError, expect
from ...types import Frame
from ..chunking import chunk_count, parse_chunks
from .flight import FlightControl
from .results import FrameResult, PipelineStats
from ..handover.endpoints import HandoverDecoder, HandoverEncoder
from ..stages import PrefixStage, SuffixStage
from .worker import POLICIES, StageHealth, StageWorker

_RING_NAMES = itertools.count()
SUBMIT_TIMEOUT_FLOOR_S = 60.0
FINISH_STALL_FLOOR_S = 600.0   # finish(): a stall this long (or 10 x the slower stage) ends the wait


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
    submit_timeout_s: float | None = None   # lossless back-pressure bound; None: derived (Pipeline.submit_timeout)
    # Start the prefix just in time: when the suffix is the slower stage, delay taking the next frame so it
    # finishes when the suffix frees up. Same period, no frame left waiting at the handover (fresher input).
    just_in_time: bool = True
    # Chunked prefill across the cut (engine/chunking.py): 1 = whole frames, k = 2..64 token chunks, or
    # "camera". The just-in-time start then aims at the first chunk being ready when the suffix frees up.
    chunks: int | str = 1

    def __post_init__(self) -> None:
        self.chunks = parse_chunks(self.chunks)
        expect(isinstance(self.max_in_flight, int) and 1 <= self.max_in_flight <= 64, ConfigError,
               f"max_in_flight={self.max_in_flight!r}, expected an integer in 1..64")
        expect(self.policy in POLICIES, ConfigError, f"policy '{self.policy}' is not one of {POLICIES}")
        if self.prefix_cores and self.suffix_cores:
            overlap = sorted(set(self.prefix_cores) & set(self.suffix_cores))
            expect(not overlap, ConfigError, f"prefix and suffix core sets overlap on cores {overlap}")


class Pipeline:
    def __init__(self, prefix: PrefixStage, suffix: SuffixStage, config: PipelineConfig = PipelineConfig(),
                 source=None):
        """source: optional callable () -> Frame | None used instead of submit(): the prefix pulls a fresh
        frame whenever it is free (a camera whose newest frame is always ready); None ends the stream."""
        self.prefix, self.suffix, self.config, self.source = prefix, suffix, config, source
        self.flight = FlightControl(config.max_in_flight, config.just_in_time)
        self.chunk_count = chunk_count(prefix.model, config.chunks)   # boundary states per frame
        states_in_flight = config.max_in_flight * self.chunk_count
        self.encoder = HandoverEncoder(config.transport, ring_slots=states_in_flight,
                                       ring_name=f"pipe{next(_RING_NAMES)}")
        self.decoder = HandoverDecoder()
        self.stats = PipelineStats()
        self._lock = threading.Lock()
        self._results: queue.Queue = queue.Queue()
        self._host_buffers: queue.Queue = queue.Queue()  # reused pinned buffers (GPU prefix only)
        self._closed = False
        self.prefix_worker = StageWorker(
            "prefix", self._run_prefix, config.policy, config.max_in_flight, config.prefix_cores,
            config.prefix_threads, StageHealth(), admit=self.flight.admit, on_admitted_stop=self.flight.release,
            source=self._pull if source else None, on_displaced=lambda item: self._count_drop(item[0].seq))
        self.suffix_worker = StageWorker("suffix", self._run_suffix, "lossless", states_in_flight,
                                         config.suffix_cores, config.suffix_threads, StageHealth())

    # ---- control ------------------------------------------------------------------------------------------
    def start(self) -> "Pipeline":
        self.suffix_worker.start()
        self.prefix_worker.start()
        return self

    def submit(self, frame: Frame) -> bool:
        """Hand a frame to the pipeline. Returns False if it displaced (dropped) an older waiting frame."""
        expect(not self._closed and not self.prefix_worker.closed, ConfigError, "pipeline is closed")
        with self._lock:
            self.stats.submitted += 1
        return self.prefix_worker.submit((frame, time.perf_counter()), self.submit_timeout())

    def submit_timeout(self) -> float:
        """How long a lossless submit waits for room: submit_timeout_s, or derived: max(60 s, 10 x max_in_flight
        x the slower stage's measured time per frame); a real-size frame can take over a minute on a CPU."""
        if self.config.submit_timeout_s is not None:
            return self.config.submit_timeout_s
        slower = max(self.flight.prefix_s, self.flight.suffix_s)
        return max(SUBMIT_TIMEOUT_FLOOR_S, 10 * self.config.max_in_flight * slower)

    def set_partition(self, partition: int) -> None:
        """Takes effect at the next frame boundary of the prefix (never inside a frame)."""
        self.prefix.set_partition(partition)  # validates against the zone now; harmless to apply early
        self.suffix.set_partition(partition)

    def backlog(self) -> int:
        """Frames handed to the suffix and not finished (the scheduler's backlog signal)."""
        return self.suffix_worker.backlog()

    def handover_pending(self) -> int:
        """This pipeline's boundary states in the in-process registry (sent, not yet taken)."""
        return self.encoder.pending()

    def get(self, timeout: float | None = None) -> FrameResult | None:
        try:
            return self._results.get(timeout=timeout)
        except queue.Empty:
            return None

    def finish(self, timeout_s: float | None = None) -> list[FrameResult]:
        """Stop taking input (or, with a source, wait for it to run dry), let frames in flight complete,
        return every result not yet fetched. timeout_s: give up once no frame has finished for this long;
        None: derived, max(600 s, 10 x the slower stage's measured time per frame) (a real-size CPU frame
        takes a minute or more: a fixed 120 s in all cut a 5-frame minddrive-like run off after 2 frames)."""
        if self.source is None:
            self.prefix_worker.close(0.0, drain=True)     # stop taking input; what waits still runs
        self._wait_while_progressing(self.prefix_worker, timeout_s)
        self.suffix_worker.close(0.0, drain=True)
        self._wait_while_progressing(self.suffix_worker, timeout_s)
        results = []
        while (item := self.get(timeout=0)) is not None:
            results.append(item)
        self.close()
        return results

    def _wait_while_progressing(self, worker, timeout_s: float | None) -> None:
        """Join `worker` as long as frames keep finishing; stop waiting after a stall of timeout_s (or derived)."""
        done, since = -1, time.monotonic()
        while worker.alive:
            finished = self.stats.completed + self.stats.failed
            if finished != done:
                done, since = finished, time.monotonic()
            limit = timeout_s if timeout_s is not None else max(FINISH_STALL_FLOOR_S, 10 * max(self.flight.prefix_s,
                                                                                                  self.flight.suffix_s))
            if time.monotonic() - since > limit:
                return
            worker.join(0.2)

    def close(self) -> None:
        """Stop now. Joins are bounded; a stuck stage is abandoned (daemon thread), never waited on forever."""
        self._closed = True
        self.prefix_worker.close(self.config.join_timeout_s)
        self.suffix_worker.close(self.config.join_timeout_s)
        self.encoder.close()
        self.decoder.close()

    @property
    def alive(self) -> bool:
        return self.prefix_worker.alive or self.suffix_worker.alive

    # ---- the two stages -----------------------------------------------------------------------------------
    def _pull(self):
        frame = self.source()
        return None if frame is None else (frame, time.perf_counter())

    def _count_drop(self, seq: int) -> None:
        with self._lock:
            self.stats.dropped.append(seq)

    def _run_prefix(self, item) -> None:
        """(frame, arrival) -> the suffix worker as (record, envelope) items, one per boundary state (a chunked
        frame: one per chunk, each handed over as soon as it is computed); errors travel as records, in order."""
        frame, arrival = item
        if self.source is not None:
            with self._lock:
                self.stats.submitted += 1
        record = FrameResult(seq=frame.seq, stamp_ns=frame.stamp_ns, arrival=arrival, chunks=self.chunk_count)
        record.prefix_start = time.perf_counter()
        try:
            for state in self.prefix.run_chunks(frame, self.config.chunks):
                self._hand_over(record, state)
        except Exception as exc:  # noqa: BLE001 - reported in order through the suffix; the next frame goes on
            record.prefix_end = record.sent = time.perf_counter()
            record.error, record.failed_stage = f"{type(exc).__name__}: {exc}", "prefix"
            if record.partition < 0:                  # nothing of it handed over yet: the record is
                self.flight.handed_over(0.0, lead_known=False)
            self.suffix_worker.submit((record, None), timeout_s=self.submit_timeout())
        with self._lock:
            self.stats.prefix_busy_s += record.sent - record.prefix_start
        self.flight.prefix_finished(record.sent - record.prefix_start, handed_to_suffix=False)

    def _hand_over(self, record: FrameResult, state) -> None:
        """One boundary state (a whole frame or a chunk) -> envelope -> the suffix worker. The frame counts as
        handed to the suffix at its first state (the just-in-time start aims at that one being ready)."""
        if state.chunk_index == 0:
            record.partition = state.partition
            self.flight.handed_over(time.perf_counter() - record.prefix_start)
        if state.last_chunk:
            record.prefix_end = time.perf_counter()
        if self.prefix.placement.uses_cuda:
            self._stage_to_host(state)
        envelope = self.encoder.encode(state)
        if self.config.transport != "inproc" and "host_buffer" in state.timings:
            self._host_buffers.put(state.timings.pop("host_buffer"))  # the bytes are copied out
        if state.last_chunk:
            record.sent = time.perf_counter()
        self.suffix_worker.submit((record, envelope), timeout_s=self.submit_timeout())

    def _run_suffix(self, item) -> None:
        """One boundary state of a frame; the frame's record is reported at its last state, or at the first
        failure (its later chunks are then only taken from the handover, not run)."""
        record, envelope = item
        now = time.perf_counter()
        if record.done:
            self._discard(envelope)
            return
        if not record.recv_start:
            record.recv_start = now
            self.flight.suffix_started()
        trajectory = None
        if record.error is not None:   # the prefix failed part-way: this chunk is taken, not run
            self._discard(envelope)
        else:
            try:
                state, _ = self.decoder.decode(envelope)
                record.suffix_start = record.suffix_start or time.perf_counter()
                trajectory = self.suffix.run(state)
                buffer = state.timings.pop("host_buffer", None)
                if buffer is not None:
                    self._host_buffers.put(buffer)
            except Exception as exc:  # noqa: BLE001
                record.error, record.failed_stage = f"{type(exc).__name__}: {exc}", "suffix"
        record.suffix_busy_s += time.perf_counter() - now
        if trajectory is not None or record.error is not None:
            self._report(record, trajectory)

    def _report(self, record: FrameResult, trajectory) -> None:
        record.trajectory, record.done = trajectory, True
        record.suffix_start = record.suffix_start or record.recv_start
        record.suffix_end = time.perf_counter()
        self.suffix.chunks.take_abandoned()   # in order here: a frame left unfinished is this failed one
        with self._lock:
            self.stats.suffix_busy_s += record.suffix_busy_s
            self.stats.completed += record.ok
            self.stats.failed += not record.ok
            self.stats.max_in_flight_seen = self.flight.max_seen
        self._results.put(record)
        self.flight.suffix_finished(record.suffix_busy_s)

    def _discard(self, envelope) -> None:
        """A later chunk of a frame that already failed: taken from the handover (its registry entry or ring
        slot is freed), not run."""
        if envelope is None:
            return
        try:
            self.decoder.decode(envelope)
        except Exception:  # noqa: BLE001 - it is being thrown away either way
            pass

    def _stage_to_host(self, state) -> None:
        """GPU -> one of max_in_flight preallocated pinned host buffers (non-blocking copy, then sync)."""
        try:
            buffer = self._host_buffers.get_nowait()
        except queue.Empty:
            buffer = self.prefix.placement.host_buffer(state.hidden.shape, state.hidden.dtype)
        if buffer.shape != state.hidden.shape or buffer.dtype != state.hidden.dtype:
            buffer = self.prefix.placement.host_buffer(state.hidden.shape, state.hidden.dtype)
        state.hidden = self.prefix.placement.to_host(state.hidden, out=buffer)
        state.position_ids = state.position_ids.cpu()
        state.attention_mask = state.attention_mask.cpu()
        state.timings["host_buffer"] = buffer
