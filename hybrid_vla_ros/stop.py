"""A clean stop on SIGINT / SIGTERM at any moment, from the first line of `main` to the last (ROS-free).

Python's default SIGINT handler raises KeyboardInterrupt wherever the main thread happens to be: inside a
model build, an import, `rclpy.init`, a lifecycle transition. The stack then unwinds through code that was
never written to be interrupted, and the process ends with a traceback and exit code -2 (or 1 when rclpy's
own handler shut the context down under a spinning executor: `ExternalShutdownException`). Instead, a
program calls `install()` first thing; a signal then only *requests* the stop, and the program checks
`requested()` at its natural points (between start-up steps, in its spin loop) and unwinds normally.

`ignore_further()` at the end of a main keeps a late signal from killing the exiting process.
Child processes are started with the two signals blocked (`signals_blocked()` around the spawn): a signal
that reaches a child before its own `install()` stays pending and is taken as a stop request then, instead
of killing it half-imported. A third signal ends the process at once (exit 130) for a stuck stop.
"""

from __future__ import annotations

import os
import signal
import threading
import time
from contextlib import contextmanager

STOP_SIGNALS = (signal.SIGINT, signal.SIGTERM)
FORCE_AFTER = 3  # signals; the first requests a clean stop, a forwarded copy may follow, the third forces

# Plain lists, not threading.Event: a handler that takes a lock the interrupted main thread may hold deadlocks.
_requests: list[str] = []
_received: list[int] = []


def _on_signal(signum, _frame) -> None:
    _received.append(signum)
    _requests.append(signal.Signals(signum).name)
    if len(_received) >= FORCE_AFTER:
        os._exit(128 + signal.SIGINT)


def install() -> None:
    """Route SIGINT and SIGTERM to a stop request, then take any that were pending. Main thread only; a
    no-op elsewhere (a program embedded in a thread keeps its host's handlers)."""
    if threading.current_thread() is not threading.main_thread():
        return
    for sig in STOP_SIGNALS:
        signal.signal(sig, _on_signal)
    signal.pthread_sigmask(signal.SIG_UNBLOCK, STOP_SIGNALS)


def ignore_further() -> None:
    """Last step of a main that has stopped: ignore further stop signals. Interpreter finalisation resets
    Python-level handlers to the default action (a SIGINT then kills the process: exit -2), and a forwarded
    copy of the Ctrl-C that already stopped this process may still arrive while it is exiting."""
    if threading.current_thread() is threading.main_thread():
        for sig in STOP_SIGNALS:
            signal.signal(sig, signal.SIG_IGN)


def requested() -> bool:
    return bool(_requests)


def reason() -> str:
    """What asked for the stop first ('SIGINT', 'SIGTERM', or the caller's words), '' when nothing did."""
    return _requests[0] if _requests else ""


def request(why: str = "requested") -> None:
    """Ask for the stop from code (a supervisor, a test)."""
    _requests.append(why)


def wait(timeout_s: float, step_s: float = 0.05) -> bool:
    """Sleep up to `timeout_s`, waking within `step_s` of a stop request. -> whether the stop was requested."""
    deadline = time.monotonic() + timeout_s
    while not _requests and time.monotonic() < deadline:
        time.sleep(min(step_s, max(0.0, deadline - time.monotonic())))
    return requested()


@contextmanager
def signals_blocked():
    """Block the stop signals in this thread while spawning children (they inherit the mask across exec)."""
    previous = signal.pthread_sigmask(signal.SIG_BLOCK, STOP_SIGNALS)
    try:
        yield
    finally:
        signal.pthread_sigmask(signal.SIG_SETMASK, previous)


class StopRequested(Exception):
    """Raised by `check()` at a well-defined point of a long job (a replay loop), caught by the program's main."""


def check() -> None:
    if requested():
        raise StopRequested(reason())
