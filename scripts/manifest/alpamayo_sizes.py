"""The configs scripts/manifest/alpamayo.py builds the authors' Alpamayo classes from: the arguments of their config
class (AlpamayoR1Config / Alpamayo1_5Config over ReasoningVLAConfig) and the backbone's Qwen3VLConfig.

Released (nvidia/Alpamayo-R1-10B, Alpamayo-1.5-10B; their config.json is gated, not read here): the backbone is
Qwen/Qwen3-VL-8B-Instruct (the code's default vlm_name_or_path) with its published shapes; traj_vocab_size 4000 and
tokens_per_history_traj 48 as the authors' RL configs give them (finetune/rl/hydra_configs/alpamayo1_rvla_rl_pai.yaml
L33-34); the tokenizer's base length 151669 (<i0>'s id as third-party ports give it, docs/ALPAMAYO.md); the
action space's statistics (docs/ALPAMAYO.md); action_in_proj and flow matching at the code's defaults. The expert's
sizes are ESTIMATES (docs/ALPAMAYO.md: hidden 2048 from a port, the rest chosen for the model card's 2.3B): a
released manifest checks that the authors' module tree and the package's give the same keys and shapes for one
config, not that these are the released numbers. The trajectory tokenizers hold no tensors.
Tiny: toy sizes of the same fields (those of test/published_alpamayo.py)."""

from __future__ import annotations

STATS = dict(accel_mean=0.02902694707164455, accel_std=0.6810426736454882, curvature_mean=0.0002692167976330542,
             curvature_std=0.026148280660833106)

QWEN3_VL_8B = {
    "text_config": dict(vocab_size=151936, hidden_size=4096, intermediate_size=12288, num_hidden_layers=36,
                        num_attention_heads=32, num_key_value_heads=8, head_dim=128, rms_norm_eps=1e-6,
                        max_position_embeddings=262144, rope_theta=5_000_000.0, tie_word_embeddings=False,
                        rope_scaling={"rope_type": "default", "mrope_section": [24, 20, 20],
                                      "mrope_interleaved": True}),
    "vision_config": dict(depth=27, hidden_size=1152, intermediate_size=4304, num_heads=16, patch_size=16,
                          spatial_merge_size=2, temporal_patch_size=2, out_hidden_size=4096,
                          num_position_embeddings=2304, deepstack_visual_indexes=[8, 16, 24]),
    "image_token_id": 151655, "video_token_id": 151656, "vision_start_token_id": 151652,
    "vision_end_token_id": 151653, "tie_word_embeddings": False}

TINY_VLM = {
    "text_config": dict(vocab_size=300, hidden_size=64, intermediate_size=128, num_hidden_layers=4,
                        num_attention_heads=4, num_key_value_heads=2, head_dim=16, rms_norm_eps=1e-6,
                        max_position_embeddings=4096, rope_theta=5_000_000.0, tie_word_embeddings=False,
                        rope_scaling={"rope_type": "default", "mrope_section": [4, 2, 2], "mrope_interleaved": True}),
    "vision_config": dict(depth=2, hidden_size=32, intermediate_size=64, num_heads=2, patch_size=16,
                          spatial_merge_size=2, temporal_patch_size=2, out_hidden_size=64,
                          num_position_embeddings=2304, deepstack_visual_indexes=[0]),
    "image_token_id": 292, "video_token_id": 293, "vision_start_token_id": 290, "vision_end_token_id": 291,
    "tie_word_embeddings": False}

RELEASED = {"vlm": QWEN3_VL_8B, "tokenizer_base": 151669,
            "release": dict(vlm_name_or_path="Qwen/Qwen3-VL-8B-Instruct", traj_vocab_size=4000,
                            tokens_per_history_traj=48, tokens_per_future_traj=64, traj_bins=1000, hist_bins=1000,
                            dims=10.0, min_pixels=163840, max_pixels=196608, model_dtype="bfloat16",
                            expert_cfg={"hidden_size": 2048, "intermediate_size": 8192, "num_attention_heads": 16},
                            n_waypoints=64, in_proj={"num_enc_layers": 4, "hidden_size": 1024, "max_freq": 100.0,
                                                     "num_fourier_feats": 20})}
TINY = {"vlm": TINY_VLM, "tokenizer_base": 300,
        "release": dict(vlm_name_or_path="vlm", traj_vocab_size=40, tokens_per_history_traj=48,
                        tokens_per_future_traj=64, traj_bins=24, hist_bins=16, dims=10.0, min_pixels=163840,
                        max_pixels=196608, model_dtype="float32",
                        expert_cfg={"hidden_size": 48, "intermediate_size": 96}, n_waypoints=16,
                        in_proj={"num_enc_layers": 2, "hidden_size": 32, "max_freq": 100.0, "num_fourier_feats": 8})}


def release_kwargs(model: str, tiny: bool) -> dict:
    """The authors' config class's arguments (hydra `_target_`s in their package's names)."""
    r = (TINY if tiny else RELEASED)["release"]
    pkg = model
    space = {"_target_": f"{pkg}.action_space.UnicycleAccelCurvatureActionSpace", "n_waypoints": r["n_waypoints"],
             "dt": 0.1, **STATS}
    kwargs = dict(
        vlm_name_or_path=r["vlm_name_or_path"], vlm_backend="qwenvl3", model_dtype=r["model_dtype"],
        attn_implementation="sdpa", min_pixels=r["min_pixels"], max_pixels=r["max_pixels"],
        add_special_tokens=True, traj_vocab_size=r["traj_vocab_size"],
        tokens_per_history_traj=r["tokens_per_history_traj"], tokens_per_future_traj=r["tokens_per_future_traj"],
        traj_tokenizer_cfg={"_target_": f"{pkg}.action_space.discrete_action_space.DiscreteTrajectoryTokenizer",
                            "_recursive_": False,   # it instantiates its action_space_cfg itself
                            "action_space_cfg": space, "num_bins": r["traj_bins"],
                            "dims_min": [-r["dims"]] * 2, "dims_max": [r["dims"]] * 2},
        hist_traj_tokenizer_cfg={"_target_": f"{pkg}.models.delta_tokenizer.DeltaTrajectoryTokenizer",
                                 "num_bins": r["hist_bins"]},
        expert_cfg=r["expert_cfg"], keep_same_dtype=True, expert_non_causal_attention=True,
        action_space_cfg=space,
        diffusion_cfg={"_target_": f"{pkg}.diffusion.flow_matching.FlowMatching", "int_method": "euler",
                       "num_inference_steps": 10},
        action_in_proj_cfg={"_target_": f"{pkg}.models.action_in_proj.PerWaypointActionInProjV2", **r["in_proj"]},
        action_out_proj_cfg={"_target_": "torch.nn.Linear"})
    if model == "alpamayo1_5":
        kwargs.update(include_camera_ids=False, include_frame_nums=False)
    return kwargs
