"""Pictures of a drive (sim/view.py, ros/drives.read_drive_view): the projection draws the ground-truth path
where the renderer drew the lane, dead reckoning follows the odometry, and a drive bag reads back whole."""

import math

import numpy as np
import pytest

from hybrid_vla_ros.sim.road import RoadScene, ground_truth, project_to_image, render
from hybrid_vla_ros.sim.view import ViewFrame, constant_velocity, dead_reckoning, displacement_errors, plot_drive


@pytest.mark.parametrize("curvature", [-0.015, 0.0, 0.012])
def test_the_projected_lane_centre_lies_midway_between_the_drawn_lane_lines(curvature):
    scene = RoadScene(curvature, 0.2, 0.0, 3.5, 10.0, None, 0.0, 1.0, 1e4, 0.0)
    image = render(scene, 112, 112)
    x = np.array([6.0, 10.0, 16.0])
    uv = project_to_image(np.column_stack([x, scene.centre_y(x)]), 112, 112)
    for u, v in uv:
        white = np.where((image[int(v)] > 200).all(axis=-1))[0]
        assert white.size >= 2
        assert abs((white.min() + white.max()) / 2 - u) < 2.0, (curvature, u, v, white)
    assert np.isnan(project_to_image(np.array([[0.2, 0.0]]), 112, 112)).all()  # behind the camera: not drawn


def test_dead_reckoning_drives_a_circle_of_the_right_radius():
    speed, yaw_rate, n = 10.0, 0.1, 63   # radius 100 m; 6.2 s at 10 Hz: about one radian
    frames = [ViewFrame(int(i * 1e8), None, speed, yaw_rate, None, None) for i in range(n)]
    poses = dead_reckoning(frames)
    centre = np.array([0.0, 100.0])
    radii = np.linalg.norm(poses[:, :2] - centre, axis=1)
    assert np.allclose(radii, 100.0, atol=0.6)
    assert poses[-1, 2] == pytest.approx(yaw_rate * (n - 1) * 0.1)


def test_errors_and_the_constant_velocity_baseline():
    scene = RoadScene(0.01, 0.0, 0.0, 3.5, 10.0, None, 0.0, 1.0, 1e4, 0.0)
    truth = ground_truth(scene, 8, 0.5)
    t = np.arange(1, 9) * 0.5
    frame = ViewFrame(0, None, 10.0, 0.1, truth[:, :2], truth[:, :2] + [0.0, 1.0], t)
    assert displacement_errors([frame]) == {"frames": 1, "ade_m": pytest.approx(1.0), "fde_m": pytest.approx(1.0)}
    straight = constant_velocity(frame).predicted_xy
    assert np.allclose(straight[:, 0], 10.0 * t) and not straight[:, 1].any()
    assert displacement_errors([ViewFrame(0, None, 1.0, 0.0, None, None)])["frames"] == 0


def test_a_road_drive_bag_reads_back_and_draws(tmp_path):
    from hybrid_vla_ros.ros.bags.drives import read_drive_view, road_steps, write_road_drive
    topics = ["/cam0/image/compressed"]
    bag = write_road_drive(tmp_path / "road", "drive", topics, frames=6, seed=5)
    steps = list(road_steps("drive", 6, 5))
    predictions = {1_700_000_000_000_000_000 + 100_000_000: np.zeros((8, 2))}
    frames = read_drive_view(bag, predictions=predictions)
    assert len(frames) == 6 and all(f.image is not None and f.image.shape == (112, 112, 3) for f in frames)
    assert np.allclose(frames[2].truth_xy, steps[2].truth[:, :2], atol=1e-6)
    assert np.allclose(frames[2].truth_t_s, steps[2].truth[:, 4], atol=1e-6)
    assert frames[2].speed_mps == pytest.approx(steps[2].speed_mps)
    assert frames[1].predicted_xy is not None and frames[0].predicted_xy is None
    plot_drive(frames, tmp_path / "drive.png", "test")
    assert (tmp_path / "drive.png").stat().st_size > 10_000


def test_a_drive_without_ground_truth_gets_the_birds_eye_view_only(tmp_path):
    """A recorded drive (no ground truth): its camera is not the sim's, so no paths are drawn over it."""
    from hybrid_vla_ros.ros.demo import write_sample_drive
    from hybrid_vla_ros.ros.bags.drives import read_drive_view
    bag = write_sample_drive(tmp_path / "drive", "tiny", ["/cam0/image/compressed", "/cam1/image/compressed"], frames=4)
    frames = read_drive_view(bag)
    assert len(frames) == 4 and all(f.image is None and f.truth_xy is None for f in frames)
    plot_drive(frames, tmp_path / "drive.png", "no ground truth")
    assert (tmp_path / "drive.png").stat().st_size > 5_000
