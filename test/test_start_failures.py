"""A stage that cannot start says so: a worker thread that dies at its start (pinning, its start hook) fails
the start instead of leaving a silent dead thread; a `cores` value this process may not use fails configure
with the reason; the graph then ends non-zero with it, in one process and in --processes, without respawns."""

import os
import subprocess
import sys
import threading

import pytest
from lifecycle_msgs.msg import State
from rclpy.lifecycle import TransitionCallbackReturn

from hybrid_vla_ros.engine.pipeline.worker import StageWorker
from hybrid_vla_ros.errors import HybridVLAError

from ros_harness import TINY_OVERRIDES, run_to_end

NOT_HERE = 99   # a core no test machine here lets this process use
ALLOWED = sorted(os.sched_getaffinity(0))


def stage_threads() -> list[str]:
    return [t.name for t in threading.enumerate() if t.name.startswith("hvla-") and t.is_alive()]


def test_a_worker_that_cannot_pin_its_cores_fails_its_start_with_the_reason():
    assert NOT_HERE not in ALLOWED
    worker = StageWorker("t", lambda item: None, cores=[NOT_HERE])
    with pytest.raises(HybridVLAError, match=rf"worker t could not start.*\[{NOT_HERE}\]"):
        worker.start()
    assert not worker.alive


def test_a_worker_whose_start_hook_raises_fails_its_start_and_one_that_starts_says_so():
    def hook():
        raise RuntimeError("no memory on that node")
    worker = StageWorker("t", lambda item: None, on_start=hook)
    with pytest.raises(HybridVLAError, match="RuntimeError: no memory on that node"):
        worker.start()
    assert not worker.alive
    started = []
    worker = StageWorker("ok", started.append, on_start=lambda: started.append("hook")).start()
    try:
        assert started == ["hook"] and worker.alive   # the hook ran before start() returned
    finally:
        worker.close()


def configure(node_kind: str, changes: dict, context):
    from hybrid_vla_ros.ros.launch_support.bringup import graph_params, make_node
    params = graph_params(overrides=TINY_OVERRIDES)[node_kind]
    params.update(autostart=False, **changes)
    node = make_node(node_kind, params, context)
    try:
        return node.on_configure(State()), node.worker
    finally:
        node.destroy_node()


@pytest.mark.parametrize("node_kind", ["hybrid_vla_prefix", "hybrid_vla_suffix"])
def test_cores_the_process_may_not_use_fail_configure_with_the_reason(node_kind, context, capfd):
    result, worker = configure(node_kind, {"cores": [ALLOWED[0], NOT_HERE]}, context)
    assert result == TransitionCallbackReturn.FAILURE and worker is None
    err = capfd.readouterr().err
    assert f"cores [{ALLOWED[0]}, {NOT_HERE}]" in err and f"may use {ALLOWED}" in err, err
    assert stage_threads() == []   # nothing left running half-alive


def test_a_suffix_whose_worker_cannot_start_fails_configure(context, capfd, monkeypatch):
    from hybrid_vla_ros.ros.nodes.suffix_node import SuffixNode

    def bind_fails(self):
        raise OSError("mbind refused")
    monkeypatch.setattr(SuffixNode, "_bind_memory", bind_fails)
    result, worker = configure("hybrid_vla_suffix", {}, context)
    assert result == TransitionCallbackReturn.FAILURE and worker is None
    assert "mbind refused" in capfd.readouterr().err
    assert stage_threads() == []


def test_a_graph_whose_node_fails_configure_activates_none_of_its_nodes(context):
    from hybrid_vla_ros.ros.launch_support.bringup import InProcessGraph, graph_params
    overrides = {k: dict(v) for k, v in TINY_OVERRIDES.items()}
    overrides["hybrid_vla_suffix"]["cores"] = [NOT_HERE]
    graph = InProcessGraph(graph_params(overrides=overrides), context=context)
    try:
        assert list(graph.failed) == ["hybrid_vla_suffix"] and f"[{NOT_HERE}]" in graph.failed["hybrid_vla_suffix"]
        assert not any(n.active for n in graph.nodes.values())
        assert stage_threads() == []
    finally:
        graph.shutdown()


@pytest.mark.parametrize("processes", [False, True], ids=["one_process", "processes"])
def test_the_graph_with_cores_it_may_not_use_exits_non_zero_with_the_reason(domain, tmp_path, processes):
    from hybrid_vla_ros.ros.launch_support.bringup import graph_params, write_combined_config
    overrides = {k: dict(v) for k, v in TINY_OVERRIDES.items()}
    overrides["hybrid_vla_prefix"]["cores"] = [NOT_HERE]
    config = write_combined_config(graph_params(overrides=overrides), tmp_path / "graph.yaml")
    cmd = [sys.executable, "-m", "hybrid_vla_ros.cli", "graph", "--config", str(config)] + ["--processes"] * processes
    returncode, out = run_to_end(cmd, timeout_s=60)
    assert returncode != 0, out[-2000:]
    assert f"cores [{NOT_HERE}]" in out and f"may use {ALLOWED}" in out, out[-2000:]
    assert "restarting" not in out and "Traceback" not in out, out[-2000:]


def test_a_child_whose_node_cannot_be_configured_exits_with_ex_config(domain, tmp_path):
    """A child of --processes (bringup --node) does not sit unconfigured forever: it ends with EX_CONFIG (78),
    which the supervisor takes as 'do not restart'."""
    from hybrid_vla_ros.ros.launch_support.bringup import graph_params, write_combined_config
    overrides = {k: dict(v) for k, v in TINY_OVERRIDES.items()}
    overrides["hybrid_vla_scheduler"].update(policy="cost", profile_json=str(tmp_path / "missing.json"))
    config = write_combined_config(graph_params(overrides=overrides), tmp_path / "graph.yaml")
    cmd = [sys.executable, "-m", "hybrid_vla_ros.ros.launch_support.bringup", "--node", "hybrid_vla_scheduler",
           "--config", str(config)]
    try:
        out = subprocess.run(cmd, capture_output=True, text=True, timeout=60)
    except subprocess.TimeoutExpired:
        pytest.fail("the child did not end")
    assert out.returncode == os.EX_CONFIG == 78, out.stderr[-2000:]
    assert "configure failed: profile_json" in out.stderr, out.stderr[-2000:]


@pytest.mark.parametrize("node_kind,changes,said", [
    ("hybrid_vla_prefix", {"chunks": 2}, "chunks=2: model 'tiny-act' decodes action tokens"),
    ("hybrid_vla_suffix", {"chunks": 2}, "chunks=2: model 'tiny-act' decodes action tokens"),
    ("hybrid_vla_suffix", {"warm_standby": True}, "warm_standby: model 'tiny-act' decodes action tokens")])
def test_an_action_token_model_refuses_at_configure_what_its_sides_do_not_do(node_kind, changes, said, context, capfd):
    """Its frames in flight live in the packed KV ring: a standby could not take them over, and a packed step is
    not chunked. Refused with the reason (ros/nodes/serving/tokens.py), nothing left running."""
    result, worker = configure(node_kind, {"model.preset": "tiny-act", **changes}, context)
    assert result == TransitionCallbackReturn.FAILURE and worker is None
    assert said in capfd.readouterr().err
    assert stage_threads() == []
