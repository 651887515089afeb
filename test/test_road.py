"""The synthetic road (sim/road.py): deterministic from a seed, and its ground truth agrees with what it draws."""

import numpy as np
import pytest

from hybrid_vla_ros.sim.road import ACCEL_LIMITS_MPS2, MAX_SPEED_MPS, RoadScene, constant_velocity, drive, ground_truth, render

STRAIGHT = RoadScene(0.0, 0.0, 0.0, 3.5, 10.0, None, 0.0, 1.0, 1e4, 0.0)


def lane_centre_column(image: np.ndarray, row: int) -> float:
    """Mean column of the two lane lines' pixels (near white) on one image row."""
    white = np.where((image[row] > 200).all(axis=-1))[0]
    assert white.size >= 2, f"no lane lines on row {row}"
    return float((white.min() + white.max()) / 2)


@pytest.mark.parametrize("curvature", [-0.015, -0.006, 0.006, 0.015])
def test_the_drawn_lane_bends_the_way_the_ground_truth_turns(curvature):
    scene = RoadScene(curvature, 0.0, 0.0, 3.5, 10.0, None, 0.0, 1.0, 1e4, 0.0)
    image = render(scene, 112, 112)
    near, far = lane_centre_column(image, 100), lane_centre_column(image, 62)
    truth = ground_truth(scene, 8, 0.5)
    # left is +y in the ego frame and smaller columns in the image
    assert np.sign(near - far) == np.sign(truth[-1, 1]) == np.sign(curvature)
    assert truth[-1, 2] * curvature > 0  # the heading turns into the curve


def test_a_straight_road_goes_straight_and_the_lane_is_centred():
    image = render(STRAIGHT, 112, 112)
    assert abs(lane_centre_column(image, 100) - 56) <= 1.0
    truth = ground_truth(STRAIGHT, 8, 0.5)
    assert np.abs(truth[:, 1]).max() < 1e-6
    # free road: speeds up to the limit at the comfortable acceleration, ahead of the constant-velocity guess
    assert truth[-1, 3] == pytest.approx(min(MAX_SPEED_MPS, 10.0 + ACCEL_LIMITS_MPS2[1] * 4.0), abs=0.1)
    assert (truth[:, 0] >= constant_velocity(STRAIGHT, 8, 0.5)[:, 0]).all()


def test_a_close_lead_vehicle_slows_the_ego_and_is_drawn_in_the_lane():
    lead = RoadScene(0.0, 0.0, 0.0, 3.5, 12.0, 15.0, 3.0, 1.0, 1e4, 0.0)
    truth_free, truth_lead = ground_truth(STRAIGHT, 8, 0.5), ground_truth(lead, 8, 0.5)
    assert truth_lead[-1, 3] < truth_free[-1, 3] and truth_lead[-1, 0] < truth_free[-1, 0]
    image, empty = render(lead, 112, 112), render(RoadScene(0.0, 0.0, 0.0, 3.5, 12.0, None, 3.0, 1.0, 1e4, 0.0), 112, 112)
    changed = np.argwhere(np.abs(image.astype(int) - empty.astype(int)).sum(axis=-1) > 30)
    assert changed.size and abs(changed[:, 1].mean() - 56) < 3  # centred on the lane ahead


def test_a_drive_is_deterministic_from_its_seed_and_differs_across_seeds():
    a = list(drive(5, 6, 2, 56, 56, 4, 0.5))
    b = list(drive(5, 6, 2, 56, 56, 4, 0.5))
    c = list(drive(6, 6, 2, 56, 56, 4, 0.5))
    assert all(np.array_equal(x.images[1], y.images[1]) and np.array_equal(x.truth, y.truth) for x, y in zip(a, b))
    assert not np.array_equal(a[0].images[0], c[0].images[0])
    assert [f.images[0].shape for f in a] == [(56, 56, 3)] * 6 and a[0].truth.shape == (4, 4)
    speeds = [f.scene.speed_mps for f in a]
    assert max(abs(s1 - s0) for s0, s1 in zip(speeds, speeds[1:])) < 0.5  # smooth from frame to frame


def test_a_road_drive_is_a_bag_the_graph_takes_with_its_ground_truth(tmp_path):
    from nav_msgs.msg import Path
    from rclpy.serialization import deserialize_message
    from hybrid_vla_ros.ros.bags.storage import read_bag
    from hybrid_vla_ros.ros.bags.drives import GROUND_TRUTH_TOPIC, write_road_drive
    from hybrid_vla_ros.ros.bags.replay import bag_frames
    topics = ["/cam0/image/compressed", "/cam1/image/compressed"]
    bag = write_road_drive(tmp_path / "road", "tiny", topics, frames=5, seed=3)
    frames = list(bag_frames(bag, skew_ns=20_000_000, camera_topics=topics))
    assert len(frames) == 5 and all(f.complete for f in frames)
    messages, types = read_bag(bag)
    assert types[GROUND_TRUTH_TOPIC] == "nav_msgs/msg/Path"
    truths = [deserialize_message(m.raw, Path) for m in messages if m.topic == GROUND_TRUTH_TOPIC]
    first = list(drive(3, 1, 2, 56, 56, 8, 0.5))[0]
    assert len(truths) == 5 and len(truths[0].poses) == 8 and truths[0].header.frame_id == "base_link"
    assert [p.pose.position.y for p in truths[0].poses] == pytest.approx(first.truth[:, 1])


@pytest.mark.slow
def test_the_graph_serves_a_road_drive_as_it_is(domain, tmp_path):
    from ros_harness import TINY_OVERRIDES
    from hybrid_vla_ros.ros.launch_support.bringup import graph_params
    from hybrid_vla_ros.ros.demo import drive_graph
    from hybrid_vla_ros.ros.bags.drives import write_road_drive
    topics = ["/cam0/image/compressed", "/cam1/image/compressed"]
    bag = write_road_drive(tmp_path / "road", "tiny", topics, frames=5, seed=4)
    overrides = {k: dict(v) for k, v in TINY_OVERRIDES.items()}
    overrides["hybrid_vla_prefix"].update(image_transport="compressed", camera_topics=topics, use_kinematic_state=True)
    summary, trajectories = drive_graph(bag, graph_params(overrides=overrides), settle_s=20)
    assert summary["frames_published"] == summary["trajectories"] == len(trajectories) == 5, summary
