"""The parent of `hybrid-vla graph --processes`: one child process per node, kept running.

A child that exits while no stop was requested (a crash, an OOM kill, a SIGKILL) is started again after
`respawn_delay_s`, like `respawn: true` in a launch file; the others keep running meanwhile (the prefix
counts what it cannot deliver, the stages keep their partition while the scheduler is away). A stop request
(Ctrl-C, SIGTERM) stops every child and nothing is restarted.

A child that cannot start is given up on and the graph ends with its exit code, however long its start took
(a model load takes seconds to minutes, so no uptime threshold alone can tell):
- EX_CONFIG: its node refused its configuration (bringup.run_single_node; its log says why, e.g. a /dev/shm
  too small for the boundary ring). The same configuration is refused again: not restarted at all.
- GIVE_UP_AFTER failed starts in a row: a death within QUICK_EXIT_S of the start, or one at the same point as
  the one before (the same exit code, an uptime within SAME_POINT_TOLERANCE of it, inside START_UP_S: a crash
  at the first frame after each model load, an OOM kill at each load). A crash at another point (in service,
  hours apart) resets the count: such a node is restarted every time.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from collections import Counter

from ... import stop

RESPAWN_DELAY_S = 1.0
QUICK_EXIT_S = 10.0      # a child that dies sooner than this after its start counts as a failed start
GIVE_UP_AFTER = 3        # failed starts in a row
EX_CONFIG = os.EX_CONFIG  # 78 (sysexits.h): a child whose node refused its configuration (never restarted)
SAME_POINT_TOLERANCE = 0.25   # two deaths with one exit code whose uptimes differ by less (a fraction of the
SAME_POINT_MIN_S = 2.0        # earlier one, at least SAME_POINT_MIN_S) died at the same point of their start
START_UP_S = 300.0       # ... when within this long of the start (later: a crash in service, always restarted)


def log(message: str) -> None:
    print(f"[hybrid-vla supervisor] {message}", file=sys.stderr, flush=True)


def stop_processes(procs: list[subprocess.Popen], timeout_s: float = 20.0) -> None:
    """SIGINT to every child still running, then wait; a child that does not stop in time is killed."""
    for proc in procs:
        if proc.poll() is None:
            proc.send_signal(signal.SIGINT)
    deadline = time.monotonic() + timeout_s
    for proc in procs:
        try:
            proc.wait(max(0.1, deadline - time.monotonic()))
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(5)


class Supervisor:
    """commands: node -> argv of its child. respawn_delay_s < 0: no respawn (the first exit ends the graph)."""

    def __init__(self, commands: dict[str, list[str]], env: dict, respawn_delay_s: float = RESPAWN_DELAY_S):
        self.commands, self.env, self.delay = commands, env, respawn_delay_s
        self.procs: dict[str, subprocess.Popen] = {}
        self.started: dict[str, float] = {}
        self.due: dict[str, float] = {}          # node -> when its restart is due
        self.restarts: Counter = Counter()
        self.failed_starts: Counter = Counter()
        self.last_exit: dict[str, tuple[int, float]] = {}   # node -> (exit code, uptime) of its last death

    def start(self, node: str) -> None:
        """Start (or restart) one child, with SIGINT/SIGTERM blocked until its own stop handler is in place."""
        with stop.signals_blocked():
            self.procs[node] = subprocess.Popen(self.commands[node], env=self.env)
        self.started[node] = time.monotonic()

    def start_all(self) -> None:
        for node in self.commands:
            if stop.requested():
                return
            self.start(node)

    def step(self) -> int | None:
        """One look at the children: restart those due, schedule those that exited. -> an exit code when the
        graph has to end (no respawn, or a child that cannot start), else None."""
        now = time.monotonic()
        for node, proc in list(self.procs.items()):
            if node in self.due:
                if now >= self.due[node] and not stop.requested():
                    del self.due[node]
                    self.restarts[node] += 1
                    self.start(node)
                continue
            code = proc.poll()
            if code is None or stop.requested():
                continue
            uptime = now - self.started[node]
            if self.delay < 0:
                log(f"{node} (pid {proc.pid}) exited with {code}; respawn is off: stopping the graph")
                return abs(code) or 1
            why = self._cannot_start(node, code, uptime)
            if why is not None:
                log(f"{node} (pid {proc.pid}) {why}: giving up, stopping the graph")
                return abs(code) or 1
            log(f"{node} (pid {proc.pid}) exited with {code} after {uptime:.1f} s; restarting it in {self.delay:g} s")
            self.due[node] = now + self.delay
        return None

    def _cannot_start(self, node: str, code: int, uptime: float) -> str | None:
        """Count this death (see the module's docstring) -> why the node is given up on, or None (restart it)."""
        last, self.last_exit[node] = self.last_exit.get(node), (code, uptime)
        if code == EX_CONFIG:
            return f"refused its configuration (exit code {code} after {uptime:.1f} s; its log says why)"
        same_point = last is not None and last[0] == code and uptime < START_UP_S and \
            abs(uptime - last[1]) <= max(SAME_POINT_MIN_S, SAME_POINT_TOLERANCE * last[1])
        if uptime < QUICK_EXIT_S:
            self.failed_starts[node] += 1
        elif same_point:   # the death before was one at this point too
            self.failed_starts[node] = max(self.failed_starts[node], 1) + 1
        else:
            self.failed_starts[node] = 0
        if self.failed_starts[node] < GIVE_UP_AFTER:
            return None
        return (f"exited with {code} {self.failed_starts[node]} times in a row, each time within {QUICK_EXIT_S:g} s "
                f"of its start or at the same point as the time before (this time after {uptime:.1f} s)")

    def run(self, poll_s: float = 0.2) -> int:
        """Supervise until a stop request (-> the children's worst exit code, 0 on a clean stop) or until the
        graph has to end."""
        self.start_all()
        code = None
        try:
            while code is None and not stop.wait(poll_s):
                code = self.step()
        finally:
            stop_processes(list(self.procs.values()))
        if code is not None:
            return code
        return max([abs(p.returncode or 0) for p in self.procs.values()], default=0)
