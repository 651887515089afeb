"""InternVL (`internvl`, transformers' native InternVLModel; SimLingo's and ReCogDrive's backbone family):
InternViT on square tiles, pixel shuffle (downsample_ratio 0.5: 2x2 patches -> one token) + MLP projector,
and a Qwen2 decoder (a checkpoint's may be Qwen3 or Llama) with 1-D RoPE.

Fixed tiling: each camera image, resized straight to image_height x image_width (the GotOcr2 processor's
resize for a fixed grid), is cut row-major into (image_height / tile_size) x (image_width / tile_size)
square tiles of the vision encoder's image_size, as `crop_to_patches` cuts them for that grid (its extra
thumbnail tile is not added: the grid is fixed, so is the token count). A camera's image block is
<img> <IMG_CONTEXT> x (tiles * tokens per tile) </img>, the processor's layout; with the built-in byte prompt
<img>/</img> are its vision start/end ids, with a checkpoint's own tokenizer its <img>/</img> tokens.
"""

from __future__ import annotations

import torch
from transformers import InternVLConfig, InternVLModel, InternVLVisionConfig, Qwen2Config

from ...errors import ConfigError, expect
from ..tokenize.tokens import IMAGE_TOKEN
from .base import ATTN_IMPL, Family, text_fields

DOWNSAMPLE_RATIO = 0.5          # every published InternVL 2 / 2.5 / 3 checkpoint
TEXT_MODEL_TYPES = ("qwen2", "qwen3", "llama")  # llama: what InternVL3-9B / 2.5-2B, 8B convert to
START_TOKEN, END_TOKEN = "<img>", "</img>"


def _square(value, what: str, source: str) -> int:
    """A config's size (an int or [h, w]) -> its side; non-square is refused."""
    sides = list(value) if isinstance(value, (list, tuple)) else [value, value]
    expect(len(sides) == 2 and sides[0] == sides[1] and isinstance(sides[0], int), ConfigError,
           f"{source}: vision_config.{what}={value!r}, expected a square size (tiles are square)")
    return sides[0]


class InternVLFamily(Family):
    name = "internvl"
    model_types = ("internvl",)
    patch_merge = 2  # pixel shuffle at downsample_ratio 0.5
    special_token_fields = {"image_token_id": IMAGE_TOKEN}
    # save_pretrained writes vision_tower.*, multi_modal_projector.*, language_model.model.* (both classes);
    # the generation class in memory / newer layouts name them model.*
    key_prefixes = (("model.vision_tower.", "vision_tower."),
                    ("model.multi_modal_projector.", "multi_modal_projector.")) + Family.key_prefixes

    @property
    def model_class(self):
        return InternVLModel

    def check_spec(self, spec) -> None:
        tile, step = spec.tile_size, spec.patch_size * self.patch_merge
        expect(isinstance(tile, int) and tile > 0 and tile % step == 0, ConfigError,
               f"spec '{spec.name}': tile_size={tile!r}, expected a positive multiple of {step} (patch_size x 2, "
               f"the pixel shuffle) for internvl")
        for side in ("image_height", "image_width"):
            expect(getattr(spec, side) % tile == 0, ConfigError,
                   f"spec '{spec.name}': {side}={getattr(spec, side)} must be whole tiles of {tile} for internvl")

    def build_config(self, spec):
        vision = InternVLVisionConfig(hidden_size=spec.vision_hidden, num_hidden_layers=spec.vision_depth,
                                      num_attention_heads=spec.vision_heads,
                                      intermediate_size=spec.vision_intermediate, image_size=spec.tile_size,
                                      patch_size=spec.patch_size, attention_bias=True)
        text = Qwen2Config(**text_fields(spec), rope_parameters={"rope_type": "default", "rope_theta": 1_000_000.0})
        return InternVLConfig(vision_config=vision, text_config=text, image_token_id=IMAGE_TOKEN,
                              image_seq_length=self.tokens_per_tile(spec), downsample_ratio=DOWNSAMPLE_RATIO,
                              vision_feature_layer=-1, vision_feature_select_strategy="default",
                              attn_implementation=ATTN_IMPL)

    def vision_spec_fields(self, config) -> dict:
        source, vision, text = "checkpoint config", config.vision_config, config.get_text_config()
        expect(config.downsample_ratio == DOWNSAMPLE_RATIO, ConfigError,
               f"{source}: downsample_ratio={config.downsample_ratio}, only {DOWNSAMPLE_RATIO} (2x2 pixel shuffle, "
               f"every published InternVL) is supported")
        expect(text.model_type in TEXT_MODEL_TYPES, ConfigError,
               f"{source}: text_config model_type {text.model_type!r}; supported: {list(TEXT_MODEL_TYPES)}")
        layers = set(getattr(text, "layer_types", None) or ["full_attention"])
        expect(layers == {"full_attention"}, ConfigError,
               f"{source}: text_config layer_types {sorted(layers)}; only full attention is split here "
               f"(use_sliding_window false, as InternVL checkpoints have it)")
        tile = _square(vision.image_size, "image_size", source)
        return dict(vision_depth=vision.num_hidden_layers, vision_hidden=vision.hidden_size,
                    vision_heads=vision.num_attention_heads, vision_intermediate=vision.intermediate_size,
                    patch_size=_square(vision.patch_size, "patch_size", source), tile_size=tile,
                    image_height=tile, image_width=tile)  # one tile unless the head's metadata says more

    # ---- one frame's inputs --------------------------------------------------------------------------
    def tokens_per_tile(self, spec) -> int:
        side = spec.tile_size // (spec.patch_size * self.patch_merge)
        return side * side

    @staticmethod
    def tile_grid(spec) -> tuple[int, int]:
        """(rows, columns) of tiles per camera."""
        return spec.image_height // spec.tile_size, spec.image_width // spec.tile_size

    def image_tokens_per_camera(self, spec) -> int:
        rows, cols = self.tile_grid(spec)
        return rows * cols * self.tokens_per_tile(spec)

    def pixel_inputs(self, spec, images: torch.Tensor) -> dict:
        """images (N, 3, H, W) -> tiles (N * rows * cols, 3, tile, tile), each camera's row-major."""
        n, c, _, _ = images.shape
        (rows, cols), t = self.tile_grid(spec), spec.tile_size
        tiles = images.reshape(n, c, rows, t, cols, t).permute(0, 2, 4, 1, 3, 5)  # (n, rows, cols, c, t, t)
        return {"pixel_values": tiles.reshape(n * rows * cols, c, t, t)}

    def image_features(self, vlm, pixels: dict) -> torch.Tensor:
        out = vlm.get_image_features(pixel_values=pixels["pixel_values"])  # the config's feature layer/strategy
        return out.pooler_output.reshape(-1, out.pooler_output.shape[-1])  # (tiles * tokens_per_tile, hidden)

    def reference_kwargs(self, pixels: dict, mm_token_type_ids: torch.Tensor) -> dict:
        return {"pixel_values": pixels["pixel_values"]}

    # ---- prompt --------------------------------------------------------------------------------------
    def prompt_token_ids(self, config) -> tuple[int, int | None, int | None]:
        return config.image_token_id, None, None  # <img>/</img> live in the tokenizer, not the config

    def tokenizer_token_ids(self, config, tokenizer) -> tuple[int, int | None, int | None]:
        """<img> and </img> from the checkpoint's tokenizer (its start/end_image_token when it names them)."""
        ids = []
        for attribute, default in (("start_image_token", START_TOKEN), ("end_image_token", END_TOKEN)):
            token = getattr(tokenizer, attribute, None) or default
            found = tokenizer.convert_tokens_to_ids([token])[0]
            expect(found is not None and found != tokenizer.unk_token_id, ConfigError,
                   f"the checkpoint's tokenizer has no {token!r} token (InternVL's image start/end tokens)")
            ids.append(int(found))
        return config.image_token_id, ids[0], ids[1]
