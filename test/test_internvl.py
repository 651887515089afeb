"""InternVL (transformers' native `internvl`): fixed tiles per camera cut as transformers' own processor cuts
them, the processor's <img> <IMG_CONTEXT> x n </img> block per camera, 1-D positions, checkpoints as the
generation class writes them (Qwen2, Qwen3, Llama text) exact at every partition, and bad shapes refused."""

import dataclasses
import json

import pytest
import torch
from safetensors.torch import save_file

from hybrid_vla_ros.engine.stages import PrefixStage
from hybrid_vla_ros.engine.verify import verify_partitions
from hybrid_vla_ros.errors import ConfigError
from hybrid_vla_ros.model.checkpoint import load_checkpoint, save_checkpoint
from hybrid_vla_ros.model.families import get_family
from hybrid_vla_ros.model.families.base import text_fields
from hybrid_vla_ros.model.inputs import encode_frame, synthetic_frame
from hybrid_vla_ros.model.load import load_vla
from hybrid_vla_ros.model.preprocess import CLIP_MEAN, CLIP_STD, ImageProcessing, preprocess
from hybrid_vla_ros.model.spec import VLASpec
from hybrid_vla_ros.model.presets import get_preset
from hybrid_vla_ros.model.tokenize.tokens import IMAGE_TOKEN, VISION_END, VISION_START

from test_preprocess import assert_close_to_hf, camera

FAMILY = get_family("internvl")


@pytest.mark.parametrize("size,grid", [((56, 112), (1, 2)), ((112, 112), (2, 2)), ((720, 1280), (1, 2)),
                                       ((1080, 1920), (2, 3))])
def test_tiles_are_the_ones_transformers_got_ocr2_processor_cuts(size, grid):
    """crop_to_patches with the grid fixed (min = max = tiles) resizes straight to the grid and cuts row-major;
    its thumbnail (appended last) is the one tile not used here."""
    from transformers.models.got_ocr2.image_processing_pil_got_ocr2 import GotOcr2ImageProcessorPil
    tile = 56
    spec = dataclasses.replace(get_preset("tiny-internvl"), image_height=grid[0] * tile, image_width=grid[1] * tile)
    n = grid[0] * grid[1]
    hf = GotOcr2ImageProcessorPil(size={"height": tile, "width": tile}, crop_to_patches=True, min_patches=n,
                                  max_patches=n, image_mean=list(CLIP_MEAN), image_std=list(CLIP_STD))
    image = camera(*size)
    theirs = hf(images=[image], return_tensors="pt")
    ours = FAMILY.pixel_inputs(spec, preprocess([image], ImageProcessing.for_spec(spec)))["pixel_values"]
    assert theirs["num_patches"].tolist() == [n + 1] and ours.shape == (n, 3, tile, tile)
    assert_close_to_hf(ours, theirs["pixel_values"][:n])


def test_each_camera_is_one_img_block_of_all_its_tiles_tokens_and_positions_are_1d(tiny_models):
    model = tiny_models["tiny-internvl"]
    spec = model.spec
    per_tile = (spec.tile_size // spec.patch_size // 2) ** 2
    n = FAMILY.image_tokens_per_camera(spec)
    assert FAMILY.tile_grid(spec) == (1, 2) and n == 2 * per_tile == 8
    assert model.backbone.config.image_seq_length == per_tile
    encoded = encode_frame(synthetic_frame(spec, 0), model)
    ids = encoded.input_ids[0].tolist()
    block = [VISION_START] + [IMAGE_TOKEN] * n + [VISION_END]
    assert ids[1:1 + 2 * len(block)] == block * 2
    assert encoded.pixels["pixel_values"].shape == (spec.num_cameras * 2, 3, spec.tile_size, spec.tile_size)
    state = PrefixStage(model, 2).run(synthetic_frame(spec, 0))
    assert state.position_ids.shape == (1, len(ids)) and state.position_ids[0].tolist() == list(range(len(ids)))


def test_tiles_reach_the_model_in_camera_then_row_major_order(tiny_models):
    """Swapping a camera's two tiles changes its image features: the order is not a free choice."""
    model = tiny_models["tiny-internvl"]
    pixels = encode_frame(synthetic_frame(model.spec, 0), model).pixels
    with torch.inference_mode():
        features = FAMILY.image_features(model.backbone, pixels)
        swapped = FAMILY.image_features(model.backbone, {"pixel_values": pixels["pixel_values"][[1, 0, 2, 3]]})
    per_tile = features.shape[0] // 4
    # bit-equal: the same 4-tile batch through the same kernels on this thread, only the order differs; each tile's
    # rows see row-wise ops, attention within their own tile and GEMMs of the same shape (measured equal for any order
    # and batch size, with 1 or 2 threads, ATEN_CPU_CAPABILITY=default or MKL_ENABLE_INSTRUCTIONS=AVX)
    assert torch.equal(swapped[:per_tile], features[per_tile:2 * per_tile])
    assert not torch.equal(swapped, features)


@pytest.mark.parametrize("changes,match", [
    ({"tile_size": 0}, r"tile_size=0, expected a positive multiple of 28"),
    ({"tile_size": 42}, r"tile_size=42, expected a positive multiple of 28"),
    ({"image_width": 84}, r"image_width=84 must be whole tiles of 56"),
])
def test_bad_internvl_shapes_are_refused(changes, match):
    with pytest.raises(ConfigError, match=match):
        dataclasses.replace(get_preset("tiny-internvl"), **changes)


def test_a_tile_size_on_an_untiled_family_is_refused():
    with pytest.raises(ConfigError, match="qwen2_vl does not tile images"):
        VLASpec(**{**get_preset("tiny").to_dict(), "tile_size": 56})


def generation_class_checkpoint(directory, text: str, in_memory_names: bool = False):
    """tiny-internvl's head and metadata, with a backbone written by InternVLForConditionalGeneration (seeded
    weights of its own) with a Qwen2, Qwen3 or Llama decoder. in_memory_names: its keys as the module names them
    (model.vision_tower.*, model.language_model.*, lm_head.*), not as save_pretrained writes them."""
    from transformers import InternVLConfig, InternVLForConditionalGeneration, LlamaConfig, Qwen2Config, Qwen3Config
    spec = get_preset("tiny-internvl")
    save_checkpoint(load_vla(preset="tiny-internvl"), directory)
    base = FAMILY.build_config(spec)
    decoder = {"qwen2": Qwen2Config, "qwen3": Qwen3Config, "llama": LlamaConfig}[text](**text_fields(spec), head_dim=16)
    config = InternVLConfig(vision_config=base.vision_config, text_config=decoder, image_token_id=IMAGE_TOKEN,
                            image_seq_length=base.image_seq_length)
    torch.manual_seed(1)
    model = InternVLForConditionalGeneration(config).eval()
    model.save_pretrained(directory)
    if in_memory_names:
        tensors = {k: v.detach().clone().contiguous() for k, v in model.state_dict().items()}
        save_file(tensors, str(directory / "model.safetensors"), metadata={"format": "pt"})
    return model


@pytest.mark.parametrize("text,in_memory_names", [("qwen2", False), ("qwen3", False), ("llama", False),
                                                   ("qwen3", True)])
def test_a_generation_class_checkpoint_is_read_whole_and_splits_exactly(tmp_path, text, in_memory_names):
    written = generation_class_checkpoint(tmp_path, text, in_memory_names)
    model = load_checkpoint(tmp_path)
    assert model.spec == get_preset("tiny-internvl")  # tile size from config.json, the grid from the head
    assert model.decoder.config.model_type == text
    theirs = written.model.state_dict()
    ours = model.backbone.state_dict()
    assert ours.keys() == theirs.keys() and all(torch.equal(ours[k], theirs[k]) for k in ours)
    # split vs HF's forward: same kernels, same inputs, one thread (test_partition.py, EXACT)
    assert verify_partitions(model, frames=1)["max_abs_diff"] == 0.0


def edited_config(source, directory, edit):
    import shutil
    shutil.copytree(source, directory)
    config = json.loads((directory / "config.json").read_text())
    edit(config)
    (directory / "config.json").write_text(json.dumps(config))
    return directory


def test_checkpoint_configs_this_family_cannot_split_exactly_are_refused(tmp_path):
    src = tmp_path / "ok"
    save_checkpoint(load_vla(preset="tiny-internvl"), src)
    cases = [
        (lambda c: c.update(downsample_ratio=0.25), r"downsample_ratio=0.25, only 0.5"),
        (lambda c: c["text_config"].update(model_type="mistral"), r"text_config model_type 'mistral'; supported"),
        (lambda c: c["text_config"].update(layer_types=["sliding_attention"] * 4, use_sliding_window=True,
                                           sliding_window=16), r"layer_types \['sliding_attention'\]"),
        (lambda c: c["vision_config"].update(image_size=[56, 112]), r"image_size=\[56, 112\], expected a square"),
    ]
    for i, (edit, match) in enumerate(cases):
        with pytest.raises(ConfigError, match=match):
            load_checkpoint(edited_config(src, tmp_path / str(i), edit))
