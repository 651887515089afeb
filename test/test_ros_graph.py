"""The ROS 2 graph with real rclpy over loopback DDS: replay, one process vs processes, lifecycle over
services, partition changes, parameter services, and every kind of bad input."""

import os
import subprocess
import sys
import time

import numpy as np
import pytest
import torch

from hybrid_vla_ros.engine.handover.endpoints import HandoverEncoder
from hybrid_vla_ros.engine.stages import reference_forward
from hybrid_vla_ros.types import EgoState
from hybrid_vla_ros.model.load import load_vla
from hybrid_vla_ros.ros import messages

from ros_harness import CAMERAS, TINY_OVERRIDES, Harness, domain_id, wait_until

pytestmark = pytest.mark.slow


@pytest.fixture
def harness(domain):
    h = Harness()
    yield h
    h.close()


def reference_points(seq):
    model = load_vla(preset="tiny")
    from hybrid_vla_ros.model.inputs import synthetic_frame
    frame = synthetic_frame(model.spec, seq, stamp_ns=(seq + 1) * 100_000_000)
    frame.ego = EgoState()
    return reference_forward(model, frame)[1].points


def test_frames_in_give_one_trajectory_each_in_order(harness):
    for seq in range(4):
        harness.send_frame(seq)
    assert [int(i["seq"]) for i in harness.infos] == [0, 1, 2, 3]
    assert [int(i["stamp_ns"]) for i in harness.infos] == [(s + 1) * 100_000_000 for s in range(4)]
    assert {i["transport"] for i in harness.infos} == {"inproc"}  # zero-copy handle in one process
    wait_until(lambda: len(harness.paths) == 4, harness.spin)
    xy = np.array([[p.pose.position.x, p.pose.position.y] for p in harness.paths[2].poses])
    np.testing.assert_allclose(xy, reference_points(2)[:, :2], atol=1e-5)


def test_partition_change_mid_stream_takes_effect_at_a_frame_boundary(harness):
    from rcl_interfaces.msg import Parameter, ParameterType, ParameterValue
    from rcl_interfaces.srv import SetParameters
    client = harness.node.create_client(SetParameters, "/hybrid_vla_prefix/set_parameters")
    for seq in range(3):
        harness.send_frame(seq)
    request = SetParameters.Request(parameters=[Parameter(
        name="partition_point", value=ParameterValue(type=ParameterType.PARAMETER_INTEGER, integer_value=3))])
    future = client.call_async(request)
    assert wait_until(future.done, harness.spin)
    assert future.result().results[0].successful
    for seq in range(3, 6):
        harness.send_frame(seq)
    assert [int(i["seq"]) for i in harness.infos] == list(range(6))
    assert [int(i["partition"]) for i in harness.infos] == [2, 2, 2, 3, 3, 3]
    wait_until(lambda: len(harness.paths) == 6, harness.spin)
    for seq in (2, 3):  # either side of the change: each frame equals the unsplit model
        xy = np.array([[p.pose.position.x, p.pose.position.y] for p in harness.paths[seq].poses])
        np.testing.assert_allclose(xy, reference_points(seq)[:, :2], atol=1e-5)


def set_param(harness, node, name, value):
    from rclpy.parameter import Parameter
    from rcl_interfaces.srv import SetParameters
    client = harness.node.create_client(SetParameters, f"/{node}/set_parameters")
    assert wait_until(lambda: client.service_is_ready(), harness.spin, 10)
    future = client.call_async(SetParameters.Request(parameters=[Parameter(name, value=value).to_parameter_msg()]))
    assert wait_until(future.done, harness.spin)
    return future.result().results[0]


def test_parameter_services_apply_valid_changes_and_refuse_invalid_ones_with_a_reason(harness):
    ok = set_param(harness, "hybrid_vla_prefix", "partition_point", 1)
    assert ok.successful and harness.prefix.stage.partition == 1
    assert set_param(harness, "hybrid_vla_prefix", "instruction", "turn left").successful
    assert harness.prefix.params["instruction"] == "turn left"
    out_of_zone = set_param(harness, "hybrid_vla_prefix", "partition_point", 4)
    assert not out_of_zone.successful and "outside the dynamic zone [1, 3]" in out_of_zone.reason
    out_of_range = set_param(harness, "hybrid_vla_prefix", "partition_point", 2000)
    assert not out_of_range.successful
    wrong_type = set_param(harness, "hybrid_vla_prefix", "partition_point", "two")
    assert not wrong_type.successful
    assert set_param(harness, "hybrid_vla_prefix", "use_sim_time", True).successful  # rclpy's own
    assert harness.prefix.get_clock().ros_time_is_active
    assert set_param(harness, "hybrid_vla_prefix", "use_sim_time", False).successful
    read_only = set_param(harness, "hybrid_vla_prefix", "device", "cuda")
    assert not read_only.successful and "read-only" in read_only.reason.lower()
    assert harness.prefix.stage.partition == 1
    assert harness.prefix.health.rejected["parameter"] >= 1
    harness.send_frame(0)
    assert int(harness.infos[-1]["partition"]) == 1


def test_bad_images_are_rejected_counted_and_the_next_frame_is_served(harness):
    frame = harness.frame(0)
    harness.publish_images(frame.images, frame.stamp_ns, encoding="bayer_rggb8")  # unsupported encoding
    harness.publish_images([img[:, :5] for img in frame.images], frame.stamp_ns + 1,
                           encoding="yuv422")                                         # 4:2:2 needs an even width
    harness.settle(0.5)
    from sensor_msgs.msg import Image
    msg = messages.array_to_image(frame.images[0], Image())
    msg.data = bytes(msg.data)[:-10]                                                  # truncated
    harness.image_pubs[0].publish(msg)
    harness.settle(0.5)
    assert harness.infos == []
    rejected = harness.prefix.health.rejected
    assert rejected == {"invalid_image": 5}, dict(rejected)  # 2 cameras x 2 bad sets + the truncated one
    harness.send_frame(1)
    assert [int(i["seq"]) for i in harness.infos] == [0]  # the prefix's first frame: no bad set became one


def test_out_of_order_and_stale_frames_are_rejected(harness):
    harness.send_frame(3)
    old = harness.frame(1)
    harness.publish_images(old.images, old.stamp_ns)  # older stamp than the last served frame
    harness.settle(0.7)
    assert harness.prefix.health.rejected["out_of_order"] == 1 and len(harness.infos) == 1
    harness.prefix.params.values["stale_after_ms"] = 1000.0  # a real-time node: 1 s old is stale
    stale = harness.frame(5)
    harness.publish_images(stale.images, stale.stamp_ns)  # stamp in 1970: far too old
    harness.settle(0.7)
    assert harness.prefix.health.rejected["stale"] == 1 and len(harness.infos) == 1


def test_bad_boundary_states_are_rejected_counted_and_the_next_frame_is_served(domain):
    """A named boundary_dtype (fp32) refuses a bf16 state (boundary_dtype_mismatch); the shipped auto would take
    it (test_a_bf16_boundary_state_is_served_by_the_shipped_auto_boundary_dtype)."""
    harness = Harness({"hybrid_vla_suffix": {"boundary_dtype": "fp32"}})
    try:
        from std_msgs.msg import UInt8MultiArray
        harness.send_frame(0)
        good = harness.prefix.stage.run(harness.frame(1))

        def publish(state=None, raw=None):
            data = raw if raw is not None else HandoverEncoder("inline", 1, "test", model_id=harness.prefix.serving.handover.model_id).encode(state)
            harness.boundary_pub.publish(UInt8MultiArray(data=data))

        def variant(**changes):
            state = harness.prefix.stage.run(harness.frame(1))
            for k, v in changes.items():
                setattr(state, k, v)
            return state

        publish(variant(hidden=good.hidden[:, :5]))                    # wrong shape
        publish(variant(hidden=good.hidden.to(torch.bfloat16)))        # wrong dtype
        publish(variant(partition=0))                                  # partition outside the suffix's zone
        bad_version = bytearray(HandoverEncoder("inline", 1, "test", model_id=harness.prefix.serving.handover.model_id).encode(good))
        bad_version[4] = 9                                     # HVLM version 9
        publish(raw=bytes(bad_version))
        publish(raw=b"garbage")
        publish(raw=b"HVLE" + bytes(bad_version[4:]))          # the envelope HVLM replaced: refused by name
        harness.settle(1.0)
        assert len(harness.infos) == 1
        rejected = dict(harness.suffix.health.rejected)
        assert rejected["invalid_boundary"] == 4 and rejected["boundary_dtype_mismatch"] == 1, rejected
        assert rejected["old_message"] == 1, rejected
        harness.send_frame(2)
        assert [int(i["seq"]) for i in harness.infos] == [0, 1]  # prefix numbers frames it serves: 0, then 1
    finally:
        harness.close()


def test_a_bf16_boundary_state_is_served_by_the_shipped_auto_boundary_dtype(harness):
    """boundary_dtype auto: a bf16 state (a bf16 prefix's) is converted to the fp32 suffix and served."""
    from std_msgs.msg import UInt8MultiArray
    harness.send_frame(0)
    frame = harness.frame(1)
    frame.ego = EgoState()   # as the graph's prefix (no kinematic state) and reference_points give it
    state = harness.prefix.stage.run(frame)
    state.hidden = state.hidden.to(torch.bfloat16)
    harness.boundary_pub.publish(UInt8MultiArray(data=HandoverEncoder("inline", 1, "test", model_id=harness.prefix.serving.handover.model_id).encode(state)))
    assert wait_until(lambda: len(harness.paths) == 2, harness.spin)
    xy = np.array([[p.pose.position.x, p.pose.position.y] for p in harness.paths[1].poses])
    assert np.abs(xy - reference_points(1)[:, :2]).max() < 0.1 and not harness.suffix.health.rejected


def test_nonfinite_boundary_states_are_refused_never_published_and_reported(harness):
    """One inf (an fp16 overflow on a GPU prefix, a damaged payload) used to come out as NaN waypoints."""
    from diagnostic_msgs.msg import DiagnosticArray, DiagnosticStatus
    from std_msgs.msg import UInt8MultiArray
    seen = {}
    harness.node.create_subscription(DiagnosticArray, "/diagnostics",
                                     lambda m: seen.update({s.name: s for s in m.status}), 20)
    harness.send_frame(0)
    for i, bad in enumerate((float("inf"), float("nan"))):
        state = harness.prefix.stage.run(harness.frame(1 + i))
        state.hidden = state.hidden.clone()
        state.hidden[0, 2 + i, 1] = bad
        harness.boundary_pub.publish(UInt8MultiArray(data=HandoverEncoder("inline", 1, "test", model_id=harness.prefix.serving.handover.model_id).encode(state)))
    assert wait_until(lambda: harness.suffix.health.rejected["nonfinite_boundary"] == 2, harness.spin, 10)
    assert wait_until(lambda: "hybrid_vla_suffix: nonfinite" in seen and
                      {kv.key: kv.value for kv in seen["hybrid_vla_suffix: nonfinite"].values}["nonfinite"] == "2",
                      harness.spin, 10)
    assert seen["hybrid_vla_suffix: nonfinite"].level == DiagnosticStatus.WARN
    assert len(harness.infos) == 1                      # nothing published for either
    harness.send_frame(3)
    assert len(harness.infos) == 2


def test_states_sent_to_an_inactive_suffix_give_their_in_process_slots_back_at_once(harness):
    """Before: an inactive suffix dropped in-process envelopes without releasing them; the prefix then waited
    10 s per slot (the in-flight slot timeout, now at least 10 s: engine/pipeline/flight.py) before it could
    take another frame."""
    harness.send_frame(0)
    harness.suffix.trigger_deactivate()
    max_in_flight = harness.prefix.serving.flight.max_in_flight
    for seq in range(1, 1 + max_in_flight + 1):   # more frames than slots: each must come back
        harness.send_frame(seq, wait=False)
        harness.settle(0.3)
    assert wait_until(lambda: harness.suffix.health.drop_reasons["inactive"] == max_in_flight + 1, harness.spin, 5)
    # idle, the prefix holds the one slot it asked for before taking a frame; none is held by a dropped state
    assert wait_until(lambda: harness.prefix.serving.flight.in_flight <= 1, harness.spin, 2)
    assert harness.prefix.serving.flight.reclaimed == 0
    harness.suffix.trigger_activate()
    t0 = time.monotonic()
    harness.send_frame(10)
    assert time.monotonic() - t0 < 5.0 and len(harness.infos) == 2


def test_bring_up_activates_the_receivers_before_the_senders(harness):
    from hybrid_vla_ros.ros.nodes.lifecycle import bring_up_all
    order, stages = [], [harness.graph.nodes[n] for n in ("hybrid_vla_prefix", "hybrid_vla_suffix")]
    for node in stages:          # back to unconfigured (the scheduler is left alone: it never started here)
        node.trigger_deactivate()
        node.trigger_cleanup()
        node.activated = lambda name=node.get_name(): order.append(name)
    bring_up_all(stages)
    assert order == ["hybrid_vla_suffix", "hybrid_vla_prefix"]


def test_an_unexpected_exception_in_a_stage_is_counted_reported_and_the_next_frame_is_served(harness):
    from diagnostic_msgs.msg import DiagnosticArray, DiagnosticStatus
    seen = {}
    harness.node.create_subscription(DiagnosticArray, "/diagnostics",
                                     lambda m: seen.update({s.name: s for s in m.status}), 20)
    harness.send_frame(0)
    real_run = harness.suffix.stage.run
    harness.suffix.stage.run = lambda state: (_ for _ in ()).throw(RuntimeError("injected fault"))
    harness.send_frame(1, wait=False)
    assert wait_until(lambda: harness.suffix.health.failures["RuntimeError"] == 1, harness.spin, 10)
    harness.suffix.stage.run = real_run
    harness.send_frame(2)
    assert [int(i["seq"]) for i in harness.infos] == [0, 2]
    assert wait_until(lambda: "hybrid_vla_suffix: failures" in seen and
                      {kv.key: kv.value for kv in seen["hybrid_vla_suffix: failures"].values}.get("failed.RuntimeError")
                      == "1", harness.spin, 5)
    assert seen["hybrid_vla_suffix: worker"].level == DiagnosticStatus.OK


def test_in_process_graph_bounds_frames_in_flight_like_the_engine(domain):
    """max_in_flight means frames taken by the prefix and not finished by the suffix, in the graph too."""
    h = Harness({"hybrid_vla_prefix": {"input_policy": "latest", "max_in_flight": 2}})
    try:
        real_run = h.suffix.stage.run

        def slow_run(state):
            time.sleep(0.15)  # a timing double: makes the suffix the bottleneck on purpose
            return real_run(state)

        h.suffix.stage.run = slow_run
        backlog = []
        for seq in range(8):
            h.send_frame(seq, wait=False)
            h.settle(0.03)
            backlog.append(h.suffix.worker.backlog())
        assert wait_until(lambda: len(h.infos) + h.prefix.health.dropped == 8, h.spin, 20)
        assert h.prefix.serving.flight.max_seen == 2 and max(backlog) <= 2
        served = [int(i["seq"]) for i in h.infos]
        assert served == sorted(served) and len(served) + h.prefix.health.dropped == 8, (served, h.prefix.health.dropped)
        assert h.prefix.health.drop_reasons["displaced"] == h.prefix.health.dropped > 0
    finally:
        h.close()


def test_diagnostics_report_stage_time_backlog_drops_and_rejections(harness):
    from diagnostic_msgs.msg import DiagnosticArray
    seen = {}
    harness.node.create_subscription(DiagnosticArray, "/diagnostics",
                                     lambda m: seen.update({s.name: s for s in m.status}), 20)
    harness.send_frame(0)
    assert wait_until(lambda: "hybrid_vla_suffix: rejected_inputs" in seen and
                      "hybrid_vla_prefix: processing_time" in seen, harness.spin, 5)
    for node in ("hybrid_vla_prefix", "hybrid_vla_suffix"):
        for check in ("processing_time", "period", "backlog", "drops", "rejected_inputs", "failures", "worker"):
            assert f"{node}: {check}" in seen
    values = {kv.key: kv.value for kv in seen["hybrid_vla_prefix: processing_time"].values}
    assert float(values["stage_time_ms"]) > 0


def test_processing_time_warns_then_errors_when_it_persists(harness):
    health = harness.prefix.health
    health.warn_ms, health.error_after = 0.0, 2
    harness.send_frame(0)
    assert health.time_level() == 1
    harness.send_frame(1)
    assert health.time_level() == 2


def test_stage_nodes_follow_their_lifecycle(domain):
    """configure builds the stage and its worker, activate takes inputs, deactivate stops taking them
    (counted), cleanup frees everything, and the node can be configured again."""
    from lifecycle_msgs.msg import State
    h = Harness({"hybrid_vla_prefix": {"autostart": False}})
    try:
        prefix = h.prefix
        assert prefix.stage is None and prefix.worker is None
        assert prefix._state_machine.current_state[0] == State.PRIMARY_STATE_UNCONFIGURED
        prefix.trigger_configure()
        assert prefix.stage is not None and prefix.worker.alive and not prefix.active
        assert wait_until(lambda: all(p.get_subscription_count() for p in h.image_pubs), h.spin, 10)
        h.send_frame(0, wait=False)
        assert wait_until(lambda: prefix.health.drop_reasons["inactive"] >= 1, h.spin, 5)
        prefix.trigger_activate()
        h.send_frame(1)
        prefix.trigger_deactivate()
        h.send_frame(2, wait=False)
        h.settle(0.5)
        assert [int(i["seq"]) for i in h.infos] == [0]  # the prefix numbers the frames it served
        worker = prefix.worker
        prefix.trigger_cleanup()
        assert prefix.stage is None and prefix.worker is None and not worker.alive
        assert prefix._state_machine.current_state[0] == State.PRIMARY_STATE_UNCONFIGURED
        prefix.trigger_configure()
        prefix.trigger_activate()
        h.send_frame(3)
        assert len(h.infos) == 2
    finally:
        h.close()


def test_scheduler_gets_one_sample_per_frame_with_the_partition_it_ran_at(domain):
    # the scheduler's zone is p = 2 only: this is about its samples, not its policy (with the zone [1, 3] a
    # first frame's warm-up, its prefix over 11x the tiny suffix on a fast CPU, moved the cut: 1 run in 4 here)
    h = Harness({"hybrid_vla_scheduler": {"update_period_s": 0.05, "dynamic_zone_min": 2, "dynamic_zone_max": 2}},
                activate_scheduler=True)
    try:
        scheduler = h.graph.nodes["hybrid_vla_scheduler"]
        for seq in range(3):
            h.send_frame(seq)
        assert wait_until(lambda: len(scheduler.fed) == 3, h.spin, 10), scheduler.fed
        assert [s.partition for s in scheduler.fed] == [2, 2, 2]
        info = [float(i["suffix_ms"]) for i in h.infos]
        assert [s.suffix_ms for s in scheduler.fed] == pytest.approx(info, abs=1e-3)
        assert all(0 < s.prefix_ms < 60_000 for s in scheduler.fed)
    finally:
        h.close()


def test_scheduler_lifecycle_over_services_from_another_process(domain, tmp_path):
    """The scheduler runs in its own process; this process drives it through lifecycle services."""
    import rclpy
    from lifecycle_msgs.msg import State, Transition
    from lifecycle_msgs.srv import ChangeState, GetState
    from rclpy.node import Node
    from rclpy.qos import DurabilityPolicy, QoSProfile
    from std_msgs.msg import Int32
    from hybrid_vla_ros.ros.launch_support.bringup import graph_params, write_combined_config
    from hybrid_vla_ros.ros.topics import PARTITION_TOPIC
    config = write_combined_config(graph_params(overrides=TINY_OVERRIDES), tmp_path / "graph.yaml")
    proc = subprocess.Popen([sys.executable, "-m", "hybrid_vla_ros.ros.launch_support.bringup", "--node", "hybrid_vla_scheduler",
                             "--config", str(config), "--no-autostart"])
    context = rclpy.Context()
    rclpy.init(context=context)
    from rclpy.executors import SingleThreadedExecutor
    node = Node("lifecycle_tester", context=context)
    executor = SingleThreadedExecutor(context=context)
    executor.add_node(node)
    spin = lambda t: executor.spin_once(timeout_sec=t)  # noqa: E731
    try:
        get = node.create_client(GetState, "/hybrid_vla_scheduler/get_state")
        change = node.create_client(ChangeState, "/hybrid_vla_scheduler/change_state")
        partitions = []
        node.create_subscription(Int32, PARTITION_TOPIC, lambda m: partitions.append(m.data),
                                 QoSProfile(depth=1, durability=DurabilityPolicy.TRANSIENT_LOCAL))
        assert change.wait_for_service(timeout_sec=60) and get.wait_for_service(timeout_sec=60)

        def call(client, request, timeout_s=20):
            future = client.call_async(request)
            assert wait_until(future.done, spin, timeout_s), f"no answer from {client.srv_name}"
            return future.result()

        def answered(client, request):
            """wait_for_service sees the server's request reader only; the reply path of a new client can
            still be unmatched on a loaded machine (the reply is then lost). Probe with a request that changes
            nothing until one round trip completes."""
            for _ in range(20):
                future = client.call_async(request)
                if wait_until(future.done, spin, 2.0):
                    return future.result()
            raise AssertionError(f"{client.srv_name}: no round trip in 20 probes")

        answered(get, GetState.Request())

        def state():
            return call(get, GetState.Request()).current_state.id

        def transition(tid, then=None):
            """-> whether the change was accepted. A reply lost on a new client's reply path is recovered by
            asking the state; jazzy's rclpy answers nothing to an invalid transition (its callback raises,
            the node survives it): that counts as refused."""
            future = change.call_async(ChangeState.Request(transition=Transition(id=tid)))
            if wait_until(future.done, spin, 5.0):
                return future.result().success
            return then is not None and state() == then

        assert state() == State.PRIMARY_STATE_UNCONFIGURED
        assert not transition(Transition.TRANSITION_ACTIVATE)  # cannot activate what is not configured
        assert state() == State.PRIMARY_STATE_UNCONFIGURED      # ... and the node is still there
        inactive = State.PRIMARY_STATE_INACTIVE
        assert transition(Transition.TRANSITION_CONFIGURE, inactive) and state() == inactive
        wait_until(lambda: False, spin, 0.5)
        assert partitions == []  # inactive: nothing published
        assert transition(Transition.TRANSITION_ACTIVATE, State.PRIMARY_STATE_ACTIVE)
        assert state() == State.PRIMARY_STATE_ACTIVE
        assert wait_until(lambda: partitions == [2], spin, 10)
        assert transition(Transition.TRANSITION_DEACTIVATE) and state() == State.PRIMARY_STATE_INACTIVE
        assert transition(Transition.TRANSITION_CLEANUP) and state() == State.PRIMARY_STATE_UNCONFIGURED
        assert not transition(Transition.TRANSITION_ACTIVATE)
        assert transition(Transition.TRANSITION_UNCONFIGURED_SHUTDOWN, State.PRIMARY_STATE_FINALIZED)
        assert state() == State.PRIMARY_STATE_FINALIZED
    finally:
        executor.remove_node(node)
        executor.shutdown()  # before destroying the node: session.RELEASE_NOTE
        node.destroy_node()
        rclpy.shutdown(context=context)
        proc.send_signal(2)
        proc.wait(20)


def test_sample_drive_gives_the_same_trajectories_in_one_process_and_in_separate_processes(domain, tmp_path):
    from hybrid_vla_ros.ros.launch_support.bringup import graph_params, write_combined_config
    from hybrid_vla_ros.ros.demo import drive_graph, write_sample_drive
    overrides = {k: dict(v) for k, v in TINY_OVERRIDES.items()}
    # Kinematic state off here: under heavy load a late odometry message (counted as kinematic_state_late)
    # would give the two runs different ego inputs; matching by stamp is tested on its own below.
    # Lossless: the comparison needs the same frames in both runs. Under latest-frame-wins, which frames a
    # loaded machine displaces differs from run to run (2 of 8 in one of 12 fresh-clone runs: a flaky test,
    # not a defect; displacement itself is tested in test_pipeline and by the frames-in-flight test here).
    overrides["hybrid_vla_prefix"].update(image_transport="compressed", input_policy="lossless", use_kinematic_state=False,
                                          camera_topics=[f"{c}/compressed" for c in CAMERAS])
    bag = write_sample_drive(tmp_path / "drive", "tiny", [f"{c}/compressed" for c in CAMERAS], frames=8)
    params = graph_params(overrides=overrides)
    config = write_combined_config(params, tmp_path / "graph.yaml")
    one, traj_one = drive_graph(bag, params, record_to=tmp_path / "out_one", settle_s=20)
    assert one["frames_published"] == 8
    assert one["trajectories"] == 8 and one["dropped"] == 0
    assert one["transports"] == ["inproc"] and one["recorded"]["/planning/hybrid_vla/trajectory"] == one["trajectories"]
    many, traj_many = drive_graph(bag, params, processes=True, config=str(config), settle_s=60)
    assert many["transports"] == ["shm"]
    common = sorted(set(traj_one) & set(traj_many))
    assert len(common) == 8
    for stamp in common:
        np.testing.assert_allclose(traj_one[stamp], traj_many[stamp], atol=1e-5)


def odometry(stamp_ns: int, x: float, y: float, yaw: float, frame_id: str = "map"):
    import math
    from nav_msgs.msg import Odometry
    odom = Odometry()
    odom.header.frame_id = frame_id
    messages.ns_to_stamp(stamp_ns, odom.header.stamp)
    odom.pose.pose.position.x, odom.pose.pose.position.y = x, y
    odom.pose.pose.orientation.z, odom.pose.pose.orientation.w = math.sin(yaw / 2), math.cos(yaw / 2)
    return odom


def first_path_after_frame_0(h):
    """Frame 0 through the graph (after the odometry settled) -> its path's (x, y) points."""
    h.settle(0.3)
    h.send_frame(0)
    assert wait_until(lambda: len(h.paths) == 1, h.spin)
    return np.array([[p.pose.position.x, p.pose.position.y] for p in h.paths[0].poses])


def test_map_frame_trajectory_is_moved_with_the_matched_pose_and_needs_one(domain):
    """frame_id map: ego waypoints rotated by the pose's yaw and moved to its position (the odometry matched to
    the frame by stamp); no pose for a frame: nothing published, counted as pose_missing."""
    import math
    from nav_msgs.msg import Odometry
    h = Harness({"hybrid_vla_suffix": {"frame_id": "map"}})
    try:
        pub = h.node.create_publisher(Odometry, "/localization/kinematic_state", 10)
        assert wait_until(lambda: pub.get_subscription_count() > 0, h.spin, 10)
        frame = h.frame(0)
        for stamp, x in ((frame.stamp_ns - 1_000_000_000, -50.0), (frame.stamp_ns, 10.0)):
            pub.publish(odometry(stamp, x, 5.0, math.pi / 2))
        got = first_path_after_frame_0(h)
        ego = reference_points(0)
        np.testing.assert_allclose(got, np.stack([10.0 - ego[:, 1], 5.0 + ego[:, 0]], axis=1), atol=1e-4)
        assert h.paths[0].header.frame_id == "map"
        late = h.frame(5)
        h.publish_images(late.images, late.stamp_ns + 5_000_000_000)  # no odometry near this stamp
        assert wait_until(lambda: h.suffix.health.rejected["pose_missing"] == 1, h.spin, 10)
        assert len(h.paths) == 1
    finally:
        h.close()


def test_the_map_frame_pose_is_interpolated_at_the_frame_stamp_and_other_frames_are_refused(domain):
    """Odometry 40 ms before (x = 0) and 10 ms after (x = 10) the frame: the pose at the stamp is x = 8 (the
    first sample inside the 50 ms skew was taken before: 1 m off at 20 m/s). Odometry in another frame than
    frame_id is refused and counted; its frames go out as pose_missing."""
    from nav_msgs.msg import Odometry
    h = Harness({"hybrid_vla_suffix": {"frame_id": "map"}})
    try:
        pub = h.node.create_publisher(Odometry, "/localization/kinematic_state", 10)
        assert wait_until(lambda: pub.get_subscription_count() > 0, h.spin, 10)
        frame, other = h.frame(0), h.frame(1)
        for stamp, x, frame_id in ((frame.stamp_ns - 40_000_000, 0.0, "map"), (frame.stamp_ns + 10_000_000, 10.0, "map"),
                                   (other.stamp_ns, 3.0, "odom")):
            pub.publish(odometry(stamp, x, 0.0, 0.0, frame_id))
        got = first_path_after_frame_0(h)
        ego = reference_points(0)
        np.testing.assert_allclose(got, np.stack([8.0 + ego[:, 0], ego[:, 1]], axis=1), atol=1e-4)
        assert h.suffix.health.rejected["odometry_frame_mismatch"] == 1
        h.publish_images(other.images, other.stamp_ns)
        assert wait_until(lambda: h.suffix.health.rejected["pose_missing"] == 1, h.spin, 10)
        assert len(h.paths) == 1
    finally:
        h.close()


def test_kinematic_state_is_matched_to_frames_by_stamp(domain):
    from nav_msgs.msg import Odometry
    h = Harness({"hybrid_vla_prefix": {"use_kinematic_state": True}})
    try:
        pub = h.node.create_publisher(Odometry, "/localization/kinematic_state", 10)
        assert wait_until(lambda: pub.get_subscription_count() > 0, h.spin, 10)
        for seq in range(3):
            frame = h.frame(seq)
            for stamp, speed in ((frame.stamp_ns - 50_000_000, 1.0), (frame.stamp_ns, 5.0 + seq),
                                 (frame.stamp_ns + 80_000_000, 99.0)):  # before, matching, after the frame
                odom = Odometry()
                messages.ns_to_stamp(stamp, odom.header.stamp)
                odom.twist.twist.linear.x = speed
                pub.publish(odom)
            h.settle(0.2)
            h.send_frame(seq)
        wait_until(lambda: len(h.paths) == 3, h.spin)
        model = load_vla(preset="tiny")
        from hybrid_vla_ros.model.inputs import synthetic_frame
        for seq in range(3):
            frame = synthetic_frame(model.spec, seq, stamp_ns=(seq + 1) * 100_000_000)
            frame.ego = EgoState(speed_mps=5.0 + seq)
            expected = reference_forward(model, frame)[1].points[:, :2]
            xy = np.array([[p.pose.position.x, p.pose.position.y] for p in h.paths[seq].poses])
            np.testing.assert_allclose(xy, expected, atol=1e-5)
        assert h.prefix.health.rejected["kinematic_state_late"] == 0
    finally:
        h.close()


def wait_for_graph(timeout_s: float) -> list[str]:
    """Names of the graph's nodes once all three are discoverable (or what was seen by the timeout)."""
    import rclpy
    from rclpy.node import Node
    from rclpy.parameter import Parameter
    from hybrid_vla_ros.ros.launch_support.session import executor_with
    wanted = {"hybrid_vla_prefix", "hybrid_vla_suffix", "hybrid_vla_scheduler"}
    context = rclpy.Context()
    rclpy.init(context=context)
    try:
        # No endpoints of its own (node names come with the participants' discovery): a default node's 7 services
        # and rosout writer are ~16 DDS endpoints for destroy_node to delete while the just-started graph's are still
        # being matched, the suspect of a segfault (and the 2026-11-30 hang) in this teardown under load.
        node = Node("bringup_probe", context=context, start_parameter_services=False, enable_rosout=False,
                    parameter_overrides=[Parameter("start_type_description_service", value=False)])
        with executor_with([node], context) as executor:
            wait_until(lambda: wanted <= set(node.get_node_names()), lambda t: executor.spin_once(timeout_sec=t),
                       timeout_s)
            return sorted(set(node.get_node_names()) & wanted)
    finally:
        rclpy.shutdown(context=context)


def shm_segments() -> set:
    from hybrid_vla_ros.engine.handover.shm_ring import SEGMENT_PREFIX, SHM_DIR
    return {p.name for p in SHM_DIR.glob(f"{SEGMENT_PREFIX}*")} if SHM_DIR.is_dir() else set()


def orphaned(segments: set) -> set:
    """Segments no live owner holds (left behind), not those of processes still running elsewhere on this
    machine (another test run shares /dev/shm)."""
    from hybrid_vla_ros.engine.handover.shm_ring import SHM_DIR, _owner_alive
    return {name for name in segments if not _owner_alive(SHM_DIR / name)}


# When the signal comes: during imports, while models and nodes are being built, or with the graph up.
STOP_POINTS = [("SIGINT", 0.3), ("SIGINT", 1.5), ("SIGINT", 3.0), ("SIGINT", "up"), ("SIGTERM", "up")]


@pytest.mark.parametrize("processes", [False, True], ids=["one_process", "processes"])
@pytest.mark.parametrize("signame, when", STOP_POINTS, ids=[f"{s}-{w}" for s, w in STOP_POINTS])
def test_a_signal_at_any_point_of_start_up_or_running_stops_every_process_with_exit_0(
        domain, tmp_path, processes, signame, when):
    """Ctrl-C reaches the whole process group, as in a terminal; SIGTERM is what a supervisor sends."""
    import signal
    from hybrid_vla_ros.ros.launch_support.bringup import graph_params, write_combined_config
    config = write_combined_config(graph_params(overrides=TINY_OVERRIDES), tmp_path / "graph.yaml")
    before = shm_segments()
    cmd = [sys.executable, "-m", "hybrid_vla_ros.cli", "graph", "--config", str(config)] + (["--processes"] * processes)
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, start_new_session=True)
    if when == "up":
        seen = wait_for_graph(90)
        assert len(seen) == 3, seen
    else:
        time.sleep(when)
    os.killpg(proc.pid, getattr(signal, signame))
    out, _ = proc.communicate(timeout=60)
    assert proc.returncode == 0, out[-3000:]
    assert "Traceback" not in out, out[-3000:]
    leftover = subprocess.run(["pgrep", "-f", f"--config {config}"], capture_output=True, text=True).stdout
    assert leftover.strip() == "", leftover
    assert orphaned(shm_segments() - before) == set()


def test_run_graph_is_an_alias_of_graph_and_refuses_engine_options(tmp_path):
    out = subprocess.run([sys.executable, "-m", "hybrid_vla_ros.cli", "run", "--graph", "--frames", "3"],
                         capture_output=True, text=True, timeout=60)
    assert out.returncode == 2 and "--frames do(es) not apply to the ROS graph" in out.stderr, out.stderr
    out = subprocess.run([sys.executable, "-m", "hybrid_vla_ros.cli", "run", "--processes"],
                         capture_output=True, text=True, timeout=60)
    assert out.returncode == 2 and "--processes applies to the ROS graph only" in out.stderr, out.stderr


def test_recorded_trajectory_bag_reads_back_in_mcap_and_sqlite3(domain, tmp_path):
    from hybrid_vla_ros.ros.bags.storage import read_bag
    from hybrid_vla_ros.ros.launch_support.bringup import graph_params
    from hybrid_vla_ros.ros.topics import TRAJECTORY_TOPIC
    from hybrid_vla_ros.ros.demo import drive_graph, write_sample_drive
    overrides = {k: dict(v) for k, v in TINY_OVERRIDES.items()}
    overrides["hybrid_vla_prefix"].update(image_transport="compressed", camera_topics=[f"{c}/compressed" for c in CAMERAS])
    for storage in ("mcap", "sqlite3"):
        bag = write_sample_drive(tmp_path / f"drive_{storage}", "tiny", [f"{c}/compressed" for c in CAMERAS],
                                 frames=4, storage=storage)
        summary, _ = drive_graph(bag, graph_params(overrides=overrides), record_to=tmp_path / f"out_{storage}",
                                 storage=storage)
        messages, types = read_bag(tmp_path / f"out_{storage}")
        assert types[TRAJECTORY_TOPIC] == "nav_msgs/msg/Path"
        assert sum(1 for m in messages if m[1] == TRAJECTORY_TOPIC) == summary["trajectories"] == 4
        from nav_msgs.msg import Path
        from rclpy.serialization import deserialize_message
        path = deserialize_message(next(m[3] for m in messages if m[1] == TRAJECTORY_TOPIC), Path)
        assert len(path.poses) == 8


def test_bf16_suffix_pinned_to_a_numa_node_serves_close_to_fp32(domain):
    from hybrid_vla_ros.engine.cpu import numa_nodes
    node = min(numa_nodes())
    h = Harness({"hybrid_vla_suffix": {"dtype": "bf16", "numa_node": node}})
    try:
        h.send_frame(0)
        assert wait_until(lambda: len(h.paths) == 1, h.spin)
        assert h.suffix.cores == numa_nodes()[node]
        assert h.suffix.memory_binding == "bound"
        assert all(b.self_attn.q_proj.weight.dtype == torch.bfloat16 for b in h.suffix.stage.blocks.values())
        xy = np.array([[p.pose.position.x, p.pose.position.y] for p in h.paths[0].poses])
        diff = np.abs(xy - reference_points(0)[:, :2]).max()
        assert 0 < diff < 0.1  # bf16 changes the numbers a little, not the plan
    finally:
        h.close()


def test_int8_suffix_node_serves_close_to_fp32_over_dds(domain):
    """dtype int8 (issue 40): the suffix node's blocks are int8 copies (engine/int8.py), the in-process prefix's
    model untouched; the trajectory reaches the subscriber close to fp32's, and diagnostics say int8."""
    from hybrid_vla_ros.engine.int8 import Int8Linear
    h = Harness({"hybrid_vla_suffix": {"dtype": "int8"}})
    try:
        h.send_frame(0)
        assert wait_until(lambda: len(h.paths) == 1, h.spin)
        assert all(isinstance(b.mlp.down_proj, Int8Linear) for b in h.suffix.stage.blocks.values())
        assert not any(isinstance(m, Int8Linear) for m in h.prefix.model.modules())
        xy = np.array([[p.pose.position.x, p.pose.position.y] for p in h.paths[0].poses])
        diff = np.abs(xy - reference_points(0)[:, :2]).max()
        assert np.isfinite(xy).all() and 0 < diff < 0.1   # measured 0.004-0.015 over frames 0..3
        checks = {name: values for name, _level, _text, values in h.suffix._extra_checks()}
        assert checks["dtype"]["dtype"] == "int8"
    finally:
        h.close()


def test_the_events_executor_serves_the_graph_in_one_process_when_asked(domain, monkeypatch):
    """HYBRID_VLA_EXECUTOR=events (opt-in; ros/launch_support/session.py): the in-process graph on rclpy's
    EventsExecutor where this rclpy has one (Kilted), a SingleThreadedExecutor elsewhere; the plan is the
    unsplit model's either way. Made while pytest captures stderr (no file descriptor), which the
    EventsExecutor's faulthandler needs."""
    from hybrid_vla_ros.ros.launch_support.session import EXECUTOR_ENV
    monkeypatch.setenv(EXECUTOR_ENV, "events")
    try:
        from rclpy.experimental import EventsExecutor  # noqa: F401
        expected = "EventsExecutor"
    except ImportError:
        expected = "SingleThreadedExecutor"
    h = Harness()
    try:
        assert expected in type(h.graph.executor).__name__
        h.send_frame(0)
        assert wait_until(lambda: len(h.paths) == 1, h.spin)
        xy = np.array([[p.pose.position.x, p.pose.position.y] for p in h.paths[0].poses])
        assert np.abs(xy - reference_points(0)[:, :2]).max() < 1e-5
    finally:
        h.close()


def test_suffix_dtype_auto_runs_what_its_probe_chose_and_reports_why(domain):
    h = Harness({"hybrid_vla_suffix": {"dtype": "auto"}})
    try:
        h.send_frame(0)
        choice = h.suffix.dtype_choice
        assert choice.dtype in ("fp32", "bf16") and "->" in choice.reason or "no native bf16" in choice.reason
        wanted = torch.bfloat16 if choice.dtype == "bf16" else torch.float32
        assert all(b.self_attn.q_proj.weight.dtype == wanted for b in h.suffix.stage.blocks.values())
        checks = {name: values for name, _level, _text, values in h.suffix._extra_checks()}
        assert checks["dtype"] == {"dtype": choice.dtype, "dtype_reason": choice.reason}
    finally:
        h.close()


def test_graph_serves_an_hf_checkpoint_directory_exactly(domain, tmp_path):
    """model.checkpoint: each stage node reads its side of the directory; the output equals the preset's."""
    from hybrid_vla_ros.model.checkpoint import save_checkpoint
    save_checkpoint(load_vla(preset="tiny"), tmp_path / "ckpt", max_shard_size="60KB")
    overrides = {node: {"model.checkpoint": str(tmp_path / "ckpt")}
                 for node in ("hybrid_vla_prefix", "hybrid_vla_suffix", "hybrid_vla_scheduler")}
    h = Harness(overrides)
    try:
        h.send_frame(0)
        assert wait_until(lambda: len(h.paths) == 1, h.spin)
        xy = np.array([[p.pose.position.x, p.pose.position.y] for p in h.paths[0].poses])
        assert np.abs(xy - reference_points(0)[:, :2]).max() <= 1e-6
        assert h.suffix.model.checkpoint_files.read_keys  # read from the directory, not built from the preset
    finally:
        h.close()


def test_a_warm_standby_suffix_takes_over_within_a_second_and_publishes_nothing_twice(domain):
    """Two suffixes (the standby in the same executor here; `--processes` gives it a process of its own),
    inline handover so both see every state. The standby stays idle while the active one beats; when that one
    goes silent (its node leaves the executor: no beats, no callbacks) the standby takes over and serves the
    frames that follow; no stamp is published twice."""
    from hybrid_vla_ros.ros.launch_support.bringup import graph_params, make_node
    from hybrid_vla_ros.ros.nodes.lifecycle import bring_up
    from hybrid_vla_ros.ros.topics import STANDBY_NODE
    overrides = {"hybrid_vla_prefix": {"boundary_transport": "inline"}, "hybrid_vla_suffix": {"warm_standby": True}}
    h = Harness(overrides)
    try:
        merged = {k: {**v, **overrides.get(k, {})} for k, v in TINY_OVERRIDES.items()}
        standby = make_node("hybrid_vla_suffix", graph_params(overrides=merged)["hybrid_vla_suffix"], h.context,
                            name=STANDBY_NODE)
        h.graph.executor.add_node(standby)
        bring_up(standby)
        primary = h.suffix
        assert wait_until(lambda: primary.serving.role.active, h.spin, 10)   # another suffix is up: it waits for beats first
        for seq in range(3):
            h.send_frame(seq)
        assert primary.serving.role.active and not standby.serving.role.active and standby.serving.role.buffer
        h.graph.executor.remove_node(primary)            # silent from now on, as if SIGKILLed
        t_dead = time.monotonic()
        h.send_frame(3)
        assert time.monotonic() - t_dead < 1.0
        assert standby.serving.role.active and standby.serving.role.takeovers == 1
        h.send_frame(4)
        stamps = [int(i["stamp_ns"]) for i in h.infos]
        assert len(stamps) == len(set(stamps)) == 5
        assert standby.health.rejected.get("out_of_order", 0) <= 3   # buffered frames the primary had published
    finally:
        h.graph.executor.remove_node(standby)
        standby.destroy_node()
        h.graph.executor.add_node(primary)
        h.close()
