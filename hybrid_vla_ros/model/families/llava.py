"""LLaVA (`llava`, ORION's backbone family): CLIP ViT (penultimate layer, CLS dropped) + MLP projector + a
Llama decoder with 1-D RoPE. The prompt's image block is <image> x n per camera; images are resized on
the shortest edge and centre-cropped (CLIPImageProcessor)."""

from __future__ import annotations

import torch
from transformers import CLIPVisionConfig, LlamaConfig, LlavaConfig, LlavaModel

from ..tokenize.tokens import IMAGE_TOKEN
from .base import ATTN_IMPL, Family, text_fields


class LlavaFamily(Family):
    name = "llava"
    model_types = ("llava",)
    centre_crop = True
    special_token_fields = {"image_token_id": IMAGE_TOKEN, "image_token_index": IMAGE_TOKEN}
    key_prefixes = (("model.vision_tower.", "vision_tower."),
                    ("model.multi_modal_projector.", "multi_modal_projector.")) + Family.key_prefixes

    @property
    def model_class(self):
        return LlavaModel

    def build_config(self, spec):
        vision = CLIPVisionConfig(hidden_size=spec.vision_hidden, intermediate_size=spec.vision_intermediate,
                                  num_hidden_layers=spec.vision_depth, num_attention_heads=spec.vision_heads,
                                  image_size=spec.image_height, patch_size=spec.patch_size,
                                  projection_dim=spec.vision_hidden)
        text = LlamaConfig(**text_fields(spec), rope_parameters={"rope_type": "default", "rope_theta": 10_000.0})
        return LlavaConfig(vision_config=vision, text_config=text, image_token_index=IMAGE_TOKEN,
                           image_seq_length=self.image_tokens_per_camera(spec), vision_feature_layer=-2,
                           vision_feature_select_strategy="default", attn_implementation=ATTN_IMPL)

    def vision_spec_fields(self, config) -> dict:
        vision = config.vision_config
        return dict(vision_depth=vision.num_hidden_layers, vision_hidden=vision.hidden_size,
                    vision_heads=vision.num_attention_heads, vision_intermediate=vision.intermediate_size,
                    image_height=vision.image_size, image_width=vision.image_size)

    def image_tokens_per_camera(self, spec) -> int:
        return (spec.image_height // spec.patch_size) * (spec.image_width // spec.patch_size)

    def pixel_inputs(self, spec, images: torch.Tensor) -> dict:
        return {"pixel_values": images}  # (N, 3, H, W)

    def image_features(self, vlm, pixels: dict) -> torch.Tensor:
        out = vlm.get_image_features(pixel_values=pixels["pixel_values"], vision_feature_layer=-2,
                                     vision_feature_select_strategy="default")
        return torch.cat(list(out.pooler_output), dim=0)  # (N * tokens_per_camera, hidden)

    def reference_kwargs(self, pixels: dict, mm_token_type_ids: torch.Tensor) -> dict:
        return {"pixel_values": pixels["pixel_values"]}

    def prompt_token_ids(self, config) -> tuple[int, int | None, int | None]:
        return getattr(config, "image_token_index", None) or config.image_token_id, None, None
