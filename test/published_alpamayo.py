"""Tiny Alpamayo 1 (R1) and 1.5 checkpoints laid out as the releases lay them out (config.json fields and
safetensors key names read from NVlabs/alpamayo and NVlabs/alpamayo1.5; written here at toy sizes, no code of
theirs): the module tree's names are produced by transformers' Qwen3-VL classes (as the releases build them) and
by a hand-written table of the action projections' names and shapes; sharded with an index, as released. The
backbone's config sits in a local folder named by `vlm_name_or_path` (the release names a hub repository)."""

import json

import torch
from safetensors.torch import save_file

BASE_VOCAB = 300                       # the tiny "Qwen tokenizer"; <i0> is id 300 (traj_token_start_idx)
VISION_START, VISION_END, IMAGE_PAD, VIDEO_PAD = 290, 291, 292, 293
TRAJ_VOCAB, FUTURE_BINS, HIST_BINS = 40, 24, 16
SPECIAL_KEYS = ("prompt_start", "prompt_end", "image_start", "image_pre_tkn", "image_end", "traj_history_start",
                "traj_history_pre_tkn", "traj_history_end", "cot_start", "cot_end", "meta_action_start",
                "meta_action_end", "traj_future_start", "traj_future_pre_tkn", "traj_future_end", "traj_history",
                "traj_future", "image_pad", "vectorized_wm", "vectorized_wm_start", "vectorized_wm_end",
                "vectorized_wm_pre_tkn", "route_start", "route_pad", "route_end", "question_start", "question_end",
                "answer_start", "answer_end")
SPECIAL = {k: BASE_VOCAB + TRAJ_VOCAB + i for i, k in enumerate(SPECIAL_KEYS)}
VOCAB = BASE_VOCAB + TRAJ_VOCAB + len(SPECIAL_KEYS)
WAYPOINTS, FOURIER, IN_HIDDEN, ENC_LAYERS = 16, 8, 32, 2
TEXT = dict(hidden_size=64, num_hidden_layers=4, num_attention_heads=4, num_key_value_heads=2, head_dim=16,
            intermediate_size=128, vocab_size=VOCAB, rms_norm_eps=1e-6, max_position_embeddings=4096,
            rope_parameters={"rope_type": "default", "rope_theta": 5_000_000.0, "mrope_interleaved": True,
                             "mrope_section": [4, 2, 2]})
VISION = dict(depth=2, hidden_size=32, intermediate_size=64, num_heads=2, patch_size=16, spatial_merge_size=2,
              temporal_patch_size=2, out_hidden_size=64, num_position_embeddings=2304, deepstack_visual_indexes=[0])
EXPERT = {"hidden_size": 48, "intermediate_size": 96}   # expert_cfg: overrides of the VLM's text config
STATS = dict(accel_mean=0.02902694707164455, accel_std=0.6810426736454882, curvature_mean=0.0002692167976330542,
             curvature_std=0.026148280660833106)   # the released action-space statistics


def release_config(model_type: str) -> dict:
    ids = {k.replace("traj_", ""): SPECIAL[k] for k in ("traj_history", "traj_future", "traj_history_start",
                                                          "traj_future_start", "traj_history_end", "traj_future_end")}
    r1 = model_type == "alpamayo_r1"
    pkg = "alpamayo_r1" if r1 else "alpamayo1_5"
    config = {
        "model_type": model_type, "architectures": ["AlpamayoR1" if r1 else "Alpamayo1_5"],
        "vlm_name_or_path": "vlm", "vlm_backend": "qwenvl3", "model_dtype": "float32",
        "attn_implementation": "sdpa", "min_pixels": 163840, "max_pixels": 196608, "add_special_tokens": True,
        "traj_vocab_size": TRAJ_VOCAB, "tokens_per_history_traj": 48, "tokens_per_future_traj": 64,
        "vocab_size": VOCAB, "traj_token_start_idx": BASE_VOCAB, "traj_token_ids": ids,
        "traj_tokenizer_cfg": {"_target_": f"{pkg}.action_space.discrete_action_space.DiscreteTrajectoryTokenizer",
                               "num_bins": FUTURE_BINS, "dims_min": [-10, -10], "dims_max": [10, 10]},
        "hist_traj_tokenizer_cfg": {"_target_": f"{pkg}.models.delta_tokenizer.DeltaTrajectoryTokenizer",
                                    "num_bins": HIST_BINS},
        "expert_cfg": EXPERT, "keep_same_dtype": True, "expert_non_causal_attention": True,
        "action_space_cfg": {"_target_": f"{pkg}.action_space.UnicycleAccelCurvatureActionSpace",
                             "n_waypoints": WAYPOINTS, "dt": 0.1, **STATS},
        "diffusion_cfg": {"_target_": f"{pkg}.diffusion.flow_matching.FlowMatching", "int_method": "euler",
                          "num_inference_steps": 10},
        "action_in_proj_cfg": {"_target_": f"{pkg}.models.action_in_proj.PerWaypointActionInProjV2",
                               "num_enc_layers": ENC_LAYERS, "hidden_size": IN_HIDDEN, "max_freq": 100.0,
                               "num_fourier_feats": FOURIER},
        "action_out_proj_cfg": {"_target_": "torch.nn.Linear"}}
    if not r1:
        config.update(include_camera_ids=False, include_frame_nums=False)
    return config


def vlm_config():
    from transformers.models.qwen3_vl import Qwen3VLConfig
    return Qwen3VLConfig(text_config=TEXT, vision_config=VISION, image_token_id=IMAGE_PAD, video_token_id=VIDEO_PAD,
                         vision_start_token_id=VISION_START, vision_end_token_id=VISION_END)


def _prefixed(prefix: str, state: dict) -> dict:
    return {prefix + k: v.detach().clone().contiguous() for k, v in state.items()}


def action_tensors(r1: bool, gen: torch.Generator) -> dict:
    """action_in_proj (PerWaypointActionInProjV2: sinus.c / timestep_fourier_encoder freqs, encoder.trunk Linear
    at 0, 3, 6 and RMSNorm at 2, 5, LayerNorm norm), action_out_proj (Linear), action_space statistics."""
    width, hidden, out = FOURIER * 3, IN_HIDDEN, EXPERT["hidden_size"]
    shapes = {"encoder.trunk.0.weight": (hidden, width), "encoder.trunk.0.bias": (hidden,),
              "encoder.trunk.2.weight": (hidden,), "encoder.trunk.3.weight": (hidden, hidden),
              "encoder.trunk.3.bias": (hidden,), "encoder.trunk.5.weight": (hidden,),
              "encoder.trunk.6.weight": (out, hidden), "encoder.trunk.6.bias": (out,),
              "norm.weight": (out,), "norm.bias": (out,)}
    state = {"action_in_proj." + k: torch.randn(s, generator=gen) * (0.3 if len(s) == 2 else 0.05)
             for k, s in shapes.items()}
    for key in ("encoder.trunk.2.weight", "encoder.trunk.5.weight", "norm.weight"):
        state["action_in_proj." + key] += 1.0
    if r1:   # persistent in Alpamayo 1, non-persistent in 1.5
        freqs = torch.logspace(0, 2, steps=FOURIER // 2)[None, :]
        for key in ("sinus.0.freqs", "sinus.1.freqs", "timestep_fourier_encoder.freqs"):
            state["action_in_proj." + key] = freqs.clone()
    state["action_out_proj.weight"] = torch.randn(2, out, generator=gen) * 0.2
    state["action_out_proj.bias"] = torch.zeros(2)
    state.update({f"action_space.{k}": torch.tensor(v) for k, v in STATS.items()})
    return state


def release_tensors(model_type: str, seed: int = 0) -> dict:
    from transformers.models.qwen3_vl import Qwen3VLForConditionalGeneration
    from transformers.models.qwen3_vl.modeling_qwen3_vl import Qwen3VLTextModel
    torch.manual_seed(seed)
    vlm_cfg = vlm_config()
    vlm = Qwen3VLForConditionalGeneration(vlm_cfg)
    expert_cfg = vlm_cfg.text_config.__class__(**{**TEXT, **EXPERT})
    expert = Qwen3VLTextModel(expert_cfg)
    del expert.embed_tokens
    gen = torch.Generator().manual_seed(seed + 1)
    return {**_prefixed("vlm.", vlm.state_dict()), **_prefixed("expert.", expert.state_dict()),
            **action_tensors(model_type == "alpamayo_r1", gen)}


def write_release(directory, model_type: str = "alpamayo_r1", seed: int = 0, tensors: dict | None = None,
                  pixels: tuple[int, int] | None = None):
    """config.json, the backbone's config in vlm/, two safetensors shards and their index -> directory.
    pixels: the config's (min_pixels, max_pixels) in place of the releases' (a tiny release's own budget)."""
    directory.mkdir(parents=True, exist_ok=True)
    config = release_config(model_type)
    if pixels is not None:
        config["min_pixels"], config["max_pixels"] = pixels
    (directory / "config.json").write_text(json.dumps(config, indent=1))
    vlm_config().save_pretrained(directory / "vlm")
    tensors = release_tensors(model_type, seed) if tensors is None else tensors
    shards = {"model-00001-of-00002.safetensors": {k: v for k, v in tensors.items() if k.startswith("vlm.")},
              "model-00002-of-00002.safetensors": {k: v for k, v in tensors.items() if not k.startswith("vlm.")}}
    for name, part in shards.items():
        save_file(part, str(directory / name), metadata={"format": "pt"})
    index = {"metadata": {}, "weight_map": {k: n for n, part in shards.items() for k in part}}
    (directory / "model.safetensors.index.json").write_text(json.dumps(index))
    return directory


def release_inputs(route: bool = False, cameras: int = 4, frames: int = 4, seed: int = 0) -> dict:
    """The published inputs at toy size: 4 cameras x 4 frames of 32 x 32 px (2 x 2 patches of 16 px, one
    merged token each), the chat template's token layout, 16 history poses at 5 m/s straight ahead."""
    gen = torch.Generator().manual_seed(seed)
    images = cameras * frames
    ids = list(range(10, 22))                                                             # system text
    for _ in range(images):
        ids += [VISION_START, IMAGE_PAD, VISION_END]
    ids += [SPECIAL["traj_history_start"]] + [SPECIAL["traj_history"]] * 48 + [SPECIAL["traj_history_end"]]
    if route:
        ids += [SPECIAL["route_start"], 40, 41, 42, SPECIAL["route_end"]]
    ids += list(range(50, 60)) + [SPECIAL["cot_start"]]
    t = torch.arange(-15, 1, dtype=torch.float32) * 0.1                                  # (16,)
    xyz = torch.stack([5.0 * t, torch.zeros(16), torch.zeros(16)], -1)                   # (16, 3)
    return {"input_ids": torch.tensor([ids]), "image_grid_thw": torch.tensor([[1, 2, 2]] * images),
            "pixel_values": torch.randn(images * 4, 3 * 2 * 16 * 16, generator=gen),
            "ego_history_xyz": xyz.view(1, 1, 16, 3), "ego_history_rot": torch.eye(3).expand(1, 1, 16, 3, 3).clone()}
