"""Qwen2.5-VL (`qwen2_5_vl`, MindDrive's backbone family): Qwen2-VL's layout (qwen2_vl.py) with a windowed-
attention ViT (SwiGLU MLP, full attention in the last block) and its own vision config fields."""

from __future__ import annotations

from transformers.models.qwen2_5_vl import Qwen2_5_VLConfig, Qwen2_5_VLModel

from .qwen2_vl import Qwen2VLFamily


class Qwen2_5VLFamily(Qwen2VLFamily):
    name = "qwen2_5_vl"
    model_types = ("qwen2_5_vl",)
    config_class = Qwen2_5_VLConfig

    @property
    def model_class(self):
        return Qwen2_5_VLModel

    def vision_config(self, spec) -> dict:
        return dict(depth=spec.vision_depth, hidden_size=spec.vision_hidden, out_hidden_size=spec.hidden_size,
                    num_heads=spec.vision_heads, intermediate_size=spec.vision_intermediate,
                    patch_size=spec.patch_size, spatial_merge_size=self.patch_merge,
                    temporal_patch_size=self.temporal_patch, window_size=spec.patch_size * self.patch_merge * 2,
                    fullatt_block_indexes=[spec.vision_depth - 1])

    def vision_spec_fields(self, config) -> dict:
        vision = config.vision_config
        return dict(vision_depth=vision.depth, vision_hidden=vision.hidden_size, vision_heads=vision.num_heads,
                    vision_intermediate=vision.intermediate_size)
