"""Issue 51, item 3: an Alpamayo release's camera images resized into its pixel budget as its authors' processor does.
The releases' config.json saves min_pixels 163840 and max_pixels 196608, and their code builds Qwen3-VL's processor
with them (NVlabs/alpamayo @ 1cba38c models/base_model.py _build_processor, helper.py MIN_PIXELS / MAX_PIXELS; the
same in alpamayo1.5 @ f42e594). The reference here is transformers' own Qwen2-VL image processor (its PIL backend:
the torchvision one cannot be installed beside this torch), built with the releases' budget and Qwen3-VL's patch
16, merge 2, temporal patch 2, mean = std = 0.5."""

import numpy as np
import pytest
import torch

from hybrid_vla_ros.engine.expert_serve.frame_inputs import (ImageHistory, ImageRows, PromptText, frame_inputs,
                                                            inputs_from_rows, patchify, pixel_budget, still_history)
from hybrid_vla_ros.errors import ConfigError, InputError
from hybrid_vla_ros.model.plugins import alpamayo
from hybrid_vla_ros.model.plugins.alpamayo import tiny
from test_alpamayo_graph import camera_sets
from test_alpamayo_graph import releases  # noqa: F401 (the fixture)

RELEASED = (163840, 196608)


def authors_processor(budget=RELEASED):
    from transformers.models.qwen2_vl.image_processing_pil_qwen2_vl import Qwen2VLImageProcessorPil
    return Qwen2VLImageProcessorPil(min_pixels=budget[0], max_pixels=budget[1], patch_size=16, merge_size=2,
                                    temporal_patch_size=2, image_mean=[0.5] * 3, image_std=[0.5] * 3)


VISION = tiny.backbone_config().vision_config     # patch 16, merge 2, temporal 2: Qwen3-VL's


@pytest.mark.parametrize("height, width, grid", [
    (1080, 1920, [1, 20, 36]),     # a 1080p camera: 2.07 MP -> 320 x 576
    (360, 640, [1, 20, 36]),       # the seat's 640 x 360 cameras (autoware_launch's diffusion planner example)
    (32, 32, [1, 26, 26]),         # too few pixels: up to 416 x 416
    (320, 576, [1, 20, 36]),       # already inside the budget at multiples of 32: as it is
])
def test_an_image_is_resized_into_the_releases_budget_as_the_processor_does(height, width, grid):
    image = np.random.default_rng(height).integers(0, 256, (height, width, 3), dtype=np.uint8)
    rows, ours = patchify(image, VISION, RELEASED)
    theirs = authors_processor()(images=[image], return_tensors="pt")
    assert ours == grid == theirs["image_grid_thw"][0].tolist()
    assert RELEASED[0] <= grid[1] * grid[2] * 256 <= RELEASED[1]
    assert torch.equal(rows, theirs["pixel_values"].float())                       # bit for bit
    if (height, width) == (320, 576):
        assert torch.equal(rows, patchify(image, VISION)[0])                       # not resized


def test_a_release_without_a_budget_takes_images_as_they_are_and_a_half_budget_is_refused():
    model = tiny.build_preset("tiny-alpamayo-r1")           # its config.json names no budget
    assert pixel_budget(model.config) is None
    with pytest.raises(InputError, match="multiple of 32 px"):
        patchify(np.zeros((30, 32, 3), np.uint8), VISION, None)
    for raw, said in (({"min_pixels": 1024}, "max_pixels None"), ({"min_pixels": 4096, "max_pixels": 1024}, "4096")):
        config = alpamayo.parse({**tiny.raw_config("tiny-alpamayo-r1"), **raw}, None, vlm=tiny.backbone_config())
        with pytest.raises(ConfigError, match=f"min_pixels .*{said}"):
            pixel_budget(config)
    with pytest.raises(InputError, match="aspect ratio"):
        patchify(np.zeros((32, 32 * 201, 3), np.uint8), VISION, RELEASED)


def test_a_frame_of_real_size_cameras_becomes_the_releases_token_count():
    config = alpamayo.parse({**tiny.raw_config("tiny-alpamayo-r1"), "min_pixels": RELEASED[0],
                             "max_pixels": RELEASED[1]}, None, vlm=tiny.backbone_config())
    model = alpamayo.build(config)                          # shapes only: frame_inputs reads the config
    rng = np.random.default_rng(0)
    history = ImageHistory()
    images, _ = history.add([rng.integers(0, 256, (1080, 1920, 3), dtype=np.uint8) for _ in range(4)])
    inputs = frame_inputs(model, images, still_history(), alpamayo_text())
    assert inputs.image_grid_thw.tolist() == [[1, 20, 36]] * 16
    assert inputs.pixel_values.shape == (16 * 720, 3 * 2 * 16 * 16)
    assert int((inputs.input_ids == config.vlm.image_token_id).sum()) == 16 * 180    # 720 patches / merge 2 x 2


def alpamayo_text():
    return PromptText()


def test_a_window_makes_rows_only_for_its_new_images_and_they_equal_a_whole_remake():
    """The prefix's ImageRows: each camera image decoded, resized and patchified once while a window reads it."""
    rows, history, made = ImageRows(), ImageHistory(), []
    model = tiny.build_preset("tiny-alpamayo-r1")
    for k, cameras in enumerate(camera_sets(6)):
        window, _ = history.add(cameras)
        before = len(made)
        got = rows.rows(window, lambda i, image: made.append(i) or patchify(image, VISION, None))
        assert len(made) - before == 4                  # the first window: 4 images, each repeated 4 times
        remade = frame_inputs(model, window, still_history(), PromptText())
        kept = inputs_from_rows(model, got, still_history(), PromptText())
        assert torch.equal(kept.pixel_values, remade.pixel_values) and torch.equal(kept.input_ids, remade.input_ids)
    assert len(rows.made) == 16                         # 4 cameras x the 4 frames a window reads, no more


@pytest.mark.slow
def test_real_size_cameras_are_served_by_the_graph_exactly(tmp_path, domain):
    """Four 640 x 360 cameras (the size the seat's example sends) into a release with the releases' budget: the
    trajectories equal run_reference on the resized frames (was: refused, "each side must be a multiple of 32")."""
    import rclpy
    from published_alpamayo import write_release
    from test_alpamayo_graph import Driver, check, expected, graph_params
    from hybrid_vla_ros.ros.launch_support.bringup import InProcessGraph
    release = write_release(tmp_path / "r1", "alpamayo_r1")          # min_pixels 163840, max_pixels 196608
    context = rclpy.Context()
    rclpy.init(context=context)
    graph = InProcessGraph(graph_params(release, False), context=context,
                           nodes=("hybrid_vla_prefix", "hybrid_vla_suffix"))
    driver = Driver(context, graph.executor, graph.spin_once)
    try:
        assert not graph.failed, graph.failed
        rng = np.random.default_rng(1)
        sets = [[rng.integers(0, 256, (360, 640, 3), dtype=np.uint8) for _ in range(4)] for _ in range(2)]
        paths, infos = driver.drive(sets, timeout_s=120)
        check(paths, infos, expected(graph.nodes["hybrid_vla_suffix"].serving.model, sets, False))
    finally:
        driver.close()
        graph.shutdown()
        rclpy.shutdown(context=context)


def test_frame_inputs_follow_the_processor_layout(releases):
    model = alpamayo.load_release(releases["r1"])
    sets = camera_sets(2)
    history = ImageHistory()
    history.add(sets[0])
    images, padded = history.add(sets[1])
    assert padded == 2 and images[:4] == [sets[0][0]] * 3 + [sets[1][0]]           # camera-major, oldest first
    inputs = frame_inputs(model, images, still_history(), PromptText())
    alpamayo.check_inputs(model, inputs)
    assert inputs.pixel_values.shape == (16 * 4, 3 * 2 * 16 * 16) and inputs.image_grid_thw.tolist() == [[1, 2, 2]] * 16
    assert float(inputs.pixel_values.abs().max()) <= 1.0
    odd = frame_inputs(model, [np.zeros((30, 32, 3), np.uint8)] * 16, still_history(), PromptText())
    assert odd.image_grid_thw.tolist() == [[1, 2, 2]] * 16      # resized into the release's budget (1024 pixels)
