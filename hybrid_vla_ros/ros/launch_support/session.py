"""One way to open, spin and close rclpy for every program of the package (bringup, `ros2 run` entry points,
demo, bag tools): rclpy installs no signal handlers of its own (hybrid_vla_ros.stop owns SIGINT/SIGTERM, so
a Ctrl-C never shuts the context down under a running executor), the spin loop ends on a stop request, and
teardown never raises. Uses only APIs that Humble, Jazzy and Kilted rclpy all have."""

from __future__ import annotations

import time
from contextlib import contextmanager

from ... import stop

SPIN_STEP_S = 0.1


def _init(args, context) -> None:
    import rclpy
    from .dds import reclaim_dead_participant_segments, use_large_frame_profile
    use_large_frame_profile()  # before the first participant of this process reads its profile
    reclaim_dead_participant_segments()  # what killed processes left in /dev/shm (real memory)
    try:
        from rclpy.signals import SignalHandlerOptions
        rclpy.init(args=args, context=context, signal_handler_options=SignalHandlerOptions.NO)
    except ImportError:  # an rclpy without selectable signal handlers
        rclpy.init(args=args, context=context)


@contextmanager
def ros_context(args: list[str] | None = None, context=None):
    """rclpy initialised on `context` (a fresh one when None) for the body; shut down afterwards. `args`: the
    command line rcl parses (`ros2 run` entry points pass sys.argv); None: none at all, so nothing on this
    process's command line (e.g. a launch file's `__node:=` rename) applies to the nodes made here."""
    import rclpy
    context = context or rclpy.Context()
    _init(args if args is not None else [], context)
    try:
        yield context
    finally:
        if context.ok():
            context.try_shutdown()


RELEASE_NOTE = """Executors are shut down before their nodes are destroyed: an rclpy executor keeps its last wait as
a suspended generator holding the waited entities' handles, so destroying entities while it lives can
leave them to be finalised later, from whatever thread drops the generator. Seen once (2026-11-30, loaded
2-core machine): a test process stuck inside Node.destroy_node (in rcl/DDS, GIL held) after a probe's last
spin; the order here rules the executor out, the DDS side was not reproduced."""


@contextmanager
def executor_with(nodes, context):
    """A single-threaded executor holding `nodes`; every node is removed and destroyed at the end, in order,
    even when one of them fails to."""
    from rclpy.executors import SingleThreadedExecutor
    executor = SingleThreadedExecutor(context=context)
    for node in nodes:
        executor.add_node(node)
    try:
        yield executor
    finally:
        for node in nodes:
            executor.remove_node(node)
        executor.shutdown()  # first: see release_before_destroy
        for node in nodes:
            node.destroy_node()


def settle_heap() -> None:
    """Collect once, then freeze what start-up made (imports, the model, the nodes) out of the cyclic GC's reach:
    its full collections hold the GIL, so every thread of the process (executor, stage workers) stops meanwhile.
    A process of the tiny graph holds ~380k objects; a full collection of them took 0.375 s on a loaded 2-core
    EPYC, 0.0000 s after the freeze (docs/RELIABILITY.md, "Seconds lost to the garbage collector", with the
    command). What is made later is collected as usual."""
    import gc
    gc.collect()
    gc.freeze()


def spin_until_stopped(executor, done=None, step_s: float = SPIN_STEP_S, on_error=None) -> None:
    """Spin until a stop is requested (SIGINT/SIGTERM), `done()` is true, or the context goes down. An
    exception from one callback does not end the node (jazzy's rclpy raises from the lifecycle service on
    an invalid transition request, e.g. `ros2 lifecycle set` of activate while unconfigured): it is handed
    to on_error(exc) (default: printed) and spinning goes on. The start-up heap is frozen first (settle_heap)."""
    settle_heap()
    while not stop.requested() and (done is None or not done()) and executor.context.ok():
        try:
            spin_ready(executor, step_s)
        except Exception as exc:  # noqa: BLE001 - one bad callback must not stop the graph
            if not executor.context.ok():
                break
            (on_error or _report)(exc)


def _report(exc: Exception) -> None:
    import sys
    print(f"hybrid_vla_ros: a callback failed and was skipped: {type(exc).__name__}: {exc}", file=sys.stderr)


EXECUTOR_ENV = "HYBRID_VLA_EXECUTOR"
def spin_ready(executor, timeout_sec: float, until=None) -> None:
    """One spin that runs what is ready. The SingleThreadedExecutor's spin_once takes every ready entity into its
    wait; rclpy's EventsExecutor runs ONE event per spin_once, so a loop that publishes between spins (a bag's
    messages, odometry at 50 Hz) outruns it and the graph's own events wait behind a growing queue (a warm-standby
    test's three frames were not answered in 15 s). On it, every event that comes within the timeout is run
    (spin_once with what is left of it: it sleeps when none comes; draining with spin_once(0) instead cost the
    bench's main thread ~50 ms of CPU per frame), or until `until()` holds: a loop waiting for a callback's effect
    spins with a long timeout and is not held to its end (on the SingleThreadedExecutor spin_once returns after
    the first callback anyway: a short timeout there only rebuilds its wait set more often, in Python)."""
    if not is_events_executor(executor):
        executor.spin_once(timeout_sec=timeout_sec)
        return
    end = time.monotonic() + timeout_sec
    while True:
        executor.spin_once(timeout_sec=max(0.0, end - time.monotonic()))
        if time.monotonic() >= end or (until is not None and until()):
            return


def is_events_executor(executor) -> bool:
    return type(executor).__name__ == "EventsExecutor"


def graph_executor(context):
    """The executor the graph's nodes share in a process: a SingleThreadedExecutor, or with
    HYBRID_VLA_EXECUTOR=events rclpy's EventsExecutor where this rclpy has it (`rclpy.experimental`: Kilted,
    Jazzy 7.1.6; its wait set lives in C++, where the SingleThreadedExecutor rebuilds its own in Python at every
    wake-up, holding the GIL the stage workers need between torch ops). Opt-in: measured faster on the one-process
    graph (docs/BENCHMARKS.md); it runs one event per spin_once, so loops spin it with spin_ready."""
    import os
    from rclpy.executors import SingleThreadedExecutor
    if os.environ.get(EXECUTOR_ENV, "single") != "events":
        return SingleThreadedExecutor(context=context)
    try:
        from rclpy.experimental import EventsExecutor
    except ImportError:   # Humble (Jazzy's rclpy 7.1.6 and Kilted's have it)
        return SingleThreadedExecutor(context=context)
    import sys
    stderr = sys.stderr
    try:   # it enables faulthandler on sys.stderr, which needs a file descriptor (not a capture buffer)
        sys.stderr = stderr if hasattr(stderr, "fileno") and _has_fileno(stderr) else sys.__stderr__
        return EventsExecutor(context=context)
    finally:
        sys.stderr = stderr


def _has_fileno(stream) -> bool:
    try:
        stream.fileno()
    except (OSError, ValueError, AttributeError):   # io.UnsupportedOperation is an OSError and a ValueError
        return False
    return True
