"""An Alpamayo release's trajectories go out through the suffix's one output path (ros/nodes/serving/output.py), as
every other model's do: in the map frame with the suffix's own odometry, re-timed to the present (output_retime),
as CandidateTrajectories over DDS beside the Trajectory; and the scheduler samples its frames (issue 51). The tiny
released-layout Alpamayo 1 (test/published_alpamayo.py) driven live (odometry stamped now every 50 ms, camera frames
stamped at the odometry's time): in one process, and in the diffusion planner's seat started by `hybrid-vla launch`."""

import os
import signal
import subprocess
from types import SimpleNamespace

import numpy as np
import pytest

from test_alpamayo_graph import Driver, camera_sets, expected, graph_params, odometry
from test_alpamayo_graph import releases  # noqa: F401 (the fixture)
from test_autoware_msgs import need_real_messages
from test_launch import Probe, terminal_signals
from test_launch_command import NODES as SEAT_NODES, SEAT, command, needs_launch
from live_odometry import LiveOdometry
from ros_harness import wait_until
from hybrid_vla_ros.model.plugins import alpamayo

HISTORY_NS = 1_600_000_000   # the prefix keeps 16 poses 0.1 s apart


def live_odometry(driver, spin_graph) -> LiveOdometry:
    """The drive's odometry stamped now (a gentle left turn at 5 m/s), 1.6 s of it before each frame."""
    return LiveOdometry(driver, spin_graph, odometry, HISTORY_NS)


def live_params(checkpoint, guidance=False):
    """In map, re-timed; the stages' cut may move in [1, 3]; the scheduler's is held at 2 (its zone), so that
    the scheduler never moves it here."""
    params = graph_params(checkpoint, guidance)
    params["hybrid_vla_suffix"].update({"frame_id": "map", "output_retime": True})
    for node in ("hybrid_vla_prefix", "hybrid_vla_suffix"):
        params[node].update({"dynamic_zone_min": 1, "dynamic_zone_max": 3})
    params["hybrid_vla_scheduler"].update({"autostart": True, "model.checkpoint": str(checkpoint), "policy": "simple",
                                           "initial_partition": 2, "dynamic_zone_min": -1, "dynamic_zone_max": -1})
    return params


def stamp_of(header) -> int:
    return header.stamp.sec * 10**9 + header.stamp.nanosec


def retimed_reference(model, ref, live, frame_ns: int, candidate):
    """The reference plan moved to the frame's pose and re-timed (engine/retime.py) to the candidate's stamp from
    the odometry sample its first point is: the points the suffix should publish."""
    from hybrid_vla_ros.engine.retime import CurrentPose, retime
    from hybrid_vla_ros.ros import messages
    from hybrid_vla_ros.ros.nodes.serving.alpamayo.suffix_stage import trajectory_points
    from hybrid_vla_ros.types import Trajectory
    first = candidate.points[0].pose.position
    ego_ns = next(s for s, m in live.sent.items() if (m.pose.pose.position.x, m.pose.pose.position.y) == (first.x, first.y))
    ego = messages.odometry_to_pose(live.sent[ego_ns])
    points = trajectory_points(ref.xyz.double().numpy(), ref.heading.double().numpy(), model.action_space.dt)
    plan = Trajectory(points, 0, frame_ns, 2)
    frame_pose = messages.odometry_to_pose(odometry(frame_ns, live.origin_ns))
    out = retime(plan.in_map(frame_pose), frame_pose, frame_ns, stamp_of(candidate.header),
                 CurrentPose(ego_ns, ego.x, ego.y, ego.yaw, 0.0, 5.0, 0.0), 0.1)
    return ego_ns, out.points


def drive_live(driver, live, candidates, sets, timeout_s, stamps=None):
    """Each camera set stamped on the odometry's grid, sent once the one before it came out (stamps: those sent
    before, continued). -> the stamps."""
    if stamps is None:
        driver.ready(timeout_s)
        live.linked(timeout_s)
    stamps = list(stamps or [])
    for cameras in sets:
        k = len(stamps)
        stamps.append(live.frame_stamp(stamps[-1] if stamps else 0))
        driver.send(cameras, stamps[-1])
        assert wait_until(lambda: len(candidates) > k and len(driver.paths) > k and len(driver.infos) > k,
                          live.spin, timeout_s), f"no candidates for frame {k}"
    return stamps


def check_retimed(model, sets, stamps, live, candidates, paths, infos, guidance=False) -> None:
    """Each frame's CandidateTrajectories: in map, stamped at publish time (the Trajectory's stamp too), its points
    the reference plan re-timed from the ego's newest pose."""
    refs = expected(model, sets, guidance, stamps=stamps, origin_ns=live.origin_ns)
    for frame_ns, candidate_set, path, info, ref in zip(stamps, candidates, paths, infos, refs):
        (candidate,) = candidate_set.candidate_trajectories
        assert candidate.header.frame_id == path.header.frame_id == "map"
        published_ns = stamp_of(candidate.header)
        assert published_ns == stamp_of(path.header) == int(info["output_stamp_ns"]) > frame_ns   # now, not then
        assert int(info["stamp_ns"]) == frame_ns and float(info["frame_age_ms"]) > 0
        ego_ns, points = retimed_reference(model, ref, live, frame_ns, candidate)
        assert frame_ns <= ego_ns <= published_ns    # t = 0: the ego as the newest odometry had it
        got = np.array([[p.pose.position.x, p.pose.position.y, p.time_from_start.sec + p.time_from_start.nanosec
                         * 1e-9] for p in candidate.points])
        assert got.shape == (len(points), 3) and np.allclose(got, points[:, [0, 1, 4]], rtol=0, atol=1e-6)


def listen(driver, live):
    from autoware_internal_planning_msgs.msg import CandidateTrajectories
    from hybrid_vla_ros.ros.topics import CANDIDATES_TOPIC
    candidates = []
    driver.node.create_subscription(CandidateTrajectories, CANDIDATES_TOPIC, candidates.append, 10)
    driver.spin = live.spin
    return candidates


def move_cut(driver, live, prefix) -> None:
    """The cut on ~/input/partition_point, as the scheduler publishes it: 0 lies outside the zone (refused,
    counted), 3 is taken at the next frame."""
    from std_msgs.msg import Int32
    from hybrid_vla_ros.ros.topics import PARTITION_QOS, PARTITION_TOPIC
    pub = driver.node.create_publisher(Int32, PARTITION_TOPIC, PARTITION_QOS)
    assert wait_until(lambda: pub.get_subscription_count() >= 1, live.spin, 10)
    pub.publish(Int32(data=0))
    assert wait_until(lambda: prefix.health.rejected["partition"] == 1, live.spin, 10)
    pub.publish(Int32(data=3))
    assert wait_until(lambda: prefix.stage.partition == 3, live.spin, 10)


def check_scheduled(scheduler, frame_infos, trajectory_infos, live) -> None:
    """One scheduler sample per frame: the cut, the prefix's compute (the sum of its phases) and the suffix's."""
    assert wait_until(lambda: len(scheduler.fed) == len(trajectory_infos), live.spin, 10), scheduler.fed
    assert [(s.partition, s.prefix_ms, s.suffix_ms) for s in scheduler.fed] == [
        (int(f["partition"]), float(f["prefix_ms"]), float(t["suffix_ms"])) for f, t in zip(frame_infos, trajectory_infos)]
    for f in frame_infos:
        phases = [float(v) for k, v in f.items() if k.startswith("prefix_") and k.endswith("_ms") and k != "prefix_ms"]
        assert len(phases) == 4 and abs(sum(phases) - float(f["prefix_ms"])) < 0.01


@pytest.mark.slow
@pytest.mark.parametrize("release, guidance", [("r1", False), ("1.5", True)])
def test_an_alpamayo_release_publishes_retimed_candidates_and_the_scheduler_samples_it(releases, domain,  # noqa: F811
                                                                                       release, guidance):
    need_real_messages()
    import rclpy
    from diagnostic_msgs.msg import DiagnosticStatus
    from hybrid_vla_ros.ros.launch_support.bringup import InProcessGraph
    from hybrid_vla_ros.ros.topics import PREFIX_INFO_TOPIC
    context = rclpy.Context()
    rclpy.init(context=context)
    graph = InProcessGraph(live_params(releases[release], guidance), context=context)
    driver = Driver(context, graph.executor, graph.spin_once)
    live = live_odometry(driver, graph.spin_once)
    candidates, frame_infos = listen(driver, live), []
    driver.node.create_subscription(DiagnosticStatus, PREFIX_INFO_TOPIC,
                                    lambda m: frame_infos.append({kv.key: kv.value for kv in m.values}), 50)
    try:
        assert not graph.failed, graph.failed
        prefix, suffix = graph.nodes["hybrid_vla_prefix"], graph.nodes["hybrid_vla_suffix"]
        sets = camera_sets(4)
        stamps = drive_live(driver, live, candidates, sets[:3], 60)
        move_cut(driver, live, prefix)
        stamps = drive_live(driver, live, candidates, sets[3:], 60, stamps)
        assert [int(i["partition"]) for i in driver.infos] == [int(i["partition"]) for i in frame_infos] == [2, 2, 2, 3]
        check_retimed(suffix.serving.model, sets, stamps, live, candidates, driver.paths, driver.infos, guidance)
        check_scheduled(graph.nodes["hybrid_vla_scheduler"], frame_infos, driver.infos, live)
        assert dict(prefix.health.rejected) == {"partition": 1} and not suffix.health.rejected
    finally:
        driver.close()
        graph.shutdown()
        rclpy.shutdown(context=context)


def seat_arguments(checkpoint, tmp_path) -> list[str]:
    """The seat's three parameter files: the release for all three nodes (live_params)."""
    from hybrid_vla_ros.ros.launch_support.bringup import write_combined_config
    from hybrid_vla_ros.ros.topics import CANDIDATES_TOPIC, KINEMATIC_TOPIC, TRAJECTORY_TOPIC
    params = live_params(checkpoint)
    config = write_combined_config(params, tmp_path / "alpamayo.param.yaml")
    return [*(f"{node}_param_path:={config}" for node in SEAT_NODES), f"input_odometry:={KINEMATIC_TOPIC}",
            f"output_trajectory:={TRAJECTORY_TOPIC}", f"output_trajectories:={CANDIDATES_TOPIC}"]


@pytest.mark.slow
def test_the_seat_launch_file_with_an_alpamayo_release_publishes_retimed_candidates(releases, domain, tmp_path):  # noqa: F811
    """Issue 51's done-when: `hybrid-vla launch` of the diffusion planner's seat (three processes) with a tiny
    Alpamayo release; re-timed CandidateTrajectories on its output_trajectories over DDS; Ctrl-C stops it."""
    need_real_messages()
    needs_launch()
    import rclpy
    from lifecycle_msgs.srv import GetState
    log = tmp_path / "launch.log"
    with open(log, "w") as sink:   # one torch thread per node, as the reference runs
        proc = subprocess.Popen([*command(), "launch", SEAT, *seat_arguments(releases["r1"], tmp_path)],
                                cwd=tmp_path, stdout=sink, stderr=subprocess.STDOUT, text=True, start_new_session=True,
                                env={**os.environ, "OMP_NUM_THREADS": "1"}, preexec_fn=terminal_signals)
    context = rclpy.Context()
    rclpy.init(context=context)
    driver = Driver(context)
    live = live_odometry(driver, driver.spin)
    candidates = listen(driver, live)
    try:
        asker = SimpleNamespace(node=driver.node, spin=live.spin)   # Probe's way of asking, on this node
        state = lambda node: Probe.call(asker, GetState, f"/{node}/get_state", GetState.Request(), 120)  # noqa: E731
        assert [state(node).current_state.label for node in SEAT_NODES] == ["active"] * len(SEAT_NODES)
        sets = camera_sets(2)
        stamps = drive_live(driver, live, candidates, sets, 120)
        check_retimed(alpamayo.load_release(releases["r1"]), sets, stamps, live, candidates, driver.paths,
                      driver.infos)
    finally:
        driver.close()
        rclpy.shutdown(context=context)
        os.killpg(proc.pid, signal.SIGINT)   # Ctrl-C
        try:
            proc.wait(timeout=60)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
        print(log.read_text()[-6000:])   # shown by pytest when anything above failed
    out = log.read_text()
    assert proc.returncode == 0 and "Traceback" not in out, out[-3000:]
    assert out.count("process has finished cleanly") == len(SEAT_NODES), out[-3000:]
