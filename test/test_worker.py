"""Stage workers never die of a frame, never block an executor for long, and say when they are stuck."""

import threading
import time

from hybrid_vla_ros.engine.pipeline.worker import ERROR, OK, WARN, StageHealth, StageWorker


def wait_for(predicate, timeout_s=5.0):
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline and not predicate():
        time.sleep(0.01)
    return predicate()


def test_any_exception_is_caught_at_the_frame_counted_by_kind_and_the_next_frame_is_served():
    served, errors = [], []

    def handler(item):
        if item == 1:
            raise KeyError("boom")        # not the package's own error type
        if item == 2:
            import struct
            struct.unpack("<Q", b"")      # what an empty shared-memory body used to raise in the suffix
        served.append(item)

    health = StageHealth(error_after=3)
    worker = StageWorker("t", handler, health=health, on_error=errors.append).start()
    try:
        for item in range(4):
            assert worker.submit(item, timeout_s=1.0)
        assert wait_for(lambda: served == [0, 3])
        assert dict(health.failures) == {"KeyError": 1, "error": 1}
        assert [type(e).__name__ for e in errors] == ["KeyError", "error"]
        assert worker.liveness_check()[1] == OK
        assert health.failure_check()[1] == OK  # a success since: the streak is over
    finally:
        worker.close()


def test_failures_that_persist_turn_the_diagnostic_to_error():
    health = StageHealth(error_after=3)
    worker = StageWorker("t", lambda item: 1 / 0, health=health).start()
    try:
        worker.submit(0, timeout_s=1.0)
        assert wait_for(lambda: health.failed == 1)
        assert health.failure_check()[1] == WARN
        for item in range(1, 3):
            worker.submit(item, timeout_s=1.0)
        assert wait_for(lambda: health.failed == 3)
        assert health.failure_check()[1] == ERROR
    finally:
        worker.close()


def test_a_stuck_frame_and_a_dead_thread_are_errors():
    release = threading.Event()
    worker = StageWorker("t", lambda item: release.wait(5), stuck_after_s=0.2).start()
    worker.submit(0)
    assert wait_for(lambda: worker.liveness_check()[1] == ERROR)
    assert "stuck" in worker.liveness_check()[2]
    release.set()
    assert wait_for(lambda: worker.liveness_check()[1] == OK)
    worker.close()
    assert worker.liveness_check()[1] == ERROR and "not running" in worker.liveness_check()[2]


def test_a_full_lossless_mailbox_drops_and_counts_instead_of_blocking_the_caller():
    release = threading.Event()
    health = StageHealth()
    worker = StageWorker("t", lambda item: release.wait(5), policy="lossless", capacity=1, health=health).start()
    try:
        worker.submit(0)
        assert wait_for(lambda: worker.busy)
        assert worker.submit(1)            # waits in the mailbox
        t0 = time.monotonic()
        assert not worker.submit(2)        # full: refused at once
        assert time.monotonic() - t0 < 0.5
        assert health.drop_reasons["queue_full"] == 1 and health.dropped == 1
    finally:
        release.set()
        worker.close()


def test_closing_without_drain_counts_every_frame_it_leaves_with_its_stamp():
    """close(drain=False) cleared the mailbox silently: those frames were never accounted for."""
    release, lost = threading.Event(), []
    health = StageHealth()
    health.listener = lambda kind, reason, stamp_ns: lost.append((kind, reason, stamp_ns))
    worker = StageWorker("t", lambda item: release.wait(5), policy="lossless", capacity=4, health=health,
                         stamp_of=lambda item: 1000 + item).start()
    worker.submit(0)
    assert wait_for(lambda: worker.busy)
    for item in (1, 2, 3):
        assert worker.submit(item)
    worker.close(timeout_s=0.1, drain=False)   # frame 0 still in the handler: the three waiting are left
    release.set()
    assert [entry for entry in lost if entry[1] == "shutdown"] == [("dropped", "shutdown", s) for s in (1001, 1002, 1003)]
    assert health.drop_reasons["shutdown"] == 3


def test_a_worker_fed_by_a_source_counts_what_waits_there_in_its_backlog():
    """pending(): the items waiting in the source (a server's inbox) are the worker's backlog, as a mailbox's are."""
    waiting = [1, 2, 3]
    worker = StageWorker("t", lambda item: None, source=lambda: None, pending=lambda: len(waiting))
    assert worker.backlog() == 3
    waiting.clear()
    assert worker.backlog() == 0 and StageWorker("u", lambda item: None).backlog() == 0


def test_an_ended_worker_tells_the_cpu_its_thread_used_and_not_its_idle_time():
    def spin(seconds):
        end = time.thread_time() + seconds
        while time.thread_time() < end:
            pass
    worker = StageWorker("cpu", spin).start()
    assert worker.submit(0.2)
    time.sleep(0.3)                     # idle in the mailbox: no CPU
    worker.close(5.0, drain=True)
    assert not worker.alive and 0.2 <= worker.cpu_s < 0.28, worker.cpu_s


def test_a_node_process_freezes_its_start_up_heap_before_it_serves(context):
    """spin_until_stopped (every node process's loop) collects once and freezes the start-up heap, so the cyclic
    GC's full collections, which hold the GIL and stop the stage workers, no longer walk it (issue 50)."""
    import gc
    from rclpy.executors import SingleThreadedExecutor
    from hybrid_vla_ros.ros.launch_support.session import spin_until_stopped
    executor = SingleThreadedExecutor(context=context)
    try:
        made_at_start_up = {"weights": [1.0]}   # a container the collector tracks
        assert any(o is made_at_start_up for o in gc.get_objects())
        frozen_before = gc.get_freeze_count()
        spin_until_stopped(executor, done=lambda: True)
        assert gc.get_freeze_count() > frozen_before
        assert not any(o is made_at_start_up for o in gc.get_objects())   # frozen: no collection walks it
    finally:
        executor.shutdown()
