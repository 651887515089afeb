"""A reduced Alpamayo 1.5 built from a config (seeded weights, nothing read from disk): Qwen3-VL with 8 blocks of
hidden 512 (the released 36 x 4096), DeepStack after blocks 0-2, a 256-wide expert (2048), 64 waypoints, and one
frame of 4 cameras x 4 frames of 64 x 64 px (4 tokens each): what the split's benchmarks run."""

from __future__ import annotations

import tempfile
from pathlib import Path

import torch

from ...model.plugins.alpamayo.config import SPECIAL_KEYS, parse
from ...model.plugins.alpamayo.reference import AlpamayoInputs
from ...model.plugins.alpamayo.release import build

BASE_VOCAB, TRAJ_VOCAB, BINS = 4096, 1000, 500
VISION_START, VISION_END, IMAGE_PAD, VIDEO_PAD = 4090, 4091, 4092, 4093
SPECIAL = {k: BASE_VOCAB + TRAJ_VOCAB + i for i, k in enumerate(SPECIAL_KEYS)}
TEXT = dict(hidden_size=512, num_hidden_layers=8, num_attention_heads=8, num_key_value_heads=4, head_dim=64,
            intermediate_size=1536, vocab_size=BASE_VOCAB + TRAJ_VOCAB + len(SPECIAL_KEYS), rms_norm_eps=1e-6,
            max_position_embeddings=8192, rope_parameters={"rope_type": "default", "rope_theta": 5_000_000.0,
                                                           "mrope_interleaved": True, "mrope_section": [12, 10, 10]})
VISION = dict(depth=4, hidden_size=256, intermediate_size=512, num_heads=4, patch_size=16, spatial_merge_size=2,
              temporal_patch_size=2, out_hidden_size=512, num_position_embeddings=2304,
              deepstack_visual_indexes=[1, 2, 3])


def reduced_config() -> dict:
    """An alpamayo1_5 config.json at reduced size (the fields the release saves)."""
    ids = {k.replace("traj_", ""): SPECIAL[k] for k in ("traj_history", "traj_future", "traj_history_start",
                                                          "traj_future_start", "traj_history_end", "traj_future_end")}
    return {"model_type": "alpamayo1_5", "vlm_name_or_path": "vlm", "add_special_tokens": True,
            "traj_vocab_size": TRAJ_VOCAB, "vocab_size": TEXT["vocab_size"], "traj_token_start_idx": BASE_VOCAB,
            "traj_token_ids": ids, "traj_tokenizer_cfg": {"num_bins": BINS},
            "hist_traj_tokenizer_cfg": {"num_bins": BINS},
            "expert_cfg": {"hidden_size": 256, "intermediate_size": 768, "num_attention_heads": 4},
            "action_space_cfg": {"n_waypoints": 64, "dt": 0.1}, "diffusion_cfg": {"num_inference_steps": 10},
            "action_in_proj_cfg": {"num_enc_layers": 4, "hidden_size": 256, "max_freq": 100.0, "num_fourier_feats": 20}}


def reduced_model(seed: int = 0):
    from transformers.models.qwen3_vl import Qwen3VLConfig
    with tempfile.TemporaryDirectory() as tmp:
        Qwen3VLConfig(text_config=TEXT, vision_config=VISION, image_token_id=IMAGE_PAD, video_token_id=VIDEO_PAD,
                      vision_start_token_id=VISION_START, vision_end_token_id=VISION_END).save_pretrained(
            Path(tmp) / "vlm")
        config = parse(reduced_config(), Path(tmp))
    torch.manual_seed(seed)
    return build(config, meta=False).eval()


def reduced_inputs(route: bool = True, seed: int = 0, grid: tuple[int, int] = (4, 4),
                   pixel_rows: torch.Tensor | None = None) -> AlpamayoInputs:
    """16 images (default 4 x 4 patches of 16 px -> 4 tokens; `grid` patches each), 48 history pads, a route span,
    16 poses at 5 m/s. pixel_rows: the images' patch rows (16 * gh * gw, 1536); default seeded noise."""
    gen = torch.Generator().manual_seed(seed)
    gh, gw = grid
    ids = list(range(10, 30))
    for _ in range(16):
        ids += [VISION_START] + [IMAGE_PAD] * (gh * gw // 4) + [VISION_END]
    ids += [SPECIAL["traj_history_start"]] + [SPECIAL["traj_history"]] * 48 + [SPECIAL["traj_history_end"]]
    ids += [SPECIAL["route_start"], 40, 41, 42, SPECIAL["route_end"]] if route else []
    ids += list(range(50, 60)) + [SPECIAL["cot_start"]]
    t = torch.arange(-15, 1, dtype=torch.float32) * 0.1                                       # (16,)
    xyz = torch.stack([5.0 * t, torch.zeros(16), torch.zeros(16)], -1)                        # (16, 3)
    rows = pixel_rows if pixel_rows is not None else torch.randn(16 * gh * gw, 3 * 2 * 16 * 16, generator=gen) * 0.5
    return AlpamayoInputs(torch.tensor([ids]), rows, torch.tensor([[1, gh, gw]] * 16), xyz.view(1, 1, 16, 3),
                          torch.eye(3).expand(1, 1, 16, 3, 3).clone())
