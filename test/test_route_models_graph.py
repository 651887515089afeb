"""The published shapes that need a route, served live with what the waypoint models get (issue 51, item 2's
re-timed, scheduler and standby cells): tiny-orion-release (cameras' geometry, streaming memory), tiny-simlingo
(prompt embeddings) and tiny-recogdrive (pose, history, DDIM), each behind the real prefix and suffix nodes and a
warm standby suffix, over loopback DDS, driven on the intersection map's approach lane with the route latched
(route_harness.py). In one drive: three frames at p = 2; the cut sent on the scheduler's topic moves to 3 between
frames; a frame at 3; the active suffix goes silent (leaves the executor, as if SIGKILLed) and the standby serves the
last two. Every frame is published once, as CandidateTrajectories in map stamped at publish time, starting at the
ego of an odometry sample sent between the frame and then, its positions the unsplit model's plan for that frame at equal absolute times; the
scheduler gets one sample per frame with the cut it ran at."""

import numpy as np
import pytest

from route_harness import RouteDrive, lane_pose, plan_at_times
from ros_harness import wait_until
from test_autoware_msgs import need_real_messages

pytest.importorskip("autoware_planning_msgs.msg", reason="the real Autoware messages (scripts/setup.sh builds them)")
pytestmark = pytest.mark.slow

PRESETS = ["tiny-orion-release", "tiny-simlingo", "tiny-recogdrive"]
DT_S = 0.1
OVERRIDES = {
    "hybrid_vla_prefix": {"boundary_transport": "inline"},     # both suffixes see every state
    "hybrid_vla_suffix": {"output_type": "auto", "frame_id": "map", "output_retime": True, "output_dt_s": DT_S,
                          "warm_standby": True},
    # the scheduler's zone is its initial cut alone: it samples, it never moves the cut itself here
    "hybrid_vla_scheduler": {"initial_partition": 2, "dynamic_zone_min": -1, "dynamic_zone_max": -1,
                             "update_period_s": 0.05},
}


def standby_suffix(drive, made: list) -> list:
    """A second suffix under the standby's name, in the same executor (`--processes` gives it its own); appended
    to `made` as soon as it exists, so that the test's cleanup finds it whatever fails after."""
    from hybrid_vla_ros.ros.launch_support.bringup import graph_params, make_node
    from hybrid_vla_ros.ros.nodes.lifecycle import bring_up
    from hybrid_vla_ros.ros.topics import STANDBY_NODE
    made.append(make_node("hybrid_vla_suffix", graph_params(overrides=drive.h.params)["hybrid_vla_suffix"],
                          drive.h.context, name=STANDBY_NODE))
    drive.h.graph.executor.add_node(made[-1])
    bring_up(made[-1])
    return made


def move_cut(drive, partition: int) -> None:
    """The cut on the scheduler's topic, taken by the prefix before its next frame."""
    from std_msgs.msg import Int32
    from hybrid_vla_ros.ros.topics import PARTITION_QOS, PARTITION_TOPIC
    pub = drive.h.node.create_publisher(Int32, PARTITION_TOPIC, PARTITION_QOS)
    assert wait_until(lambda: pub.get_subscription_count() >= 1, drive.live.spin, 10)
    pub.publish(Int32(data=partition))
    assert wait_until(lambda: drive.h.prefix.stage.partition == partition, drive.live.spin, 10)


def check_candidates(drive, candidate_sets) -> None:
    """Each frame's one candidate: in map, stamped at publish time, t = 0 at the ego of an odometry sample sent
    between the frame and then, every DT_S after it the frame's reference plan at the same absolute time."""
    refs = drive.references()
    frame_of = {int(i["output_stamp_ns"]): int(i["stamp_ns"]) for i in drive.h.infos}
    assert sorted(frame_of.values()) == drive.stamps == sorted(refs)
    assert len(candidate_sets) == len(drive.stamps)
    for candidate_set in candidate_sets:
        (candidate,) = candidate_set.candidate_trajectories
        published_ns = candidate.header.stamp.sec * 10**9 + candidate.header.stamp.nanosec
        frame_ns = frame_of[published_ns]
        assert candidate.header.frame_id == "map" and published_ns > frame_ns
        got = np.array([[p.pose.position.x, p.pose.position.y, p.time_from_start.sec + p.time_from_start.nanosec
                         * 1e-9] for p in candidate.points])                      # (M, 3) x, y, t
        assert np.isfinite(got).all() and np.allclose(got[:, 2], DT_S * np.arange(len(got)))
        ego_ns = [s for s in drive.live.sent if frame_ns <= s <= published_ns and
                  abs(lane_pose(s, drive.live.origin_ns)[0] - got[0, 0]) < 1e-6]
        assert len(ego_ns) == 1 and abs(got[0, 1] - lane_pose(ego_ns[0], drive.live.origin_ns)[1]) < 1e-9
        plan_s = (published_ns - frame_ns) / 1e9 + got[1:, 2]                     # plan times, from the frame
        expected = plan_at_times(refs[frame_ns], lane_pose(frame_ns, drive.live.origin_ns), plan_s)
        np.testing.assert_allclose(got[1:, :2], expected, atol=1e-4, err_msg=f"frame {frame_ns}")


@pytest.mark.parametrize("preset", PRESETS)
def test_a_route_model_is_re_timed_moves_its_cut_and_fails_over_to_its_standby(preset, domain, tmp_path):
    need_real_messages()
    from autoware_internal_planning_msgs.msg import CandidateTrajectories
    from hybrid_vla_ros.ros.topics import CANDIDATES_TOPIC
    drive = RouteDrive(preset, tmp_path, OVERRIDES, activate_scheduler=True)   # closes its Harness if it fails
    h, made = drive.h, []   # made: the standby node, once it exists
    primary = h.suffix
    try:
        candidate_sets = []
        h.node.create_subscription(CandidateTrajectories, CANDIDATES_TOPIC, candidate_sets.append, 20)
        standby = standby_suffix(drive, made)[-1]
        drive.start()
        assert wait_until(lambda: primary.serving.role.active, drive.live.spin, 10)
        for seq in range(3):
            drive.send(seq)
        move_cut(drive, 3)
        drive.send(3)
        assert primary.serving.role.active and not standby.serving.role.active and standby.serving.role.buffer
        h.graph.executor.remove_node(primary)            # silent from now on (its entities stay: not a SIGKILL)
        for seq in (4, 5):
            drive.send(seq)
        assert standby.serving.role.active and standby.serving.role.takeovers == 1
        assert wait_until(lambda: len(candidate_sets) == 6, drive.live.spin, 10), len(candidate_sets)
        assert [int(i["partition"]) for i in h.infos] == [2, 2, 2, 3, 3, 3]
        assert [int(i["stamp_ns"]) for i in h.infos] == drive.stamps      # each once, in order
        scheduler = h.graph.nodes["hybrid_vla_scheduler"]
        assert wait_until(lambda: len(scheduler.fed) == 6, drive.live.spin, 10), scheduler.fed
        assert [s.partition for s in scheduler.fed] == [2, 2, 2, 3, 3, 3]
        assert not any(primary.health.rejected.values()) and not any(h.prefix.health.rejected.values())
        assert [f.context.missing(h.spec.context) for f in drive.served] == [[]] * 6   # all it declares, known
        check_candidates(drive, candidate_sets)
    finally:
        for node in made:
            h.graph.executor.remove_node(node)
            node.destroy_node()
        if primary not in h.graph.executor.get_nodes():
            h.graph.executor.add_node(primary)
        drive.close()
