"""The supervisor of `hybrid-vla graph --processes` gives up on a node that cannot start, however long its
start takes: a child that refused its configuration (EX_CONFIG) is not restarted at all, one that dies the
same way at the same point of every start is given up on after GIVE_UP_AFTER tries; one that dies at
different points (a crash in service) keeps being restarted. And the whole graph in a /dev/shm too small for
the boundary ring ends at once, non-zero, with the sizes and the remedy (a mount namespace of its own)."""

import os
import shutil
import subprocess
import sys
import time

import pytest

from hybrid_vla_ros.ros.launch_support import supervise
from hybrid_vla_ros.ros.launch_support.supervise import EX_CONFIG, GIVE_UP_AFTER, Supervisor

from ros_harness import TINY_OVERRIDES, run_to_end


def child(body: str) -> list[str]:
    return [sys.executable, "-c", f"import os, signal, sys, time\n{body}"]


def supervise_until_end(supervisor: Supervisor, timeout_s: float) -> int | None:
    """step() until the graph has to end (-> its exit code) or timeout_s (-> None: it would go on)."""
    supervisor.start_all()
    try:
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            code = supervisor.step()
            if code is not None:
                return code
            time.sleep(0.02)
        return None
    finally:
        supervise.stop_processes(list(supervisor.procs.values()), timeout_s=5)


@pytest.fixture
def slow_starts(monkeypatch):
    """Starts that take longer than QUICK_EXIT_S (a model load): shortened to 0.1 s here."""
    monkeypatch.setattr(supervise, "QUICK_EXIT_S", 0.1)


def test_a_child_that_refused_its_configuration_is_not_restarted_however_long_it_took(slow_starts):
    refuses = child(f"time.sleep(0.4); sys.exit({EX_CONFIG})")
    supervisor = Supervisor({"prefix": refuses}, dict(os.environ), respawn_delay_s=0.0)
    assert supervise_until_end(supervisor, timeout_s=8) == EX_CONFIG
    assert supervisor.restarts["prefix"] == 0
    assert EX_CONFIG == os.EX_CONFIG == 78   # what bringup's child exits with when its configure failed


def test_a_child_that_dies_at_the_same_point_of_every_start_is_given_up_on(slow_starts):
    bus_error = child("time.sleep(0.4); os.kill(os.getpid(), signal.SIGBUS)")   # load, first frame, SIGBUS
    supervisor = Supervisor({"prefix": bus_error}, dict(os.environ), respawn_delay_s=0.0)
    assert supervise_until_end(supervisor, timeout_s=15) == 7
    assert supervisor.restarts["prefix"] == GIVE_UP_AFTER - 1


def test_a_child_that_dies_at_different_points_is_restarted(slow_starts, monkeypatch, tmp_path):
    monkeypatch.setattr(supervise, "SAME_POINT_MIN_S", 0.3)
    runs = tmp_path / "runs"
    crashes = child(f"runs = open({str(runs)!r}, 'a+'); runs.write('x'); runs.seek(0); n = len(runs.read())\n"
                    "time.sleep(0.2 if n % 2 else 1.4); os.kill(os.getpid(), signal.SIGBUS)")
    supervisor = Supervisor({"suffix": crashes}, dict(os.environ), respawn_delay_s=0.0)
    assert supervise_until_end(supervisor, timeout_s=6) is None
    assert supervisor.restarts["suffix"] >= GIVE_UP_AFTER


@pytest.fixture
def full_dev_shm(monkeypatch):
    """/dev/shm with 64 KiB free (what configure's check reads)."""
    from hybrid_vla_ros.engine.handover import shm_segment
    monkeypatch.setattr(shm_segment, "free_bytes", lambda directory: 65536)


def test_a_prefix_whose_ring_cannot_fit_in_dev_shm_fails_configure_with_the_sizes_and_the_remedy(
        context, full_dev_shm, capfd):
    from lifecycle_msgs.msg import State
    from rclpy.lifecycle import TransitionCallbackReturn
    from hybrid_vla_ros.ros.launch_support.bringup import graph_params, make_node
    params = {**graph_params(overrides=TINY_OVERRIDES)["hybrid_vla_prefix"], "autostart": False, "max_in_flight": 16}
    node = make_node("hybrid_vla_prefix", params, context)   # boundary_transport auto, alone in its process
    try:
        assert node.on_configure(State()) == TransitionCallbackReturn.FAILURE
        assert node.worker is None and node.serving is None   # nothing left running or mapped
    finally:
        node.destroy_node()
    err = capfd.readouterr().err
    assert "the boundary ring (16 slots of" in err and "which has 64 KiB free (65536 B)" in err, err
    assert "--shm-size" in err and "max_in_flight" in err and "boundary_transport: inline" in err, err


def test_a_prefix_beside_its_suffix_in_one_process_needs_no_room_in_dev_shm(context, full_dev_shm):
    from hybrid_vla_ros.ros.launch_support.bringup import InProcessGraph, graph_params
    overrides = {k: dict(v) for k, v in TINY_OVERRIDES.items()}
    overrides["hybrid_vla_prefix"]["max_in_flight"] = 16
    graph = InProcessGraph(graph_params(overrides=overrides), context=context)   # auto: in-process handles
    try:
        assert all(n.active for name, n in graph.nodes.items() if name != "hybrid_vla_scheduler")
    finally:
        graph.shutdown()


def unshare_works() -> bool:
    return shutil.which("unshare") is not None and \
        subprocess.run(["unshare", "-m", "true"], capture_output=True).returncode == 0


@pytest.mark.slow   # a node process starting: torch, rclpy, the model (10-60 s on a loaded 2-core machine)
@pytest.mark.skipif(not unshare_works(), reason="unshare -m (a mount namespace of its own) is not permitted here")
def test_the_graph_in_a_dev_shm_too_small_for_its_ring_ends_at_configure_with_the_sizes_and_the_remedy(
        domain, tmp_path):
    from hybrid_vla_ros.ros.launch_support.bringup import graph_params, write_combined_config
    overrides = {k: dict(v) for k, v in TINY_OVERRIDES.items()}
    overrides["hybrid_vla_prefix"]["max_in_flight"] = 16      # 16 slots of ~12 kB: more than the 64 kB there
    config = write_combined_config(graph_params(overrides=overrides), tmp_path / "graph.yaml")
    graph = f"{sys.executable} -m hybrid_vla_ros.cli graph --processes --nodes prefix --config {config}"
    script = f"mount -t tmpfs -o size=64k tmpfs /dev/shm && exec {graph}"
    returncode, out = run_to_end(["unshare", "-m", "sh", "-c", script], timeout_s=120)
    assert returncode == EX_CONFIG, out[-3000:]
    assert "configure failed: the boundary ring (16 slots of" in out and "in /dev/shm, which has" in out, out[-3000:]
    assert "--shm-size" in out and "max_in_flight" in out and "boundary_transport: inline" in out, out[-3000:]
    assert "restarting" not in out and "exited with -7" not in out and "Traceback" not in out, out[-3000:]
