"""The main job on its defaults: the shipped trained model (data/models/drive) drives the shipped held-out
road drive (data/road_drive) through the ROS graph, and the report shows it."""

import json

import numpy as np
import pytest


def test_the_builtin_checkpoint_resolves_and_unknown_names_are_refused():
    from hybrid_vla_ros.errors import ConfigError
    from hybrid_vla_ros.model.load import builtin_checkpoints, load_vla, resolve_checkpoint
    assert "drive" in builtin_checkpoints()
    model = load_vla(checkpoint="builtin:drive")
    assert model.spec.name == "drive" and model.spec.num_cameras == 1
    assert resolve_checkpoint("/some/dir") == "/some/dir"
    with pytest.raises(ConfigError, match="no such built-in checkpoint.*builtin:drive"):
        load_vla(checkpoint="builtin:nope")


def test_the_demo_drive_is_held_out_from_training():
    from hybrid_vla_ros.learn.train import TRAIN_SEED_BASE
    from hybrid_vla_ros.ros.demo import ROAD_DRIVE, ROAD_DRIVE_FRAMES, ROAD_DRIVE_SEED
    from hybrid_vla_ros.ros.bags.storage import bag_info
    assert ROAD_DRIVE_SEED < TRAIN_SEED_BASE
    info = bag_info(ROAD_DRIVE)
    assert info.types["/ground_truth/trajectory"] == "nav_msgs/msg/Path"
    # per frame: odometry, ground truth, front camera, its camera_info; once: /tf_static (the camera's mount)
    assert info.message_count == 4 * ROAD_DRIVE_FRAMES + 1
    assert info.types["/tf_static"] == "tf2_msgs/msg/TFMessage"


@pytest.mark.slow
def test_the_demo_drives_the_road_with_the_trained_model(domain, tmp_path):
    from hybrid_vla_ros.ros.demo import ROAD_DRIVE_FRAMES, run_demo
    summary = run_demo(tmp_path / "demo")
    assert summary["frames_published"] == summary["trajectories"] == ROAD_DRIVE_FRAMES, summary
    assert summary["model"] == "builtin:drive"
    driving = summary["driving"]
    assert driving["model"]["frames"] == ROAD_DRIVE_FRAMES
    # the trained model through the graph beats the baseline on this held-out drive by the margin eval shows
    assert driving["model"]["ade_m"] < 0.7 * driving["constant_velocity"]["ade_m"], driving
    assert (tmp_path / "demo" / "drive.png").stat().st_size > 20_000
    assert json.loads((tmp_path / "demo" / "summary.json").read_text())["driving"] == driving


def test_the_graph_gives_what_the_engine_gives_on_the_demo_drive(tmp_path):
    """Native (transformers' forward) on the demo drive's frames == the hybrid split the graph runs."""
    from hybrid_vla_ros.engine.placement import Placement
    from hybrid_vla_ros.engine.stages import PrefixStage, SuffixStage, reference_forward
    from hybrid_vla_ros.learn.train import road_samples
    from hybrid_vla_ros.model.load import load_vla
    from hybrid_vla_ros.ros.demo import ROAD_DRIVE_SEED
    model = load_vla(checkpoint="builtin:drive")
    samples = road_samples(model.spec, [ROAD_DRIVE_SEED], frames_per_drive=3)
    prefix, suffix = PrefixStage(model, 2, Placement()), SuffixStage(model, 2, Placement())
    for s in samples:
        native = reference_forward(model, s.frame)[1].points
        # both on this thread, the same modules on the same (1, S, H) rows: the same kernels (test_partition.py, EXACT)
        assert np.array_equal(suffix.run(prefix.run(s.frame)).points, native)


def test_a_second_answer_to_a_frame_is_counted_apart_not_taken_for_a_frame():
    """Two graphs on one DDS domain replaying the same sample drive (its stamps are fixed) both answer each
    frame: the summary counts each frame once, from its first answer, and says how many answers were extra."""
    from types import SimpleNamespace
    from hybrid_vla_ros.ros.demo import summarise
    sent = [(1000 + k, 10.0 + k) for k in range(4)]
    infos = [{"stamp_ns": str(stamp), "received": wall + 0.2, "partition": "2", "transport": "inline"}
             for stamp, wall in sent]
    infos += [{"stamp_ns": str(1000 + k), "received": 10.5 + k, "partition": "3", "transport": "inline"} for k in (0, 2)]
    driver = SimpleNamespace(infos=infos, replayer=SimpleNamespace(published_frames=sent, presumed_lost=0,
                                                                   incomplete_frames=0),
                             rejections={}, graph_drops={}, lost=[], sync_discarded=0)
    summary = summarise(driver, 4, 5.0)
    assert summary["trajectories"] == 4 and summary["dropped"] == 0 and summary["duplicate_infos"] == 2
    assert [p for _, p in summary["partition_over_time"]] == [2, 2, 2, 2]   # the first answers, not the echoes
    assert summary["latency_ms"]["p50"] == pytest.approx(200.0)
