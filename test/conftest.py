import gc
import os
import time

import pytest

# DDS stays on loopback in every test; each test module gets its own domain (see ros tests).
os.environ.setdefault("ROS_AUTOMATIC_DISCOVERY_RANGE", "LOCALHOST")
os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
# Camera frames of real sizes between processes: the package's DDS profile, as its own programs use it
# (the test's helper processes and rclpy contexts inherit it).
from hybrid_vla_ros.ros.launch_support.dds import (  # noqa: E402
    reclaim_dead_participant_segments, use_large_frame_profile)

use_large_frame_profile()


# ---- the garbage collector's pauses (issue 50: frames held for seconds in a long suite, not in the test alone) ----
# A full collection holds the GIL: every thread of this process, the graphs' stage workers and executors included,
# stops meanwhile, and this process accumulates objects test after test (0.94 s for one full collection after
# three graph test files under load). The import-time heap is frozen once collected (ros/launch_support/session.py
# does the same for a node process), and the longest collections are reported at the end.
_GC_PAUSES: list[tuple[float, int, str]] = []
_GC_STARTED: list[float] = []
_CURRENT_TEST: list[str] = [""]


def _on_gc(phase, info):
    if phase == "start":
        _GC_STARTED[:] = [time.perf_counter()]
    elif _GC_STARTED:
        _GC_PAUSES.append((time.perf_counter() - _GC_STARTED[0], info["generation"], _CURRENT_TEST[0]))
        _GC_PAUSES.sort(reverse=True)
        del _GC_PAUSES[5:]


def pytest_collection_finish(session):
    gc.collect()
    gc.freeze()
    gc.callbacks.append(_on_gc)


def pytest_runtest_setup(item):
    _CURRENT_TEST[0] = item.nodeid


_RECLAIMED: list[int] = [0]


@pytest.fixture(autouse=True, scope="module")
def dead_participants_reclaimed():
    """The Fast DDS segments of participants that tests killed (nodes killed mid-drive, graphs stopped by
    SIGKILL) go after each file, not at the end: one suite left 4.3 GB of them in /dev/shm otherwise."""
    yield
    _RECLAIMED[0] += len(reclaim_dead_participant_segments())


def pytest_terminal_summary(terminalreporter):
    _RECLAIMED[0] += len(reclaim_dead_participant_segments())
    terminalreporter.write_line(f"Fast DDS segments of dead participants reclaimed from /dev/shm: {_RECLAIMED[0]}")
    if _on_gc in gc.callbacks:
        gc.callbacks.remove(_on_gc)
    if _GC_PAUSES:
        terminalreporter.write_line("longest garbage-collector pauses (s, generation, test): " + "; ".join(
            f"{s:.3f} g{g} {t}" for s, g, t in _GC_PAUSES[:3]))


@pytest.fixture(autouse=True)
def own_domain(monkeypatch):
    """Every test on a DDS domain of its own, whether it asks for `domain` or not: a graph a test starts without
    it (a bench mode, a demo) must not meet another test's, or another program's, graph on the default domain
    (a loaded run here counted 6 answers to a 4-frame drive: a second graph replaying the same sample drive)."""
    from domains import domain_id
    monkeypatch.setenv("ROS_DOMAIN_ID", str(domain_id()))


@pytest.fixture
def domain(monkeypatch):
    """A DDS domain of this test's own (sequential: no stale participant of an earlier test answers), on
    loopback."""
    from domains import domain_id
    monkeypatch.setenv("ROS_DOMAIN_ID", str(domain_id()))
    monkeypatch.setenv("ROS_AUTOMATIC_DISCOVERY_RANGE", "LOCALHOST")


@pytest.fixture
def context(domain):
    """An rclpy context of this test's own, on its own domain, shut down after it."""
    import rclpy
    context = rclpy.Context()
    rclpy.init(context=context)
    yield context
    rclpy.shutdown(context=context)


@pytest.fixture(scope="session")
def tiny_models():
    """One instance per family, built once (a few tens of ms each)."""
    from hybrid_vla_ros.model.load import load_vla
    return {name: load_vla(preset=name) for name in ("tiny", "tiny-qwen2.5", "tiny-llava", "tiny-qwen3vl", "tiny-internvl")}


def fresh_model(name="tiny"):
    from hybrid_vla_ros.model.load import load_vla
    return load_vla(preset=name)
