"""Qwen2-VL (`qwen2_vl`): native-resolution ViT with 2x2 patch merging, 3-row M-RoPE positions.

The prompt's image block is <vision_start> <image_pad> x n <vision_end> per camera; images are resized
straight to the input size (no crop). Qwen2.5-VL (qwen2_5_vl.py) shares all of it but its vision config.
"""

from __future__ import annotations

import torch
from transformers import Qwen2VLConfig, Qwen2VLModel

from ..tokenize.tokens import IMAGE_TOKEN, VIDEO_TOKEN, VISION_END, VISION_START
from .base import ATTN_IMPL, Family, text_fields


def mrope_section(head_dim: int) -> list[int]:
    """Split head_dim/2 rotary frequencies into (temporal, height, width) like Qwen's [16, 24, 24]."""
    half = head_dim // 2
    temporal = half // 4
    height = (half - temporal) // 2
    return [temporal, height, half - temporal - height]


class Qwen2VLFamily(Family):
    name = "qwen2_vl"
    model_types = ("qwen2_vl",)
    patch_merge = 2
    temporal_patch = 2
    config_class = Qwen2VLConfig
    special_token_fields = {"image_token_id": IMAGE_TOKEN, "video_token_id": VIDEO_TOKEN,
                            "vision_start_token_id": VISION_START, "vision_end_token_id": VISION_END}
    key_prefixes = (("model.visual.", "visual."),) + Family.key_prefixes

    @property
    def model_class(self):
        return Qwen2VLModel

    def vision_config(self, spec) -> dict:
        return dict(depth=spec.vision_depth, embed_dim=spec.vision_hidden, hidden_size=spec.hidden_size,
                    num_heads=spec.vision_heads, mlp_ratio=max(1, spec.vision_intermediate // spec.vision_hidden),
                    patch_size=spec.patch_size, spatial_merge_size=self.patch_merge,
                    temporal_patch_size=self.temporal_patch)

    def build_config(self, spec):
        head_dim = spec.attention_head_dim
        text = dict(text_fields(spec), rope_parameters={"rope_type": "default", "rope_theta": 1_000_000.0,
                                                         "mrope_section": mrope_section(head_dim)})
        return self.config_class(text_config=text, vision_config=self.vision_config(spec), image_token_id=IMAGE_TOKEN,
                                 video_token_id=VIDEO_TOKEN, vision_start_token_id=VISION_START,
                                 vision_end_token_id=VISION_END, attn_implementation=ATTN_IMPL)

    def vision_spec_fields(self, config) -> dict:
        vision = config.vision_config
        return dict(vision_depth=vision.depth, vision_hidden=vision.embed_dim, vision_heads=vision.num_heads,
                    vision_intermediate=vision.embed_dim * vision.mlp_ratio)

    def image_tokens_per_camera(self, spec) -> int:
        grid = (spec.image_height // spec.patch_size) * (spec.image_width // spec.patch_size)
        return grid // (self.patch_merge * self.patch_merge)

    def pixel_inputs(self, spec, images: torch.Tensor) -> dict:
        """images (N, 3, H, W) float, normalised -> flattened patches in the Qwen processor's layout."""
        n, c, h, w = images.shape
        p, m, t = spec.patch_size, self.patch_merge, self.temporal_patch
        gh, gw = h // p, w // p
        frames = images.unsqueeze(1).expand(n, t, c, h, w)  # a still image is repeated over the temporal patch
        patches = frames.reshape(n, 1, t, c, gh // m, m, p, gw // m, m, p)
        patches = patches.permute(0, 1, 4, 7, 5, 8, 3, 2, 6, 9)  # (n, gt, gh/m, gw/m, m, m, c, t, p, p)
        flat = patches.reshape(n * gh * gw, c * t * p * p)
        grid_thw = torch.tensor([[1, gh, gw]] * n, dtype=torch.long)
        return {"pixel_values": flat, "image_grid_thw": grid_thw}

    def image_features(self, vlm, pixels: dict) -> torch.Tensor:
        out = vlm.get_image_features(pixels["pixel_values"], pixels["image_grid_thw"])
        return torch.cat(list(out.pooler_output), dim=0)  # (N * tokens_per_camera, hidden)

    @staticmethod
    def position_ids_shape(seq_len: int) -> tuple[int, ...]:
        """M-RoPE: three rows (temporal, height, width) of positions per token."""
        return (3, 1, seq_len)

    def position_ids(self, vlm, input_ids: torch.Tensor, mm_token_type_ids: torch.Tensor, pixels: dict):
        position_ids, _ = vlm.get_rope_index(input_ids, mm_token_type_ids=mm_token_type_ids,
                                             image_grid_thw=pixels["image_grid_thw"])
        return position_ids  # (3, B, S): temporal, height, width rows

    def reference_kwargs(self, pixels: dict, mm_token_type_ids: torch.Tensor) -> dict:
        return {"pixel_values": pixels["pixel_values"], "image_grid_thw": pixels["image_grid_thw"],
                "mm_token_type_ids": mm_token_type_ids}

    def prompt_token_ids(self, config) -> tuple[int, int | None, int | None]:
        return config.image_token_id, config.vision_start_token_id, config.vision_end_token_id
