"""Alpamayo 1 (R1) and 1.5 at unit-test size, as named presets (`tiny-alpamayo-r1`, `tiny-alpamayo-1.5`): each
release's config.json fields (config.py) over a toy Qwen3-VL backbone, seeded weights, nothing read from disk.
The vocabulary is laid out as the releases' is: a base vocabulary shaped as Qwen3's (here 256 byte tokens, then
Qwen3's 26 added tokens in their order, <|image_pad|> among them), then <i0> .. <i39>, then the 28 specials that
add_special_tokens adds (<|image_pad|> is a base token already). `hybrid-vla verify --preset tiny-alpamayo-1.5`
checks the split (engine/expert_split) against the unsplit reference at every cut."""

from __future__ import annotations

import torch

from ....errors import ConfigError, expect
from ...presets import ALPAMAYO_PRESETS as PRESETS
from .config import SPECIAL_KEYS, TRAJ_TOKENS, parse
from .release import build

SEED = 0
BYTE_TOKENS = 256
# Qwen3's added tokens (ids 151643 .. 151668 in Qwen3-VL-8B-Instruct's tokenizer), in their order
QWEN_ADDED = ("<|endoftext|>", "<|im_start|>", "<|im_end|>", "<|object_ref_start|>", "<|object_ref_end|>",
              "<|box_start|>", "<|box_end|>", "<|quad_start|>", "<|quad_end|>", "<|vision_start|>", "<|vision_end|>",
              "<|vision_pad|>", "<|image_pad|>", "<|video_pad|>", "<tool_call>", "</tool_call>", "<|fim_prefix|>",
              "<|fim_middle|>", "<|fim_suffix|>", "<|fim_pad|>", "<|repo_name|>", "<|file_sep|>", "<tool_response>",
              "</tool_response>", "<think>", "</think>")
BASE_VOCAB = BYTE_TOKENS + len(QWEN_ADDED)
FUTURE_BINS, HISTORY_BINS = 24, 16
TRAJ_VOCAB = FUTURE_BINS + HISTORY_BINS
ADDED_SPECIALS = len(SPECIAL_KEYS) - 1          # <|image_pad|> is in the base vocabulary
TEXT = dict(hidden_size=64, num_hidden_layers=4, num_attention_heads=4, num_key_value_heads=2, head_dim=16,
            intermediate_size=128, rms_norm_eps=1e-6, max_position_embeddings=4096,
            rope_parameters={"rope_type": "default", "rope_theta": 5_000_000.0, "mrope_interleaved": True,
                             "mrope_section": [4, 2, 2]})
VISION = dict(depth=2, hidden_size=32, intermediate_size=64, num_heads=2, patch_size=16, spatial_merge_size=2,
              temporal_patch_size=2, out_hidden_size=64, num_position_embeddings=2304, deepstack_visual_indexes=[0, 1])


def base_id(token: str) -> int:
    """A Qwen3 added token's id in the base vocabulary."""
    return BYTE_TOKENS + QWEN_ADDED.index(token)


def raw_config(name: str) -> dict:
    """The preset's config.json fields, as a release saves them."""
    expect(name in PRESETS, ConfigError, f"unknown Alpamayo preset '{name}'; known: {sorted(PRESETS)}")
    first = BASE_VOCAB + TRAJ_VOCAB
    special = {k: first + i for i, k in enumerate(k for k in SPECIAL_KEYS if k != "image_pad")}
    return {"model_type": PRESETS[name], "vlm_name_or_path": "vlm", "add_special_tokens": True,
            "traj_vocab_size": TRAJ_VOCAB, "vocab_size": first + ADDED_SPECIALS, "traj_token_start_idx": BASE_VOCAB,
            "traj_token_ids": {k: special["traj_" + k] for k in TRAJ_TOKENS},
            "traj_tokenizer_cfg": {"num_bins": FUTURE_BINS}, "hist_traj_tokenizer_cfg": {"num_bins": HISTORY_BINS},
            "expert_cfg": {"hidden_size": 48, "intermediate_size": 96}, "expert_non_causal_attention": True,
            "action_space_cfg": {"n_waypoints": 64, "dt": 0.1}, "diffusion_cfg": {"num_inference_steps": 10},
            "action_in_proj_cfg": {"num_enc_layers": 2, "hidden_size": 32, "max_freq": 100.0,
                                   "num_fourier_feats": 8}}


def backbone_config():
    """The toy Qwen3-VL backbone, its vision tokens at their base-vocabulary ids."""
    from transformers.models.qwen3_vl import Qwen3VLConfig
    return Qwen3VLConfig(text_config=dict(TEXT, vocab_size=BASE_VOCAB), vision_config=VISION,
                         image_token_id=base_id("<|image_pad|>"), video_token_id=base_id("<|video_pad|>"),
                         vision_start_token_id=base_id("<|vision_start|>"),
                         vision_end_token_id=base_id("<|vision_end|>"))


def build_preset(name: str, dtype: torch.dtype = torch.float32, shapes_only: bool = False):
    """The preset's AlpamayoModel: seeded weights (the same on every call), or on the meta device."""
    config = parse(raw_config(name), None, vlm=backbone_config())
    if shapes_only:
        model = build(config)
    else:
        with torch.random.fork_rng(devices=[]):
            torch.manual_seed(SEED)
            model = build(config, meta=False).to(dtype)
    model.preset_name, model.checkpoint_directory = name, None      # no directory: nothing to read, no prompt_ids.json
    return model.eval()
