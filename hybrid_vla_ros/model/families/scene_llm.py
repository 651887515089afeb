"""Plain HF decoder LLMs fed by a scene encoder (`scene_llama`, `scene_qwen2`, `scene_qwen3`): the ORION /
MindDrive / OpenDriveVLA shape. The checkpoint's config.json is the LLM's own (`llama`, `qwen2`, `qwen3`,
written by transformers' save_pretrained); the scene encoder is a plugin (model/plugins/scene_encoders.py) with
its weights in scene_encoder.safetensors. Its scene tokens replace the embeddings of one image block,
[VISION_START] [IMAGE] x n [VISION_END], after [BOS]; 1-D RoPE. The LLM runs fresh every frame (no KV cache):
the cross-frame state lives in the encoder, which runs in the prefix in frame order.
"""

from __future__ import annotations

import torch
from transformers import LlamaConfig, LlamaModel, Qwen2Config, Qwen2Model, Qwen3Config, Qwen3Model

from ...errors import ConfigError, expect
from ..tokenize.tokens import IMAGE_TOKEN, VISION_END, VISION_START
from .base import ATTN_IMPL, Family, text_fields


class SceneLLMFamily(Family):
    scene_encoded = True
    config_class = LlamaConfig
    backbone_class = LlamaModel
    rope_theta = 10_000.0
    # a causal-LM checkpoint ("model.layers...") or the bare model's own names ("layers...")
    key_prefixes = (("model.", ""),)

    @property
    def model_class(self):
        return self.backbone_class

    def build_config(self, spec):
        head_dim = spec.hidden_size // spec.num_heads
        return self.config_class(**text_fields(spec), head_dim=head_dim, attn_implementation=ATTN_IMPL,
                                 rope_parameters={"rope_type": "default", "rope_theta": self.rope_theta})

    def vision_spec_fields(self, config) -> dict:
        return {}

    def check_spec(self, spec) -> None:
        super().check_spec(spec)
        expect(spec.deepstack_blocks == 0, ConfigError, f"spec '{spec.name}': {self.name} has no DeepStack")

    def image_blocks(self, spec) -> tuple[int, int]:
        return 1, spec.scene_tokens()             # the scene encoder plugin's tokens_for(scene_config)

    def image_tokens_per_camera(self, spec) -> int:
        return self.image_blocks(spec)[1]

    def pixel_inputs(self, spec, images: torch.Tensor) -> dict:
        return {"images": images}                                                      # (N, 3, H, W)

    def camera_pixels(self, spec, pixels: dict, camera: int) -> None:
        return None                                       # the scene encoder fuses every camera (and its memory)

    def frame_features(self, model, pixels: dict, ego: torch.Tensor, stamp_ns: int, context=None):
        images = pixels["images"].to(next(model.scene_encoder.parameters()).dtype)
        return model.scene_encoder.encode(images, ego.to(images), stamp_ns, context), []   # (n, H)

    def reference_inputs(self, model, encoded, frame) -> dict:
        """HF's own LLM forward on the prompt's embeddings with the scene tokens in place (the encoder runs
        once for the frame, as in the split)."""
        ids = encoded.input_ids
        embeds = model.decoder.embed_tokens(ids)                                       # (P, S, H)
        features, _ = self.frame_features(model, encoded.pixels, encoded.ego, frame.stamp_ns, frame.context)
        features = (features.repeat(ids.shape[0], 1) if ids.shape[0] > 1 else features).to(embeds.dtype)  # per pass
        embeds = embeds.masked_scatter((ids == model.prompt.image_token_id).unsqueeze(-1), features)
        return {"inputs_embeds": embeds}

    def prompt_token_ids(self, config) -> tuple[int, int | None, int | None]:
        return (getattr(config, "image_token_id", None) or IMAGE_TOKEN,
                getattr(config, "vision_start_token_id", None) or VISION_START,
                getattr(config, "vision_end_token_id", None) or VISION_END)

    @staticmethod
    def language_model(vlm):
        return vlm


class SceneLlamaFamily(SceneLLMFamily):
    name = "scene_llama"
    model_types = ("llama",)


class SceneQwen2Family(SceneLLMFamily):
    name = "scene_qwen2"
    model_types = ("qwen2",)
    config_class, backbone_class, rope_theta = Qwen2Config, Qwen2Model, 1_000_000.0


class SceneQwen3Family(SceneLLMFamily):
    name = "scene_qwen3"
    model_types = ("qwen3",)
    config_class, backbone_class, rope_theta = Qwen3Config, Qwen3Model, 1_000_000.0
