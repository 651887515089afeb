"""The parent of `hybrid-vla graph --processes`: one child process per node, kept running.

A child that exits while no stop was requested (a crash, an OOM kill, a SIGKILL) is started again after
`respawn_delay_s`, like `respawn: true` in a launch file; the others keep running meanwhile (the prefix
counts what it cannot deliver, the stages keep their partition while the scheduler is away). A child that
keeps dying within QUICK_EXIT_S of its start (a configuration that cannot work) is given up on after
GIVE_UP_AFTER tries and the graph ends with its exit code. A stop request (Ctrl-C, SIGTERM) stops every
child and nothing is restarted.
"""

from __future__ import annotations

import signal
import subprocess
import sys
import time
from collections import Counter

from ... import stop

RESPAWN_DELAY_S = 1.0
QUICK_EXIT_S = 10.0      # a child that dies sooner than this after its start counts as a failed start
GIVE_UP_AFTER = 3        # failed starts in a row


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
            self.failed_starts[node] = self.failed_starts[node] + 1 if uptime < QUICK_EXIT_S else 0
            if self.failed_starts[node] >= GIVE_UP_AFTER:
                log(f"{node} exited with {code} within {QUICK_EXIT_S:g} s of its start {GIVE_UP_AFTER} times in a "
                    f"row: giving up, stopping the graph")
                return abs(code) or 1
            log(f"{node} (pid {proc.pid}) exited with {code} after {uptime:.1f} s; restarting it in {self.delay:g} s")
            self.due[node] = now + self.delay
        return None

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
