"""Backbone families: how each HF vision-language model is configured, fed pixels and given positions.

Everything family-specific lives here; the stages (engine/stages.py) only see the common interface:
`image_features`, `position_ids` and the decoder (`language_model(vlm)`).
"""

from __future__ import annotations

import torch
from transformers import (CLIPVisionConfig, LlamaConfig, LlavaConfig, LlavaModel, Qwen2VLConfig, Qwen2VLModel)
from transformers.models.qwen2_5_vl import Qwen2_5_VLConfig, Qwen2_5_VLModel

from ..errors import ConfigError, expect
from .spec import VLASpec
from .tokens import BOS, IMAGE_TOKEN, PAD, VISION_END, VISION_START, VIDEO_TOKEN

ATTN_IMPL = "sdpa"


def _mrope_section(head_dim: int) -> list[int]:
    """Split head_dim/2 rotary frequencies into (temporal, height, width) like Qwen's [16, 24, 24]."""
    half = head_dim // 2
    temporal = half // 4
    height = (half - temporal) // 2
    return [temporal, height, half - temporal - height]


def _text_fields(spec: VLASpec) -> dict:
    return dict(hidden_size=spec.hidden_size, num_hidden_layers=spec.num_blocks,
                num_attention_heads=spec.num_heads, num_key_value_heads=spec.num_kv_heads,
                intermediate_size=spec.intermediate_size, vocab_size=spec.vocab_size,
                max_position_embeddings=4096, rms_norm_eps=1e-6, bos_token_id=BOS,
                eos_token_id=None, pad_token_id=PAD)


class QwenVLFamily:
    """Qwen2-VL and Qwen2.5-VL: native-resolution ViT with 2x2 patch merging and 3-row M-RoPE positions."""

    merge = 2
    temporal_patch = 2

    def __init__(self, name: str):
        self.name = name
        self.model_class = Qwen2VLModel if name == "qwen2_vl" else Qwen2_5_VLModel

    def build_config(self, spec: VLASpec):
        head_dim = spec.hidden_size // spec.num_heads
        text = dict(_text_fields(spec), rope_parameters={"rope_type": "default", "rope_theta": 1_000_000.0,
                                                          "mrope_section": _mrope_section(head_dim)})
        if self.name == "qwen2_vl":
            vision = dict(depth=spec.vision_depth, embed_dim=spec.vision_hidden, hidden_size=spec.hidden_size,
                          num_heads=spec.vision_heads, mlp_ratio=max(1, spec.vision_intermediate // spec.vision_hidden),
                          patch_size=spec.patch_size, spatial_merge_size=self.merge,
                          temporal_patch_size=self.temporal_patch)
            config_class = Qwen2VLConfig
        else:
            vision = dict(depth=spec.vision_depth, hidden_size=spec.vision_hidden, out_hidden_size=spec.hidden_size,
                          num_heads=spec.vision_heads, intermediate_size=spec.vision_intermediate,
                          patch_size=spec.patch_size, spatial_merge_size=self.merge,
                          temporal_patch_size=self.temporal_patch, window_size=spec.patch_size * self.merge * 2,
                          fullatt_block_indexes=[spec.vision_depth - 1])
            config_class = Qwen2_5_VLConfig
        config = config_class(text_config=text, vision_config=vision, image_token_id=IMAGE_TOKEN,
                              video_token_id=VIDEO_TOKEN, vision_start_token_id=VISION_START,
                              vision_end_token_id=VISION_END, attn_implementation=ATTN_IMPL)
        return config

    def image_tokens_per_camera(self, spec: VLASpec) -> int:
        grid = (spec.image_height // spec.patch_size) * (spec.image_width // spec.patch_size)
        return grid // (self.merge * self.merge)

    def pixel_inputs(self, spec: VLASpec, images: torch.Tensor) -> dict:
        """images (N, 3, H, W) float, normalised -> flattened patches in the Qwen processor's layout."""
        n, c, h, w = images.shape
        p, m, t = spec.patch_size, self.merge, self.temporal_patch
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


class LlavaFamily:
    """LLaVA: CLIP ViT (penultimate layer, CLS dropped) + MLP projector + Llama decoder, 1-D RoPE."""

    name = "llava"
    model_class = LlavaModel

    def build_config(self, spec: VLASpec):
        vision = CLIPVisionConfig(hidden_size=spec.vision_hidden, intermediate_size=spec.vision_intermediate,
                                  num_hidden_layers=spec.vision_depth, num_attention_heads=spec.vision_heads,
                                  image_size=spec.image_height, patch_size=spec.patch_size, projection_dim=spec.vision_hidden)
        text = LlamaConfig(**_text_fields(spec), rope_parameters={"rope_type": "default", "rope_theta": 10_000.0})
        return LlavaConfig(vision_config=vision, text_config=text, image_token_index=IMAGE_TOKEN,
                           image_seq_length=self.image_tokens_per_camera(spec), vision_feature_layer=-2,
                           vision_feature_select_strategy="default", attn_implementation=ATTN_IMPL)

    def image_tokens_per_camera(self, spec: VLASpec) -> int:
        return (spec.image_height // spec.patch_size) * (spec.image_width // spec.patch_size)

    def pixel_inputs(self, spec: VLASpec, images: torch.Tensor) -> dict:
        return {"pixel_values": images}  # (N, 3, H, W)

    def image_features(self, vlm, pixels: dict) -> torch.Tensor:
        out = vlm.get_image_features(pixel_values=pixels["pixel_values"], vision_feature_layer=-2,
                                     vision_feature_select_strategy="default")
        return torch.cat(list(out.pooler_output), dim=0)  # (N * tokens_per_camera, hidden)

    @staticmethod
    def position_ids_shape(seq_len: int) -> tuple[int, ...]:
        return (1, seq_len)

    def position_ids(self, vlm, input_ids: torch.Tensor, mm_token_type_ids: torch.Tensor, pixels: dict):
        b, s = input_ids.shape
        return torch.arange(s, device=input_ids.device).unsqueeze(0).expand(b, s)  # (B, S)

    def reference_kwargs(self, pixels: dict, mm_token_type_ids: torch.Tensor) -> dict:
        return {"pixel_values": pixels["pixel_values"]}


FAMILY_OF_MODEL_TYPE = {"qwen2_vl": "qwen2_vl", "qwen2_5_vl": "qwen2_5_vl", "llava": "llava"}
# The prompt's special tokens (model/tokens.py) as each family's config names them.
TOKEN_FIELDS = {"image_token_id": IMAGE_TOKEN, "image_token_index": IMAGE_TOKEN, "video_token_id": VIDEO_TOKEN,
                "vision_start_token_id": VISION_START, "vision_end_token_id": VISION_END}


def load_backbone_config(directory):
    """config.json of a checkpoint directory -> the transformers config, offline; unknown families refused."""
    import json
    from transformers import AutoConfig
    path = directory / "config.json"
    try:
        model_type = json.loads(path.read_text()).get("model_type")
    except (json.JSONDecodeError, UnicodeDecodeError, AttributeError) as exc:
        raise ConfigError(f"checkpoint '{path}': not a JSON object ({exc})") from exc
    expect(isinstance(model_type, str) and model_type in FAMILY_OF_MODEL_TYPE, ConfigError,
           f"checkpoint '{path}': model_type {model_type!r} is not supported; supported: {sorted(FAMILY_OF_MODEL_TYPE)}")
    try:
        return AutoConfig.from_pretrained(str(directory), local_files_only=True, attn_implementation=ATTN_IMPL)
    except Exception as exc:  # noqa: BLE001 - transformers/huggingface_hub raise their own validation types
        raise ConfigError(f"checkpoint '{path}': transformers cannot read it ({type(exc).__name__}: {exc})") from exc


def spec_fields(config, own_tokenizer: bool = False) -> dict:
    """VLASpec fields implied by a backbone config (the VLA's own fields come from the head's metadata).
    Without its own tokenizer, a checkpoint must use the built-in prompt's special-token ids."""
    family = FAMILY_OF_MODEL_TYPE[config.model_type]
    for name, ours in TOKEN_FIELDS.items():
        theirs = getattr(config, name, ours)
        expect(own_tokenizer or theirs in (ours, None), ConfigError,
               f"checkpoint config: {name}={theirs}, the built-in prompt layout uses {ours}; a checkpoint with "
               f"other special tokens must bring its tokenizer (tokenizer.json; docs/CHECKPOINTS.md)")
    text, vision = config.get_text_config(), config.vision_config
    fields = dict(family=family, num_blocks=text.num_hidden_layers, hidden_size=text.hidden_size,
                  num_heads=text.num_attention_heads, num_kv_heads=text.num_key_value_heads,
                  intermediate_size=text.intermediate_size, vocab_size=text.vocab_size, patch_size=vision.patch_size)
    if family == "qwen2_vl":
        fields.update(vision_depth=vision.depth, vision_hidden=vision.embed_dim, vision_heads=vision.num_heads,
                      vision_intermediate=vision.embed_dim * vision.mlp_ratio)
    elif family == "qwen2_5_vl":
        fields.update(vision_depth=vision.depth, vision_hidden=vision.hidden_size, vision_heads=vision.num_heads,
                      vision_intermediate=vision.intermediate_size)
    else:
        fields.update(vision_depth=vision.num_hidden_layers, vision_hidden=vision.hidden_size,
                      vision_heads=vision.num_attention_heads, vision_intermediate=vision.intermediate_size,
                      image_height=vision.image_size, image_width=vision.image_size)
    return fields


def get_family(name: str):
    return LlavaFamily() if name == "llava" else QwenVLFamily(name)


def language_model(vlm):
    """The decoder stack of any supported backbone: has embed_tokens, layers, norm, rotary_emb."""
    return vlm.language_model
