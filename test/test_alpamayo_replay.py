"""Issue 51, item 2 (record / replay for the Alpamayo releases): a drive recorded as a car records it (4 camera topics,
odometry; ros/bags/drives.py) replayed into the graph with a tiny released-layout release, in one process and in
separate processes, the trajectories recorded back (`hybrid-vla record`'s recorder, ros/bags/driver.py), and `hybrid-vla demo --config` on it. Every
frame's trajectory equals run_reference on the frames the prefix builds. The replay's readiness probe sends the
bag's first frame (older stamps) first: its images are the first frame's, so each camera's history is the same as
without it (the oldest frame repeated until 4 came)."""

import pytest

from ros_harness import recorded_back_and_demo
from test_alpamayo_graph import CAMERAS, camera_sets, expected, graph_params
from test_alpamayo_graph import releases  # noqa: F401 (the fixture)
from hybrid_vla_ros.model.plugins import alpamayo

FRAMES = 5


@pytest.mark.slow
@pytest.mark.parametrize("release", ["r1", "1.5"])
def test_a_recorded_alpamayo_drive_replays_exactly_in_one_process_and_in_processes_and_records_back(
        release, releases, domain, tmp_path):  # noqa: F811
    """And `hybrid-vla demo --config` runs the same drive through the graph that file describes."""
    import numpy as np
    from hybrid_vla_ros.ros.bags.drives import DriveStep, write_drive
    from hybrid_vla_ros.ros.demo import drive_graph
    from hybrid_vla_ros.ros.launch_support.bringup import write_combined_config
    sets = camera_sets(FRAMES)
    bag = write_drive(tmp_path / "drive", CAMERAS, (DriveStep(s, 5.0, 0.0, None) for s in sets), compressed=False,
                      context=False)
    params = graph_params(releases[release], False)
    params["hybrid_vla_prefix"]["use_kinematic_state"] = False   # standing still: the bag has no 1.6 s of odometry before its first frame
    config = write_combined_config(params, tmp_path / "graph.yaml")
    one, traj_one = drive_graph(bag, params, record_to=tmp_path / "recorded", settle_s=30)
    many, traj_many = drive_graph(bag, params, processes=True, config=str(config), settle_s=60)
    assert one["trajectories"] == many["trajectories"] == FRAMES, (one, many)
    assert one["transports"] == many["transports"] == ["alpamayo"]
    stamps = sorted(traj_one)
    assert stamps == sorted(traj_many) and len(stamps) == FRAMES
    refs = expected(alpamayo.load_release(releases[release]), sets, False, kinematic=False, stamps=stamps)
    for stamp, ref in zip(stamps, refs):
        want = ref.xyz[:, :2].double().numpy()
        assert np.array_equal(traj_one[stamp], want) and np.array_equal(traj_many[stamp], want), stamp
    summary = recorded_back_and_demo(one, stamps, bag, config, tmp_path)   # recorded back, read back; demo --config
    assert summary["transports"] == ["alpamayo"]
