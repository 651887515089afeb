"""The GIL-held share of each thread of this process over a span, sampled from outside by py-spy (`py-spy record
--gil --threads --nonblocking`: it reads which thread holds the GIL, `rate_hz` times a second, without pausing
the process). Python itself has no API for it. Used by `bench --gil` on the one-process graph: a thread's share
is the fraction of the span's wall time it held the GIL; what is left held it nobody (native code, waits).
py-spy's sample times are random (exponential gaps: benfred/py-spy src/timer.rs), so a share is an estimate good to ~1/sqrt(rate x span).

Where py-spy is not installed or may not attach (ptrace denied, not Linux) the report says why instead."""

from __future__ import annotations

import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

START_WAIT_S = 10.0   # py-spy attaches in ~0.1 s; a loaded 2-core machine can take seconds
STOP_WAIT_S = 20.0
GIL_KEYS = ("gil_held_share", "gil_held_by_none", "gil_sampling", "gil_unavailable")   # what report() may hold
_THREAD_FRAME = re.compile(r"^thread \((\w+)\)(?::\s*(.*))?$")
_PR_SET_PTRACER = 0x59616D61   # Yama: let this child trace us where ptrace_scope is 1 (no-op elsewhere)


def py_spy_path() -> str | None:
    """py-spy beside this interpreter (a venv's bin/) or on PATH."""
    beside = Path(sys.executable).with_name("py-spy")
    return str(beside) if beside.is_file() else shutil.which("py-spy")


def gil_shares(raw_lines, expected_samples: float) -> dict[str, float]:
    """py-spy's raw output (one 'thread (tid): name;frame;...;frame count' line per stack) -> the share of
    `expected_samples` in which each named thread held the GIL (threads sharing a name summed)."""
    counts: dict[str, int] = {}
    for line in raw_lines:
        stack, _, count = line.strip().rpartition(" ")
        match = _THREAD_FRAME.match(stack.split(";", 1)[0]) if stack else None
        if match and count.isdigit():
            name = match.group(2) or f"native thread {match.group(1)}"
            counts[name] = counts.get(name, 0) + int(count)
    return {name: n / expected_samples for name, n in counts.items()} if expected_samples > 0 else {}


class GilSampler:
    """with GilSampler() as gil: ... ; gil.report() -> {"gil_held_share": {thread: share}, ...} or
    {"gil_unavailable": reason}."""

    def __init__(self, rate_hz: int = 100, pid: int | None = None):
        self.rate_hz, self.pid = rate_hz, pid or os.getpid()
        self._proc: subprocess.Popen | None = None
        self._reason = "" if py_spy_path() else "py-spy is not installed (pip install py-spy)"
        self._report: dict = {}

    def __enter__(self) -> "GilSampler":
        if self._reason:
            return self
        self._dir = Path(tempfile.mkdtemp(prefix="hvla_gil_"))
        self._log = open(self._dir / "stderr.txt", "a+")   # O_APPEND: our seeks never move py-spy's writes
        command = [py_spy_path(), "record", "--gil", "--threads", "--nonblocking", "--rate", str(self.rate_hz),
                   "--format", "raw", "--output", str(self._dir / "raw.txt"), "--pid", str(self.pid)]
        # a shell that waits for a line, then becomes py-spy (same pid): it may trace us before it tries to
        self._proc = subprocess.Popen(["sh", "-c", 'read _ && exec "$@"', "sh", *command], stdin=subprocess.PIPE,
                                      stdout=self._log, stderr=subprocess.STDOUT)
        _allow_tracer(self._proc.pid)
        self._proc.stdin.write(b"go\n")
        self._proc.stdin.close()
        self._started = self._await_start()
        return self

    def _await_start(self) -> float | None:
        deadline = time.monotonic() + START_WAIT_S
        while time.monotonic() < deadline and self._proc.poll() is None:
            if "Sampling process" in self._text():
                return time.monotonic()
            time.sleep(0.01)
        self._reason = f"py-spy did not start sampling: {self._text().strip()[-300:] or 'no output'}"
        return None

    def __exit__(self, *exc) -> None:
        if self._proc is None:
            return
        stopped = time.monotonic()
        if self._proc.poll() is None:
            self._proc.send_signal(signal.SIGINT)   # py-spy writes its output on Ctrl-C
        try:
            self._proc.wait(STOP_WAIT_S)
        except subprocess.TimeoutExpired:
            self._proc.kill()
            self._reason = self._reason or "py-spy did not stop within its wait"
        if not self._reason and self._started is not None:
            self._report = self._read(stopped - self._started)
        self._log.close()
        shutil.rmtree(self._dir, ignore_errors=True)

    def _read(self, span_s: float) -> dict:
        raw = self._dir / "raw.txt"
        if not raw.is_file():
            self._reason = f"py-spy wrote no samples: {self._text().strip()[-300:]}"
            return {}
        expected = span_s * self.rate_hz
        shares = gil_shares(raw.read_text().splitlines(), expected)
        return {"gil_held_share": {name: round(s, 4) for name, s in sorted(shares.items(), key=lambda kv: -kv[1])},
                "gil_held_by_none": round(max(0.0, 1.0 - sum(shares.values())), 4),
                "gil_sampling": {"tool": "py-spy record --gil --nonblocking", "rate_hz": self.rate_hz,
                                 "span_s": round(span_s, 3), "expected_samples": round(expected),
                                 # py-spy spaces its samples at random (exponential gaps, against aliasing):
                                 # a count is Poisson, each share good to about this fraction of 1
                                 "share_noise": round(1.0 / max(1.0, expected) ** 0.5, 4),
                                 # py-spy warns when it fell behind: the shares are then low by that much
                                 "behind": "behind in sampling" in self._text()}}

    def _text(self) -> str:
        self._log.flush()
        self._log.seek(0)
        return self._log.read()

    def report(self) -> dict:
        return self._report if not self._reason else {"gil_unavailable": self._reason}


def gil_line(graph: dict) -> str:
    """The one-process graph's GIL line (bench --gil): each thread's held share of the wall time, or why none."""
    if "gil_held_share" not in graph:
        why = graph.get("gil_unavailable") or graph.get("skipped") or graph.get("error") or "the mode did not run"
        return f"graph (one process), GIL: not sampled ({why})"
    shares = graph["gil_held_share"]
    behind = " (py-spy fell behind: shares are low)" if graph["gil_sampling"]["behind"] else ""
    return ("graph (one process), GIL held, share of wall time by thread: " + ", ".join(
        f"{name} {share:.1%}" for name, share in shares.items() if share >= 0.005)
        + f"; by none {graph['gil_held_by_none']:.1%}{behind}")


def _allow_tracer(pid: int) -> None:
    if sys.platform.startswith("linux"):
        import ctypes
        try:
            ctypes.CDLL(None, use_errno=True).prctl(_PR_SET_PTRACER, pid, 0, 0, 0)
        except (OSError, AttributeError):
            pass
