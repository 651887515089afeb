"""Qwen3-VL (`qwen3_vl`, the backbone of Alpamayo and OneVL): Qwen2-VL's prompt, patch layout and 3-row
positions (qwen2_vl.py) with three differences:

- the text RoPE interleaves the (temporal, height, width) frequencies ("interleaved M-RoPE"; the decoder's
  rotary module does it, so the blocks and the boundary are unchanged);
- the decoder blocks have per-head q/k RMSNorm (Qwen3);
- DeepStack: the ViT's features at `deepstack_visual_indexes` (one merger each) are added to the hidden state
  at the image tokens after decoder blocks 0 .. k-1. A cut at p < k hands the k - p additions still to come
  over with the boundary (types.DeepStack); a cut at p >= k carries none.
"""

from __future__ import annotations

import torch
from transformers.models.qwen3_vl import Qwen3VLConfig, Qwen3VLModel

from ...types import DeepStack
from .base import ATTN_IMPL, text_fields
from .qwen2_5_vl import Qwen2_5VLFamily
from .qwen2_vl import Qwen2VLFamily

POSITION_EMBEDDINGS = 2304  # the learned 48 x 48 position grid of every released Qwen3-VL ViT


def interleaved_mrope_section(head_dim: int) -> list[int]:
    """(temporal, height, width) frequency counts of half the head dim, in Qwen3-VL's proportions: [24, 20, 20]
    of 64; height and width take every third frequency from 1 and 2, the rest stays temporal."""
    half = head_dim // 2
    spatial = (half * 5) // 16
    return [half - 2 * spatial, spatial, spatial]


def deepstack_indexes(vision_depth: int, blocks: int) -> list[int]:
    """Which ViT layers feed DeepStack, spread over the depth (a checkpoint keeps its own list)."""
    return [(i + 1) * vision_depth // (blocks + 1) for i in range(blocks)]


class Qwen3VLFamily(Qwen2VLFamily):
    name = "qwen3_vl"
    model_types = ("qwen3_vl",)
    config_class = Qwen3VLConfig
    max_deepstack = 8

    @property
    def model_class(self):
        return Qwen3VLModel

    def vision_config(self, spec) -> dict:
        """Qwen2.5-VL's vision fields without its windowed attention, plus the position grid and DeepStack."""
        fields = Qwen2_5VLFamily.vision_config(self, spec)
        for windowed in ("window_size", "fullatt_block_indexes"):
            del fields[windowed]
        return dict(fields, num_position_embeddings=POSITION_EMBEDDINGS,
                    deepstack_visual_indexes=deepstack_indexes(spec.vision_depth, spec.deepstack_blocks))

    def build_config(self, spec):
        head_dim = spec.attention_head_dim
        rope = {"rope_type": "default", "rope_theta": 5_000_000.0, "mrope_interleaved": True,
                "mrope_section": interleaved_mrope_section(head_dim)}
        text = dict(text_fields(spec), head_dim=head_dim, rope_parameters=rope)
        return self.config_class(text_config=text, vision_config=self.vision_config(spec),
                                 image_token_id=self.special_token_fields["image_token_id"],
                                 video_token_id=self.special_token_fields["video_token_id"],
                                 vision_start_token_id=self.special_token_fields["vision_start_token_id"],
                                 vision_end_token_id=self.special_token_fields["vision_end_token_id"],
                                 attn_implementation=ATTN_IMPL)

    def vision_spec_fields(self, config) -> dict:
        return dict(Qwen2_5VLFamily.vision_spec_fields(self, config),
                    deepstack_blocks=len(config.vision_config.deepstack_visual_indexes))

    def deepstack_blocks(self, config) -> int:
        return len(config.vision_config.deepstack_visual_indexes)

    def image_features_and_deepstack(self, vlm, pixels: dict) -> tuple[torch.Tensor, list[torch.Tensor]]:
        """-> (N * tokens_per_camera, hidden) and one (N * tokens_per_camera, hidden) addition per DeepStack block."""
        out = vlm.get_image_features(pixels["pixel_values"], pixels["image_grid_thw"])
        main = torch.cat(list(out.pooler_output), dim=0)
        return main, [torch.cat(list(per_layer), dim=0) for per_layer in out.deepstack_features]

    def image_features(self, vlm, pixels: dict) -> torch.Tensor:
        return self.image_features_and_deepstack(vlm, pixels)[0]

    def deepstack(self, image_mask: torch.Tensor, additions: list[torch.Tensor]) -> DeepStack | None:
        """image_mask (1, S) bool of the image tokens -> the frame's DeepStack from block 0 (None without any)."""
        if not additions:
            return None
        positions = image_mask[0].nonzero().squeeze(-1)                                 # (n,)
        return DeepStack(positions, torch.stack(additions), 0)                          # (k, n, H)
