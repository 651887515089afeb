"""`hybrid-vla launch` as a user runs it (a real subprocess of the installed command): a launch file started
from this environment without a ROS install. The seat launch file comes up with a tiny model, and
CandidateTrajectories arrive over DDS on its output_trajectories; Ctrl-C stops every process cleanly; bad
input is one clear line. launch/launch_ros come from where the command finds them (an installed ROS 2, else
../shared/vendor/ros2_launch): nothing is put on the command's PYTHONPATH or AMENT_PREFIX_PATH here."""

import functools
import os
import re
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from ros_harness import TINY_OVERRIDES, domain_id, wait_until
from test_launch import (CANDIDATES, HAS_CANDIDATES, KINEMATIC, TRAJECTORY, Probe, publishers_of,
                         resend_until, terminal_signals)

SEAT = "hybrid_vla_diffusion_seat.launch.xml"
NODES = ("hybrid_vla_prefix", "hybrid_vla_suffix", "hybrid_vla_scheduler")


def command() -> list[str]:
    """The installed console script (what a user types), else the module."""
    script = Path(sys.executable).parent / "hybrid-vla"
    return [str(script)] if script.is_file() else [sys.executable, "-m", "hybrid_vla_ros.cli"]


def hybrid_vla_launch(tmp_path, *args, timeout=120):
    env = {**os.environ, "PYTHONWARNINGS": "ignore"}
    return subprocess.run([*command(), "launch", *args], cwd=tmp_path, capture_output=True, text=True,
                          timeout=timeout, env=env)


def needs_launch():
    """Skipped where the command itself finds no launch (it looks where a user's checkout has it: an installed
    ROS 2, else ../shared/vendor/ros2_launch beside the checkout), not where this test process could find one:
    asked in a process of the command's own environment (test_launch.py may have put a vendored launch on this
    process's path from elsewhere)."""
    reason = launch_missing()
    if reason:
        pytest.skip(f"hybrid-vla launch finds no launch here: {reason}")


@functools.lru_cache(maxsize=1)
def launch_missing() -> str:
    """'' when the command finds launch, else its error."""
    probe = ("from hybrid_vla_ros.cli.launch_file import launch_packages\n"
             "from hybrid_vla_ros.errors import ConfigError\n"
             "try:\n    launch_packages()\nexcept ConfigError as exc:\n    print(exc)")
    env = {**os.environ, "PYTHONWARNINGS": "ignore"}
    out = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, timeout=120, env=env)
    return out.stdout.strip() or (out.stderr.strip() if out.returncode else "")


@pytest.mark.parametrize("args, message", [
    (("hybrid_vla_diffusion_seat.launch.xml", "use_sim_time=true"),
     "launch argument 'use_sim_time=true': expected name:=value"),
    (("hybrid_vla.launch.xml", ":=x"), "launch argument ':=x': expected name:=value"),
    (("./missing.launch.xml",), "no launch file './missing.launch.xml' (no such file)"),
    (("hybrid_vla_ros", "missing.launch.xml"), "no launch file 'missing.launch.xml' in package 'hybrid_vla_ros' "
     "(its launch files: hybrid_vla.launch.py, hybrid_vla.launch.xml, hybrid_vla_diffusion_seat.launch.xml)"),
], ids=["no-:=", "no-name", "no-file", "not-shipped"])
def test_bad_input_is_one_clear_line_and_exit_2(tmp_path, args, message):
    needs_launch()
    out = hybrid_vla_launch(tmp_path, *args)
    assert out.returncode == 2, out.stderr
    assert out.stderr.strip().splitlines() == [f"hybrid-vla launch: error: {message}"]


PROBE_FILE = """<launch>
  <arg name="word"/>
  <log message="word=$(var word) share=$(find-pkg-share hybrid_vla_ros) exe=$(exec-in-pkg hybrid_vla_suffix hybrid_vla_ros)"/>
</launch>
"""


def test_a_files_arguments_the_packages_share_and_executables_resolve_and_the_layout_is_removed(tmp_path):
    needs_launch()
    (tmp_path / "probe.launch.xml").write_text(PROBE_FILE)
    out = hybrid_vla_launch(tmp_path, "probe.launch.xml", "word:=hello", "wrod:=typo")
    assert out.returncode == 0, out.stderr
    assert "hybrid-vla launch: warning: probe.launch.xml declares no argument 'wrod' (its arguments: word)" \
        in out.stderr.splitlines()   # passed on, as ros2 launch does, with a warning
    found = re.search(r"word=(\S+) share=(\S+) exe=(\S+)", out.stdout + out.stderr)
    assert found, out.stdout + out.stderr
    word, share, exe = found.groups()
    prefix = Path(share).parents[1]
    assert word == "hello" and share == str(prefix / "share" / "hybrid_vla_ros")
    assert exe == str(prefix / "lib" / "hybrid_vla_ros" / "hybrid_vla_suffix")
    assert not str(prefix).startswith(str(Path(__file__).resolve().parents[1]))   # never in the source tree
    assert not prefix.exists()   # removed when the run ended
    # launch's own return code comes back: a required argument missing is launch's error, exit 1
    out = hybrid_vla_launch(tmp_path, "probe.launch.xml")
    said = out.stdout + out.stderr
    assert out.returncode == 1 and "missing required argument 'word'" in said, said


def seat_arguments(tmp_path) -> list[str]:
    """A tiny model for all three nodes (one file keyed by node name), the odometry and outputs on the
    test's topics."""
    from hybrid_vla_ros.ros.launch_support.bringup import graph_params, write_combined_config
    overrides = {k: dict(v) for k, v in TINY_OVERRIDES.items()}
    overrides["hybrid_vla_prefix"].update(use_kinematic_state=True)
    params = write_combined_config(graph_params(overrides=overrides), tmp_path / "tiny.param.yaml")
    return [*(f"{node}_param_path:={params}" for node in NODES), f"input_odometry:={KINEMATIC}",
            f"output_trajectory:={TRAJECTORY}", f"output_trajectories:={CANDIDATES}"]


@pytest.mark.slow
def test_the_seat_starts_from_the_command_candidates_arrive_and_ctrl_c_stops_it_cleanly(tmp_path, monkeypatch):
    needs_launch()
    if not HAS_CANDIDATES:
        pytest.skip("autoware_internal_planning_msgs is not importable here: the seat publishes no candidates")
    domain = domain_id()
    monkeypatch.setenv("ROS_DOMAIN_ID", str(domain))
    monkeypatch.setenv("ROS_AUTOMATIC_DISCOVERY_RANGE", "LOCALHOST")
    log = tmp_path / "launch.log"
    with open(log, "w") as sink:
        proc = subprocess.Popen([*command(), "launch", SEAT, *seat_arguments(tmp_path)], cwd=tmp_path,
                                stdout=sink, stderr=subprocess.STDOUT, text=True, start_new_session=True,
                                preexec_fn=terminal_signals)
    try:
        candidates_arrive(Probe)
    finally:
        os.killpg(proc.pid, signal.SIGINT)   # Ctrl-C in the terminal reaches the command and every node
        try:
            proc.wait(timeout=60)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
            pytest.fail("hybrid-vla launch did not stop within 60 s of Ctrl-C:\n" + log.read_text()[-6000:])
        print(log.read_text()[-6000:])   # shown by pytest when anything above failed
    out = log.read_text()
    assert proc.returncode == 0, out[-3000:]
    assert "has died" not in out and "Traceback" not in out, out[-3000:]
    assert out.count("process has finished cleanly") == len(NODES), out[-3000:]
    prefix = re.search(r"laid out in (\S+)\)", out).group(1)
    assert not Path(prefix).exists()


def candidates_arrive(probe_class) -> None:
    """The three nodes come up active; a frame sent gives CandidateTrajectories on the seat's
    output_trajectories with the stamp of the Trajectory on output_trajectory."""
    from hybrid_vla_ros.ros.messages import stamp_to_ns
    probe = probe_class()
    try:
        for node in NODES:
            assert wait_until(lambda: probe.state(node) == "active", probe.spin, 120), f"{node} not active"
        assert wait_until(lambda: CANDIDATES in publishers_of(probe.node, "hybrid_vla_suffix"), probe.spin, 30)
        assert wait_until(lambda: all(p.get_subscription_count() for p in probe.images), probe.spin, 30)
        resend_until(probe, lambda: probe.candidates)
        assert probe.candidates, "no CandidateTrajectories on the seat's output_trajectories"
        shared = lambda: ({stamp_to_ns(c.candidate_trajectories[0].header.stamp) for c in probe.candidates}  # noqa: E731
                          & {stamp_to_ns(p.header.stamp) for p in probe.paths})
        assert wait_until(shared, probe.spin, 10), "no CandidateTrajectories with a trajectory's stamp"
    finally:
        probe.close()


SLEEPER = """import os, signal, sys, time
open(sys.argv[1], "w").write(str(os.getpid()))
signal.signal(signal.SIGINT, lambda *_: sys.exit(0))
time.sleep(600)
"""


def test_sigterm_to_the_command_alone_stops_what_it_launched(tmp_path):
    """systemd, docker stop and `timeout` send SIGTERM to the command only; launch itself takes SIGTERM as
    "cancel" and leaves its processes running (its own warning). The command stops them as Ctrl-C does."""
    import time
    needs_launch()
    (tmp_path / "sleeper.py").write_text(SLEEPER)
    pid_file = tmp_path / "sleeper.pid"
    (tmp_path / "sleeper.launch.xml").write_text(
        f'<launch><executable cmd="{sys.executable} {tmp_path / "sleeper.py"} {pid_file}" output="screen"/></launch>')
    proc = subprocess.Popen([*command(), "launch", str(tmp_path / "sleeper.launch.xml")], cwd=tmp_path,
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, start_new_session=True)
    try:
        deadline = time.monotonic() + 120
        while not (pid_file.exists() and pid_file.read_text()) and time.monotonic() < deadline:
            time.sleep(0.1)
        assert pid_file.exists(), "the launched process never started"
        sleeper = int(pid_file.read_text())
        proc.send_signal(signal.SIGTERM)   # to the command alone, not its group
        out, _ = proc.communicate(timeout=60)
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
    assert proc.returncode == 0, out[-3000:]
    assert "orphaned" not in out, out[-3000:]
    assert not Path(f"/proc/{sleeper}").exists() or "zombie" in Path(f"/proc/{sleeper}/status").read_text().lower(), \
        f"the launched process {sleeper} still runs after SIGTERM:\n{out[-3000:]}"
