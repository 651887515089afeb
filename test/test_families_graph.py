"""The newer backbone families served by the ROS graph (real rclpy over loopback DDS): a sample drive of each
preset, run through the graph in one process and in separate processes, gives for every frame the trajectory
HF's own unsplit forward (engine/stages.py reference_forward) gives on the very same inputs."""

import numpy as np
import pytest

from hybrid_vla_ros.engine.stages import reference_forward
from hybrid_vla_ros.model.inputs import synthetic_frame
from hybrid_vla_ros.model.load import load_vla
from hybrid_vla_ros.types import EgoState, Frame

from ros_harness import TINY_OVERRIDES

pytestmark = pytest.mark.slow

PRESETS_SERVED = ["tiny-internvl", "tiny-qwen3vl", "tiny-scene"]  # a family's unit-test preset (>= 3 blocks: the graph's zone is [1, 3])
# the cut a preset is served at (default 2): tiny-qwen3vl below its DeepStack depth of 2, so the additions
# still due cross with every boundary state (in process and through the shared-memory ring)
PARTITION = {"tiny-qwen3vl": 1}
FRAMES, SEED = 6, 7


def graph_overrides(preset: str, cameras: list[str]) -> dict:
    overrides = {node: {**values, "model.preset": preset} for node, values in TINY_OVERRIDES.items()}
    p = PARTITION.get(preset, 2)
    for node in ("hybrid_vla_prefix", "hybrid_vla_suffix"):
        overrides[node].update(partition_point=p, dynamic_zone_min=min(p, 1))
    overrides["hybrid_vla_scheduler"].update(initial_partition=p, dynamic_zone_min=min(p, 1))
    # Raw images (the reference sees the very pixels the graph decodes); lossless and no kinematic state: both
    # runs take the same frames with the same (default) ego inputs.
    overrides["hybrid_vla_prefix"].update(camera_topics=cameras, image_transport="raw", input_policy="lossless",
                                          use_kinematic_state=False)
    return overrides


def reference_trajectories(preset: str, instruction: str) -> dict[int, np.ndarray]:
    """stamp -> (N, 2) x, y of HF's unsplit forward on the sample drive's frames, as the prefix node builds them."""
    from hybrid_vla_ros.ros.bags.drives import START_NS
    model = load_vla(preset=preset)
    out = {}
    for seq in range(FRAMES):
        images = synthetic_frame(model.spec, seq, seed=SEED).images
        stamp = START_NS + int(seq * 1e9 / 10.0)  # write_sample_drive's 10 Hz
        frame = Frame(images=images, seq=seq, stamp_ns=stamp, ego=EgoState(), instruction=instruction)
        out[stamp] = reference_forward(model, frame)[1].points[:, :2]
    return out


def assert_matches(got: dict, expected: dict, mode: str) -> None:
    assert sorted(got) == sorted(expected), f"{mode}: frames answered {len(got)} of {len(expected)}"
    for stamp, xy in expected.items():
        np.testing.assert_allclose(got[stamp], xy, atol=1e-5, err_msg=f"{mode}, frame stamped {stamp}")


@pytest.mark.parametrize("preset", PRESETS_SERVED)
def test_the_graph_serves_the_family_exactly_in_one_process_and_in_separate_processes(preset, domain, tmp_path):
    from hybrid_vla_ros.model.presets import get_preset
    from hybrid_vla_ros.ros.demo import drive_graph, write_sample_drive
    from hybrid_vla_ros.ros.launch_support.bringup import graph_params, write_combined_config
    cameras = [f"/test/cam{i}/image" for i in range(get_preset(preset).num_cameras)]
    params = graph_params(overrides=graph_overrides(preset, cameras))
    expected = reference_trajectories(preset, params["hybrid_vla_prefix"]["instruction"])
    bag = write_sample_drive(tmp_path / "drive", preset, cameras, frames=FRAMES, compressed=False, seed=SEED)
    one, traj_one = drive_graph(bag, params, settle_s=20)
    assert one["frames_published"] == one["trajectories"] == FRAMES and one["transports"] == ["inproc"], one
    assert_matches(traj_one, expected, "one process")
    config = write_combined_config(params, tmp_path / "graph.yaml")
    many, traj_many = drive_graph(bag, params, processes=True, config=str(config), settle_s=60)
    assert many["trajectories"] == FRAMES and many["transports"] == ["shm"], many
    assert_matches(traj_many, expected, "separate processes")
