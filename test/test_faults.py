"""Faults on the road: supervised processes come back after a SIGKILL, stale output is never published, a
restarted scheduler keeps the running partition, states of another model are refused, and the boundary
goes inline to a receiver on another host or /dev/shm."""

import json
import os
import sys
import time

import pytest

from hybrid_vla_ros import stop
from hybrid_vla_ros.engine.handover.endpoints import HOST_ID, HandoverDecoder, HandoverEncoder
from hybrid_vla_ros.errors import InputError
from hybrid_vla_ros.ros.launch_support.supervise import Supervisor
from hybrid_vla_ros.types import BoundaryState

SLEEPER = [sys.executable, "-c", "import time; time.sleep(600)"]


def wait_for(predicate, timeout_s=20.0):
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if predicate():
            return True
        time.sleep(0.05)
    return predicate()


def supervise_until(supervisor, predicate, timeout_s=20.0):
    return wait_for(lambda: supervisor.step() is None and predicate(), timeout_s)


def test_the_supervisor_restarts_a_killed_child_and_leaves_the_others_alone():
    supervisor = Supervisor({"a": SLEEPER, "b": SLEEPER}, dict(os.environ), respawn_delay_s=0.2)
    supervisor.start_all()
    try:
        first_a, first_b = supervisor.procs["a"].pid, supervisor.procs["b"].pid
        supervisor.procs["a"].kill()
        assert supervise_until(supervisor, lambda: supervisor.procs["a"].pid != first_a
                               and supervisor.procs["a"].poll() is None)
        assert supervisor.procs["b"].pid == first_b and supervisor.procs["b"].poll() is None
        assert supervisor.restarts["a"] == 1 and supervisor.restarts["b"] == 0
    finally:
        from hybrid_vla_ros.ros.launch_support.bringup import stop_processes
        stop_processes(list(supervisor.procs.values()), timeout_s=5)


def test_a_child_that_cannot_start_is_given_up_on_and_no_respawn_ends_the_graph_at_once():
    failing = [sys.executable, "-c", "import sys; sys.exit(3)"]
    supervisor = Supervisor({"bad": failing}, dict(os.environ), respawn_delay_s=0.0)
    supervisor.start_all()
    codes = []
    assert wait_for(lambda: codes.append(supervisor.step()) or codes[-1] is not None, 30)
    assert codes[-1] == 3 and supervisor.restarts["bad"] == 2  # three failed starts in a row
    once = Supervisor({"bad": failing}, dict(os.environ), respawn_delay_s=-1)
    once.start_all()
    codes = []
    assert wait_for(lambda: codes.append(once.step()) or codes[-1] is not None, 30)
    assert codes[-1] == 3 and once.restarts["bad"] == 0


def test_a_stop_request_restarts_nothing():
    supervisor = Supervisor({"a": SLEEPER}, dict(os.environ), respawn_delay_s=0.0)
    supervisor.start_all()
    try:
        stop.request("test")
        supervisor.procs["a"].kill()
        supervisor.procs["a"].wait(10)
        for _ in range(5):
            assert supervisor.step() is None
        assert supervisor.restarts["a"] == 0
    finally:
        stop._requests.clear()


def state(seq=1):
    import torch
    return BoundaryState(hidden=torch.ones(1, 3, 8), position_ids=torch.arange(3).view(1, 3),
                         attention_mask=torch.ones(1, 3, dtype=torch.long), partition=2, seq=seq, stamp_ns=seq,
                         arrival_ns=123456789)


def test_a_state_of_another_model_is_refused_and_the_arrival_time_travels():
    decoder, other = HandoverDecoder(model_id=41), HandoverDecoder(model_id=42)
    try:
        with pytest.raises(InputError, match="from model 0000000000000029, this stage runs model 000000000000002a"):
            other.decode(HandoverEncoder("inline", 1, "x", model_id=41).encode(state()))
        received, _ = decoder.decode(HandoverEncoder("inline", 1, "x", model_id=41).encode(state()))
        assert received.arrival_ns == 123456789
    finally:
        decoder.close()
        other.close()


def test_auto_goes_inline_to_a_receiver_on_another_host_or_dev_shm():
    encoder = HandoverEncoder("auto", 1, "auto_remote")
    try:
        assert encoder.kind() == "shm"            # nothing reported yet: same host assumed
        encoder.receivers = {HOST_ID}
        assert encoder.kind() == "shm"
        encoder.receivers = {HOST_ID ^ 1}         # a receiver elsewhere
        assert encoder.kind() == "inline"
        encoder.receivers = {HOST_ID, HOST_ID ^ 1}
        assert encoder.kind() == "inline"         # one remote receiver is enough: inline reaches all
    finally:
        encoder.close()


# ---- in the real graph ---------------------------------------------------------------------------------

@pytest.mark.slow
def test_a_stale_trajectory_is_dropped_counted_and_reported_not_published(domain):
    from diagnostic_msgs.msg import DiagnosticStatus
    from ros_harness import Harness, wait_until
    h = Harness()
    try:
        lost = []
        h.node.create_subscription(DiagnosticStatus, "/hybrid_vla_suffix/debug/dropped_frames",
                                   lambda m: lost.append({kv.key: kv.value for kv in m.values}), 10)
        h.send_frame(0)
        assert wait_until(lambda: len(h.paths) == 1, h.spin, 10)  # the path and the info travel apart
        h.suffix.params.values["max_output_age_ms"] = 0.001  # any real frame is older than 1 us at publish
        frame = h.frame(1)
        h.publish_images(frame.images, frame.stamp_ns)
        assert wait_until(lambda: h.suffix.health.rejected["stale_output"] == 1 and lost, h.spin, 20)
        assert len(h.paths) == 1  # not published
        assert lost == [{"stamp_ns": str(frame.stamp_ns), "kind": "rejected", "reason": "stale_output"}]
        h.suffix.params.values["max_output_age_ms"] = 0.0  # no limit: the next frame is served (however loaded)
        h.send_frame(2)
        assert wait_until(lambda: len(h.paths) == 2, h.spin, 10)
    finally:
        h.close()


@pytest.mark.slow
def test_a_restarted_scheduler_keeps_the_partition_the_stages_run_at(domain):
    from hybrid_vla_ros.ros.nodes.lifecycle import bring_up
    from ros_harness import Harness, wait_until
    # Scheduler built, not active: it "comes back" below. Its policy must not run during the test: at p=3 the
    # prefix (vision + 3 blocks) is many times the suffix (1 block), and on a loaded machine a frame's ratio
    # passed even hysteresis 10, so the policy moved 3 -> 2 right after adopting 3 (1 failure in 11 runs).
    h = Harness({"hybrid_vla_scheduler": {"update_period_s": 60.0}})
    try:
        for stage in (h.prefix, h.suffix):
            stage.stage.set_partition(3)  # where a scheduler that died had moved the graph
        scheduler = h.graph.nodes["hybrid_vla_scheduler"]
        published = []
        from std_msgs.msg import Int32
        from hybrid_vla_ros.ros.topics import PARTITION_QOS, PARTITION_TOPIC
        h.node.create_subscription(Int32, PARTITION_TOPIC, lambda m: published.append(m.data), PARTITION_QOS)
        scheduler.params.values["autostart"] = True
        bring_up(scheduler)
        seq = 0  # a camera at 10 Hz: the resume window (1 s) hears the running partition from any frame in it
        while scheduler.resume_until is not None and seq < 100:
            h.send_frame(seq, wait=False)
            wait_until(lambda: scheduler.resume_until is None, h.spin, 0.1)
            seq += 1
        assert scheduler.resume_until is None
        h.settle(0.5)
        assert scheduler.policy.partition == 3 and published == []  # adopted, nothing forced on the stages
        assert h.prefix.stage.partition == 3
    finally:
        h.close()


@pytest.mark.slow
def test_each_node_killed_mid_drive_comes_back_and_every_frame_is_accounted_for(domain, tmp_path):
    """bench --scenario faults in small: supervised processes, a 20 Hz camera, SIGKILL suffix, prefix and
    scheduler in turn."""
    from hybrid_vla_ros.bench.drive import graph_config
    from hybrid_vla_ros.bench.faults.kills import run_kills
    result = run_kills("tiny", graph_config("tiny", tmp_path), rate_hz=20.0, before_s=2.0, timeout_s=90.0,
                       progress=lambda text: None)
    for kill in result["kills"]:
        assert kill["recovered"], kill
        shown = {k: kill.get(k) for k in ("node", "published", "delivered", "dropped_counted", "dropped_reasons",
                                          "lost_in_killed_process", "frames_shed_by_dds", "frames_unaccounted",
                                          "unaccounted_published_s", "unaccounted_handed_s",
                                          "unaccounted_outside_camera_reports", "t_back_s",
                                          "max_latency_s")}
        assert kill["frames_unaccounted"] == 0, json.dumps(shown, default=str)   # whole: pytest elides a dict
        assert kill["delivered"] > 0, kill
        assert kill["partitions_after"] == result["partitions_before"] == [2], kill
    scheduler = result["kills"][-1]
    assert scheduler["lost_in_killed_process"] == 0 and scheduler["seconds_to_first_trajectory"] < 2.0
    assert result["graph_exit_code"] == 0


@pytest.mark.slow
def test_a_killed_suffix_with_a_warm_standby_is_replaced_within_a_second_and_nothing_is_published_twice(
        domain, tmp_path):
    """SIGKILL the active suffix of a supervised graph with warm_standby: the standby process takes over
    (respawn alone took 4-7 s here); every frame is delivered or accounted for; the respawned primary stands
    by (no stamp published twice while both are up)."""
    from hybrid_vla_ros.bench.faults.kills import run_standby_kill
    result = run_standby_kill("tiny", tmp_path, rate_hz=20.0, before_s=2.0, timeout_s=90.0, progress=lambda m: None)
    summary = {k: v for k, v in result.items() if not k.startswith("t_") and k != "unaccounted_published_s"}
    assert result["recovered"] and result["seconds_to_first_trajectory"] < 1.0, summary
    where = {k: result.get(k) for k in ("unaccounted_published_s", "unaccounted_handed_s",
                                         "unaccounted_outside_camera_reports", "dropped_reasons", "published_twice",
                                         "max_latency_s")}
    assert result["frames_unaccounted"] == 0 and result["published_twice"] == 0, json.dumps(where, default=str)
    assert result["graph_exit_code"] == 0


def test_loss_in_the_killed_process_is_exactly_what_it_held_not_a_latency_window():
    """Issue 27, item 9: the window 'published within the run's longest latency before the kill' absorbed a
    frame the suffix had silently lost before the kill (here: frame 6, older than frame 7 it delivered)."""
    from hybrid_vla_ros.bench.drive import Ledger
    from hybrid_vla_ros.bench.faults.accounting import account
    ledger = Ledger()
    for stamp in range(1, 11):
        ledger.published[stamp] = float(stamp)
        ledger.handed[stamp] = stamp + 0.05
    ledger.delivered.update({1: 4.0, 2: 4.1, 4: 4.6, 5: 5.5, 7: 7.5, 10: 10.5})   # 1: a slow start (3 s)
    ledger.lost[4] = "x"
    del ledger.delivered[4]
    kill = {"node": "hybrid_vla_suffix", "t_kill": 8.2, "t_back": 10.5}
    account(ledger, [kill], end=20.0)
    # 8: handed before the kill, newer than 7: held by it; 9: handed while it was down
    assert kill["lost_in_killed_process"] == 2 and kill["dropped_counted"] == 1
    assert kill["frames_unaccounted"] == 2 and kill["unaccounted_published_s"] == [-5.2, -2.2]   # 3 and 6
    assert kill["unaccounted_outside_camera_reports"] == 2   # no camera report of the prefix brackets them
    ledger.prefix_cameras = [(1, ((0, 0),)), (1, ((5, 6),))]   # one process's reports: stamps (0, 6] bracketed
    account(ledger, [kill], end=20.0)
    assert kill["unaccounted_outside_camera_reports"] == 0
    scheduler = {"node": "hybrid_vla_scheduler", "t_kill": 8.2, "t_back": None}
    account(ledger, [scheduler], end=20.0)
    assert scheduler["lost_in_killed_process"] == 0            # the scheduler holds no frames
    prefix = {"node": "hybrid_vla_prefix", "t_kill": 8.2, "t_back": 10.5}
    del ledger.handed[8], ledger.handed[9]                     # the prefix held 8 and never took 9
    account(ledger, [prefix], end=20.0)
    assert prefix["lost_in_killed_process"] == 2 and prefix["frames_unaccounted"] == 2


def test_a_frame_counts_as_shed_by_dds_only_when_the_prefix_counts_prove_every_image_of_it_shed():
    """A frame DDS shed at the cameras' best-effort QoS before the prefix took any image of it (its executor
    lagging on a loaded machine) is one no node could report: counted as shed when the prefix's per-camera
    image counts between two of its diagnostics show that many images of that stamp range missing on every
    camera; a frame the prefix handed on, or one a camera's counts cannot cover, stays unaccounted."""
    from hybrid_vla_ros.bench.drive import Ledger
    from hybrid_vla_ros.bench.faults.accounting import account

    def ledger_with(camera1_taken: int) -> Ledger:
        ledger = Ledger()
        for stamp in range(1, 13):
            ledger.published[stamp] = float(stamp)
            if stamp not in (5, 6):                  # 5 and 6 never reached the prefix
                ledger.handed[stamp] = stamp + 0.05
            if stamp not in (5, 6, 9):               # 9: handed on, then lost silently
                ledger.delivered[stamp] = stamp + 0.5
        # prefix diagnostics (pid, per camera (images taken, last stamp)): stamps 3..8, six frames, four taken
        ledger.prefix_cameras = [(7, ((2, 2), (2, 2))), (7, ((6, 8), (camera1_taken, 8))), (7, ((10, 12), (10, 12)))]
        return ledger

    kill = {"node": "hybrid_vla_suffix", "t_kill": 11.5, "t_back": 12.5}
    account(ledger_with(camera1_taken=6), [kill], end=20.0)
    assert kill["frames_shed_by_dds"] == 2 and kill["frames_unaccounted"] == 1
    assert kill["unaccounted_published_s"] == [-2.5] and kill["unaccounted_handed_s"] == [-2.45]
    kill = {"node": "hybrid_vla_suffix", "t_kill": 11.5, "t_back": 12.5}
    account(ledger_with(camera1_taken=7), [kill], end=20.0)   # camera 1 shed one image: not both frames
    assert kill["frames_shed_by_dds"] == 0 and kill["frames_unaccounted"] == 3
    assert kill["unaccounted_handed_s"] == [None, None, -2.45]
