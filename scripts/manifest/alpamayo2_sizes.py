"""The configs scripts/manifest/alpamayo2.py builds the authors' Alpamayo 2 Super classes from: the arguments of
their Alpamayo2SuperConfig (NVlabs/alpamayo2 @beb2977, src/alpamayo2_super/config.py) and the backbone's config.json,
which their config reads from vlm_name_or_path (AutoConfig.from_pretrained) before it pads the vocabulary.

Released (nvidia/Alpamayo2-Super; its config.json is gated, not read here): the backbone has Qwen3-VL-32B's shapes
as third parties read them (64 blocks of 5120, 64 heads of 128, 8 KV heads, MLP 25600; vision 27 x 1152,
DeepStack [8, 16, 24]); the expert's llm_config is that text config with hidden 1536, MLP 6144 and 16 heads (ports'
reads); history / future vocabularies 1000 / 3000, 48 history tokens and 128 future tokens at the config's
defaults; the tokenizer's base length 151669 (Qwen3-VL's, <i0>'s id as ports quote it). A released manifest checks
that the authors' module tree and the package's preset give the same shapes for one config, not that these are
the released numbers. The trajectory tokenizers hold no tensors.
Tiny: toy sizes of the same fields."""

from __future__ import annotations

from alpamayo_sizes import STATS, TINY_VLM

QWEN3_VL_32B = {
    "architectures": ["Qwen3VLForConditionalGeneration"],
    "text_config": dict(vocab_size=151936, hidden_size=5120, intermediate_size=25600, num_hidden_layers=64,
                        num_attention_heads=64, num_key_value_heads=8, head_dim=128, rms_norm_eps=1e-6,
                        max_position_embeddings=262144, rope_theta=5_000_000.0, tie_word_embeddings=False,
                        rope_scaling={"rope_type": "default", "mrope_section": [24, 20, 20],
                                      "mrope_interleaved": True}),
    "vision_config": dict(depth=27, hidden_size=1152, intermediate_size=4304, num_heads=16, patch_size=16,
                          spatial_merge_size=2, temporal_patch_size=2, out_hidden_size=5120,
                          num_position_embeddings=2304, deepstack_visual_indexes=[8, 16, 24]),
    "image_token_id": 151655, "video_token_id": 151656, "vision_start_token_id": 151652,
    "vision_end_token_id": 151653, "tie_word_embeddings": False}

RELEASED = {"vlm": QWEN3_VL_32B, "tokenizer_base": 151669,
            "release": dict(vlm_name_or_path="Qwen/Qwen3-VL-32B-Instruct", history_vocab_size=1000,
                            future_vocab_size=3000, dtype="bfloat16",
                            expert={"hidden_size": 1536, "intermediate_size": 6144, "num_attention_heads": 16},
                            n_waypoints=64, in_proj={"num_enc_layers": 4, "hidden_size": 1024, "max_freq": 100.0,
                                                     "num_fourier_feats": 20})}
TINY = {"vlm": {"architectures": ["Qwen3VLForConditionalGeneration"], **TINY_VLM}, "tokenizer_base": 300,
        "release": dict(vlm_name_or_path="vlm", history_vocab_size=16, future_vocab_size=24, dtype="float32",
                        expert={"hidden_size": 48, "intermediate_size": 96, "num_attention_heads": 4},
                        n_waypoints=16, in_proj={"num_enc_layers": 2, "hidden_size": 32, "max_freq": 100.0,
                                                 "num_fourier_feats": 8})}


def release_kwargs(tiny: bool) -> dict:
    """Alpamayo2SuperConfig's arguments (hydra `_target_`s in the package's names); the expert's llm_config is the
    backbone's text config with the expert's sizes (their ExpertModelConfig over AutoConfig.for_model)."""
    sizes = TINY if tiny else RELEASED
    r, pkg = sizes["release"], "alpamayo2_super"
    space = {"_target_": f"{pkg}.action_space.UnicycleAccelCurvatureActionSpace", "n_waypoints": r["n_waypoints"],
             "dt": 0.1, **STATS}
    llm = {"model_type": "qwen3_vl_text", **sizes["vlm"]["text_config"], **r["expert"]}
    expert = {"llm_config": llm, "action_space_cfg": space,
              "diffusion_cfg": {"_target_": f"{pkg}.diffusion.flow_matching.FlowMatching", "int_method": "euler",
                                "num_inference_steps": 10},
              "action_in_proj_cfg": {"_target_": f"{pkg}.models.action_in_proj.PerWaypointActionInProjV2",
                                     **r["in_proj"]},
              "action_out_proj_cfg": {"_target_": "torch.nn.Linear"}, "expert_non_causal_attention": True}
    history = {"_target_": f"{pkg}.models.delta_tokenizer.DeltaTrajectoryTokenizer",
               "num_bins": r["history_vocab_size"]}
    future = {"_target_": f"{pkg}.action_space.discrete_action_space.DiscreteTrajectoryTokenizer",
              "_recursive_": False, "action_space_cfg": space, "num_bins": r["future_vocab_size"],
              "dims_min": [-10.0, -10.0], "dims_max": [10.0, 10.0]}
    return dict(vlm_name_or_path=r["vlm_name_or_path"], history_vocab_size=r["history_vocab_size"],
                future_vocab_size=r["future_vocab_size"], dtype=r["dtype"], hist_traj_tokenizer_cfg=history,
                future_traj_tokenizer_cfg=future, expert_config=expert)
