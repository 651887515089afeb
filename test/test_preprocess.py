"""Camera images of any size -> model pixels, compared with transformers' own image processors on the same
image. The two differ where PIL's fixed-point resampling rounds to the other uint8 level: at most one level
(1/255/std = 0.015 after normalisation), on a few values in 1,000. Both resampling paths are compared: torch's
uint8 kernel (the CPU's) and the float passes (what a CUDA prefix runs)."""

import dataclasses
import json
import warnings

import numpy as np
import pytest
import torch

from hybrid_vla_ros.errors import ConfigError, InputError
from hybrid_vla_ros.model.families import get_family
from hybrid_vla_ros.model.preprocess import CLIP_MEAN, CLIP_STD, ImageProcessing, preprocess
from hybrid_vla_ros.model.presets import get_preset

ONE_LEVEL = 1.0 / 255.0 / min(CLIP_STD) + 1e-6


def camera(h, w, seed=0):
    """Gradients to the extremes plus strong noise: bicubic overshoot gets clipped (the hard case)."""
    rng = np.random.default_rng(seed)
    yy, xx = np.mgrid[0:h, 0:w]
    image = np.stack([xx * 255 // w, yy * 255 // h, ((xx + yy) // 3) % 256], -1).astype(np.int16)
    image += rng.integers(-40, 40, image.shape, dtype=np.int16)
    return np.clip(image, 0, 255).astype(np.uint8)


def assert_close_to_hf(ours, theirs):
    diff = (ours - theirs).abs()
    assert diff.max().item() <= ONE_LEVEL, diff.max().item()
    assert (diff > 1e-4).float().mean().item() < 1e-2   # one level off on under 1% of the values


@pytest.fixture(params=["uint8", "float"])
def kernel(request, monkeypatch):
    """Which resampling path preprocess takes: the CPU's uint8 kernel, or the float passes a GPU runs."""
    from hybrid_vla_ros.model import preprocess as module
    if request.param == "float":
        monkeypatch.setattr(module, "resample_uint8", module.resample_float)
    return request.param


@pytest.mark.parametrize("size", [(720, 1280), (1080, 1920)])
def test_qwen_family_matches_transformers_qwen2_vl_image_processor(size, kernel):
    from transformers.models.qwen2_vl.image_processing_pil_qwen2_vl import Qwen2VLImageProcessorPil
    spec = dataclasses.replace(get_preset("tiny"), image_height=252, image_width=448)  # 16:9, like the cameras
    pixels = 252 * 448  # smart_resize then picks 252x448 for a 16:9 camera: the spec's own input size
    hf = Qwen2VLImageProcessorPil(size={"shortest_edge": pixels, "longest_edge": pixels}, patch_size=14,
                                  merge_size=2, temporal_patch_size=2)
    image = camera(*size)
    theirs = hf(images=[image], return_tensors="pt")
    ours = get_family("qwen2_vl").pixel_inputs(spec, preprocess([image], ImageProcessing.for_spec(spec)))
    assert theirs["image_grid_thw"].tolist() == ours["image_grid_thw"].tolist() == [[1, 18, 32]]
    assert_close_to_hf(ours["pixel_values"], theirs["pixel_values"])


@pytest.mark.parametrize("size", [(720, 1280), (1080, 1920), (1280, 720)])
def test_llava_family_matches_transformers_clip_image_processor(size, kernel):
    from transformers.models.clip.image_processing_pil_clip import CLIPImageProcessorPil
    spec = get_preset("tiny-llava")
    side = spec.image_height
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        hf = CLIPImageProcessorPil(size={"shortest_edge": side}, crop_size={"height": side, "width": side},
                                   do_center_crop=True, image_mean=list(CLIP_MEAN), image_std=list(CLIP_STD))
    image = camera(*size)
    theirs = hf(images=[image], return_tensors="pt")["pixel_values"]
    ours = preprocess([image], ImageProcessing.for_spec(spec))
    assert ours.shape == theirs.shape == (1, 3, side, side)
    assert_close_to_hf(ours, theirs)


def test_cameras_of_different_sizes_in_one_frame_each_get_the_input_size():
    spec = get_preset("tiny")
    images = [camera(720, 1280), camera(56, 56, seed=1)]
    out = preprocess(images, ImageProcessing.for_spec(spec))
    assert out.shape == (2, 3, 56, 56) and out.dtype == torch.float32
    exact = (torch.from_numpy(images[1]).permute(2, 0, 1).float() / 255 - torch.tensor(CLIP_MEAN).view(3, 1, 1)) \
        / torch.tensor(CLIP_STD).view(3, 1, 1)
    torch.testing.assert_close(out[1], exact)  # already the input size: not resampled at all


def test_a_checkpoints_preprocessor_config_sets_mean_std_rescale_and_crop(tmp_path):
    spec = get_preset("tiny")
    proc = ImageProcessing.for_spec(spec, {"image_mean": [0.5, 0.5, 0.5], "image_std": [0.5, 0.5, 0.5],
                                           "rescale_factor": 1 / 255, "do_center_crop": True})
    assert (proc.mean, proc.std, proc.crop) == ((0.5,) * 3, (0.5,) * 3, True)
    out = preprocess([np.full((40, 80, 3), 255, np.uint8)], proc)
    torch.testing.assert_close(out, torch.ones(1, 3, 56, 56))
    with pytest.raises(ConfigError, match=r"pp.json: image_mean=\[0.5\], expected three numbers"):
        ImageProcessing.for_spec(spec, {"image_mean": [0.5]}, "pp.json")


def test_a_checkpoint_directory_brings_its_preprocessor_config(tmp_path):
    from hybrid_vla_ros.model.checkpoint import load_checkpoint, save_checkpoint
    from hybrid_vla_ros.model.load import load_vla
    save_checkpoint(load_vla(preset="tiny"), tmp_path)
    (tmp_path / "preprocessor_config.json").write_text(json.dumps({"image_mean": [0.1, 0.2, 0.3]}))
    assert load_checkpoint(tmp_path).image_processing.mean == (0.1, 0.2, 0.3)


@pytest.mark.parametrize("bad,reason", [
    (np.zeros((0, 8, 3), np.uint8), r"shape \(0, 8, 3\)"), (np.zeros((8, 8), np.uint8), r"shape \(8, 8\)"),
    (np.zeros((8, 8, 3), np.float32), "dtype float32"), ([[0]], "list")])
def test_malformed_camera_arrays_are_refused_with_the_reason(bad, reason):
    with pytest.raises(InputError, match=rf"f camera 0: .*{reason}"):
        preprocess([bad], ImageProcessing.for_spec(get_preset("tiny")), where="f")
