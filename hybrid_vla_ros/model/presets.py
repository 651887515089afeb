"""The named presets: VLASpecs of every family at unit-test, bench and real size (`hybrid-vla info` lists them).
A new family's presets go here (model/families/base.py)."""

from __future__ import annotations

from ..errors import ConfigError, expect
from .spec import VLASpec
from .tokenize.tokens import MIN_VOCAB

_TINY = dict(num_blocks=4, hidden_size=64, num_heads=4, num_kv_heads=2, intermediate_size=128,
             vision_depth=2, vision_hidden=32, vision_heads=2, vision_intermediate=64,
             image_height=56, image_width=56, num_cameras=2, text_tokens=12, head_hidden=32)

# tiny-scene: the MindDrive shape at toy size: a Qwen2 LLM fed 6 scene + 2 history tokens by the reference scene
# encoder (model/plugins/scene_encoders.py) over 2 cameras, with a memory of 3 past frames; two passes (decision,
# action) with LoRA adapters of their own; a GRU head reading the 2 query tokens of each pass.
_SCENE = dict(width=32, depth=1, heads=2, patch_size=14, scene_queries=6, history_queries=2, memory_frames=3)
_TINY_SCENE = dict({k: v for k, v in _TINY.items() if not k.startswith("vision_")},  # no vision tower
                   scene_encoder="query_scene", head="gru", query_tokens=2, lora_rank=4,
                   passes=[{"name": "decision", "instruction": "decide: keep lane, turn, stop", "adapter": "decision"},
                           {"name": "action", "adapter": "action"}],
                   scene_config={**_SCENE, "image_height": 56, "image_width": 56, "cameras": 2})

# The published planners' shapes at toy size (model/plugins/driving_heads.py), on tiny backbones of their families:
# ORION's command-chosen modes (LLaMA LLM, scene tokens, 6 steps), MindDrive's speed decision over 7 lm_head rows in
# the decision pass choosing among 7 planned modes, and its path per command (two passes, Qwen2), ReCogDrive's DDIM
# planner over the whole sequence (InternVL, 8 poses).
_GEOMETRY_SCENE = {**_TINY_SCENE["scene_config"], "geometry": True, "depth_bins": 4, "depth_max_m": 60.0}
_MINDDRIVE_PASSES = [{"name": "decision", "instruction": "What actions should the car be taking?",
                      "adapter": "decision_expert"}, {"name": "action", "adapter": "action_expert"}]
# ORION's perception front end as published, at toy size (model/plugins/orion_front/): EVA ViT (a window block and a
# global one; 14-px patches of 56 px images: 4 x 4 per camera) + PETR detection (8 scene, 12 + 6 propagated queries,
# 2 history) and map (8 scene, 18 lanes) heads, 6 decoder layers each: 8 + 2 + 1 + 8 = 19 tokens.
_ORION_FRONT = dict(image_height=56, image_width=56, cameras=2, embed_dims=32, num_heads=2, ffn_dims=64, num_layers=6,
                    depth_num=8, backbone=dict(embed_dim=32, depth=2, num_heads=2, patch_size=14, window_size=3,
                                               window_blocks=[0], pretrain_img_size=48),
                    det=dict(num_query=12, num_propagated=6, memory_len=12, topk_proposals=6, num_extra=8,
                             num_memory=2, scene_memory_len=8, qt_attn_bias=False, traj_num_cls=1),
                    map=dict(num_lane=18, num_lanes_one2one=6, num_extra=8, memory_len=12, topk_proposals=6))
_MINDDRIVE_FRONT = {**_ORION_FRONT, "det": {**_ORION_FRONT["det"], "fut_mode": 1, "use_pe": True,
                                           "motion_map_decoder": True}}
_MINDDRIVE_RELEASE_PASSES = [_MINDDRIVE_PASSES[0], {**_MINDDRIVE_PASSES[1], "instruction": (
    "Based on the above information, please provide a safe, executable, and reasonable planning trajectory for the "
    "ego car.")}]
# The published planners' settings, shared by the planner-only and the whole-release presets below.
_ORION_LLM = {"head": "orion_vae", "query_tokens": 1, "lora_rank": 0, "passes": [], "num_waypoints": 6}
_ORION_PLANNER = dict(family="scene_llama", vocab_size=MIN_VOCAB + 1, waypoint_dt_s=0.5, context=["cameras", "navigation"])
_MINDDRIVE_LLM = {"head": "minddrive_vae", "num_waypoints": 6, "lora_rank": 16}
_MINDDRIVE_PLANNER = dict(family="scene_qwen2", lora_alpha=16.0, lora_targets=["q_proj", "k_proj", "v_proj", "o_proj"],
                          vocab_size=MIN_VOCAB + 15, waypoint_dt_s=0.5, context=["cameras", "navigation"])
_MINDDRIVE_DECISION = {"decision_tokens": list(range(MIN_VOCAB, MIN_VOCAB + 7))}
_DRIVING_HEADS = {
    "tiny-orion": dict(family="scene_llama", **{**_TINY_SCENE, "head": "command_modes", "query_tokens": 1,
                                                "lora_rank": 0, "passes": [], "num_waypoints": 6,
                                                "scene_config": _GEOMETRY_SCENE}, context=["cameras", "navigation"],
                       notes="ORION's shape: patches with a 3D position encoding from lidar2img; one plan per route "
                             "command (6 modes), the frame's command picks"),
    "tiny-minddrive": dict(family="scene_qwen2", **{**_TINY_SCENE, "head": "meta_decision", "num_waypoints": 6,
                                                    "scene_config": _GEOMETRY_SCENE},
                           head_config={"decision_tokens": list(range(MIN_VOCAB, MIN_VOCAB + 7)), "path_points": 20},
                           context=["cameras", "navigation"],
                           notes="MindDrive's shape: a speed decision over 7 lm_head rows in the decision pass picks one "
                                 "of 7 planned modes; a 20-point path per route command"),
    # Their planners as published (model/plugins/vae_planners.py), keyed as their checkpoints: the VAE + GRU at
    # <waypoint_ego> (ORION: 32000 + 1 added token; its LoRA merged on conversion); MindDrive's speed decision, speed
    # and path branches, its two peft adapters (r 16, alpha 16, q/k/v/o) and 15 added tokens (7 speeds first).
    "tiny-orion-vae": dict(**_ORION_PLANNER, **{**_TINY_SCENE, **_ORION_LLM, "scene_config": _GEOMETRY_SCENE},
                           head_config={"seed": 3},
                           notes="ORION's VAE planner as published: 6 modes x 6 steps from <waypoint_ego>, the "
                                 "route command picks; a seeded latent"),
    "tiny-minddrive-vae": dict(**_MINDDRIVE_PLANNER, **{**_TINY_SCENE, **_MINDDRIVE_LLM,
                                                        "scene_config": _GEOMETRY_SCENE, "passes": _MINDDRIVE_PASSES},
                               head_config={**_MINDDRIVE_DECISION, "seed": 5},
                               notes="MindDrive's heads as published: a speed decision over 7 lm_head rows, 7 speed "
                                     "x 6 steps and 6 path x 20 points VAE branches, two peft adapters"),
    # A whole release at toy size, as orion.yaml / minddrive.yaml convert it (test/test_published_orion_minddrive.py):
    # ORION's front end (orion_front; MindDrive's det options, its 0.5B's) + LLM + published planner, the mappings'
    # head_config, passes and context at toy sizes.
    "tiny-orion-release": dict(**_ORION_PLANNER, **{**_TINY_SCENE, **_ORION_LLM, "scene_encoder": "orion_front",
                                                    "scene_config": _ORION_FRONT},
                               head_config={"seed": 0},
                               notes="ORION as released at toy size: its front end under its published keys (EVA "
                                     "ViT, PETR det + map heads, QT-Former history, can-bus token, streaming "
                                     "memory), the LLM and its VAE planner"),
    "tiny-minddrive-release": dict(**_MINDDRIVE_PLANNER, **{**_TINY_SCENE, **_MINDDRIVE_LLM,
                                                            "scene_encoder": "orion_front",
                                                            "scene_config": _MINDDRIVE_FRONT,
                                                            "passes": _MINDDRIVE_RELEASE_PASSES},
                                   head_config={**_MINDDRIVE_DECISION, "seed": 0},
                                   notes="MindDrive-0.5B as released at toy size: ORION's front end with its det "
                                         "options, the LLM with two peft adapters and its speed / path heads"),
    "tiny-recogdrive": dict(family="internvl", **{**_TINY, "image_width": 112, "num_cameras": 1}, tile_size=56,
                            head="ddim_planner",
                            head_config={"layers": 2, "heads": 2, "head_dim": 16, "output_dim": 48, "mlp_hidden": 64,
                                         "steps": 5, "train_steps": 100, "history_poses": 4, "seed": 7},
                            context=["pose", "history", "navigation"],
                            notes="ReCogDrive's planner at toy size (2 of its 16 DiT blocks, D 32), its front camera: 5 "
                                  "DDIM steps (eta 1, seeded) over the whole final sequence, command, ego status and "
                                  "4 poses"),
    "tiny-simlingo": dict(family="internvl", **{**_TINY, "image_width": 112, "num_cameras": 1, "head_hidden": 256},
                          tile_size=56, head="route_speed",
                          query_tokens=30, num_waypoints=10, waypoint_dt_s=0.25, query_embeddings=[20, 10],
                          head_config={"route_queries": 20, "route_hidden": [512, 256], "speed_hidden": [256]},
                          prompt_slots=[{"name": "target_point", "inputs": ["target_point", "goal_point"],
                                         "hidden": [256, 512]}], context=["navigation"],
                          notes="SimLingo's shape: 20 route + 10 speed learned queries, the target points through an "
                                "MLP into 2 slot tokens of the prompt"),
}

# bench: one frame costs a few hundred ms on one core here (see docs/BENCHMARKS.md).
_BENCH = dict(num_blocks=16, hidden_size=576, num_heads=9, num_kv_heads=3, intermediate_size=1536,
              vision_depth=2, vision_hidden=192, vision_heads=3, vision_intermediate=384,
              image_height=112, image_width=112, num_cameras=6, text_tokens=32, head_hidden=256)

_REAL_SCENE = dict(width=1024, depth=24, heads=16, patch_size=16, history_queries=16, memory_frames=16,
                   image_height=640, image_width=640, cameras=6)

# Alpamayo's expert_cfg (over the VLM's text config; KV heads and head_dim must stay the VLM's) and its
# action_in_proj_cfg (PerWaypointActionInProjV2), model/plugins/alpamayo/.
_ALPAMAYO_EXPERT = {"hidden_size": 2048, "intermediate_size": 8192, "num_attention_heads": 16}
_ALPAMAYO2_SUPER_EXPERT = {"hidden_size": 1536, "intermediate_size": 6144, "num_attention_heads": 16}
_ALPAMAYO_IN_PROJ = {"num_enc_layers": 4, "hidden_size": 1024, "max_freq": 100.0, "num_fourier_feats": 20}

_QWEN3_TINY = dict(patch_size=16, image_height=64, image_width=64, vision_depth=3, deepstack_blocks=2)

PRESETS: dict[str, VLASpec] = {
    "tiny": VLASpec(name="tiny", family="qwen2_vl", **_TINY,
                    notes="Qwen2-VL family (M-RoPE), unit-test size"),
    "tiny-qwen2.5": VLASpec(name="tiny-qwen2.5", family="qwen2_5_vl", **_TINY,
                            notes="Qwen2.5-VL family (MindDrive backbone family), unit-test size"),
    "tiny-llava": VLASpec(name="tiny-llava", family="llava", **{**_TINY, "image_height": 28, "image_width": 28},
                          notes="LLaVA family (CLIP + Llama, ORION backbone family), unit-test size"),
    # Qwen3-VL: 16-px patches (image sides: multiples of 32) and DeepStack into decoder blocks 0, 1 (of 4): the
    # cuts p = 0, 1 carry DeepStack additions over the boundary, p >= 2 none.
    "tiny-qwen3vl": VLASpec(name="tiny-qwen3vl", family="qwen3_vl", **{**_TINY, **_QWEN3_TINY},
                            notes="Qwen3-VL family (interleaved M-RoPE, DeepStack into 2 blocks), unit-test size"),
    "tiny-internvl": VLASpec(name="tiny-internvl", family="internvl", **{**_TINY, "image_width": 112}, tile_size=56,
                             notes="InternVL family (InternViT, pixel shuffle, Qwen2), 2 tiles/camera, unit-test size"),
    "tiny-scene": VLASpec(name="tiny-scene", family="scene_qwen2", **_TINY_SCENE,
                          notes="Qwen2 LLM + reference scene encoder with memory (ORION/MindDrive shape), GRU head "
                                "on 2 query tokens, unit-test size"),
    **{name: VLASpec(name=name, **fields) for name, fields in _DRIVING_HEADS.items()},
    "bench-scene": VLASpec(name="bench-scene", family="scene_qwen2",
                           **{k: v for k, v in _BENCH.items() if not k.startswith("vision_")},
                           scene_encoder="query_scene", head="gru", query_tokens=2, lora_rank=8,
                           scene_config={**_SCENE, "width": 192, "depth": 2, "heads": 3, "scene_queries": 96,
                                         "history_queries": 32, "memory_frames": 4, "image_height": 112,
                                         "image_width": 112, "cameras": 6},
                           passes=_TINY_SCENE["passes"],
                           notes="the MindDrive shape at bench size: 128 scene tokens from 6 cameras, two passes"),
    "bench": VLASpec(name="bench", family="qwen2_vl", **_BENCH,
                     notes="Qwen2-VL family, six cameras; a few hundred ms per frame on one core"),
    # A real-width slice: minddrive-like's decoder blocks and tokens (6 cameras of 224x392: 734) over 4 blocks
    # and bench's vision tower. Per-block costs, chunked prefill's GEMM shapes and stage balance as at real size.
    "bench-wide": VLASpec(name="bench-wide", family="qwen2_5_vl", **{**_BENCH, "num_blocks": 4, "hidden_size": 2048,
                          "num_heads": 16, "num_kv_heads": 2, "intermediate_size": 11008, "image_height": 224,
                          "image_width": 392}, notes="minddrive-like's block width and 734 tokens over 4 blocks"),
    "bench-llava": VLASpec(name="bench-llava", family="llava",
                           **{**_BENCH, "image_height": 56, "image_width": 56},
                           notes="LLaVA family at bench size"),
    "bench-internvl": VLASpec(name="bench-internvl", family="internvl", **{**_BENCH, "image_width": 224},
                              tile_size=112, notes="InternVL family at bench size, 2 tiles per camera"),
    # history-bench: Alpamayo's window on the waypoint path at bench size: 4 cameras x their last 4 frames (16 images a
    # window, 64 tokens each), for the encode-once / streaming-KV bench (issue 53). Not Alpamayo's classes.
    "history-bench": VLASpec(name="history-bench", family="qwen2_vl", **{**_BENCH, "num_cameras": 4,
                             "image_height": 224, "image_width": 224}, frames_per_camera=4,
                             notes="bench size, 4 cameras x last 4 frames (16 images a window), waypoint head"),
    # drive: the model `hybrid-vla train` trains on synthetic road drives (the front camera).
    "drive": VLASpec(name="drive", family="qwen2_vl", num_blocks=4, hidden_size=128, num_heads=4, num_kv_heads=2,
                     intermediate_size=256, vision_depth=2, vision_hidden=64, vision_heads=2, vision_intermediate=128,
                     image_height=112, image_width=112, num_cameras=1, text_tokens=8, head_hidden=128,
                     notes="Qwen2-VL family, one front camera: trained on synthetic road drives (hybrid-vla train)"),
    # drive-history: drive reading the last 4 frames of its camera, 0.2 s apart (0.6 s of motion: a lead's closing
    # speed), the same recipe (hybrid-vla train --preset drive-history).
    "drive-history": VLASpec(name="drive-history", family="qwen2_vl", num_blocks=4, hidden_size=128, num_heads=4,
                             num_kv_heads=2, intermediate_size=256, vision_depth=2, vision_hidden=64, vision_heads=2,
                             vision_intermediate=128, image_height=112, image_width=112, num_cameras=1,
                             frames_per_camera=4, frame_stride=2, text_tokens=8, head_hidden=128,
                             notes="drive with its history: the front camera's last 4 frames, 0.2 s apart"),
    # drive-delay: drive told its expected capture-to-effect delay, planning from where the car will be then (issue
    # 54; learn/delays.py): the same recipe with delays drawn in 0..1 s (hybrid-vla train --preset drive-delay).
    "drive-delay": VLASpec(name="drive-delay", family="qwen2_vl", num_blocks=4, hidden_size=128, num_heads=4,
                           num_kv_heads=2, intermediate_size=256, vision_depth=2, vision_hidden=64, vision_heads=2,
                           vision_intermediate=128, image_height=112, image_width=112, num_cameras=1, text_tokens=8,
                           head_hidden=128, delay_aware=True,
                           notes="drive, told its expected delay: plans from the pose the car reaches after it"),
    # Action tokens (engine/actionflow/packing.py): each waypoint step's x, y decoded as tokens.
    "tiny-act": VLASpec(name="tiny-act", family="qwen2_vl", **{**_TINY, "num_waypoints": 4}, action_head="tokens",
                        vocab_size=MIN_VOCAB + 256, notes="Qwen2-VL family, action tokens (8 per frame), unit-test size"),
    "tiny-llava-act": VLASpec(name="tiny-llava-act", family="llava",
                              **{**_TINY, "image_height": 28, "image_width": 28, "num_waypoints": 4},
                              action_head="tokens", vocab_size=MIN_VOCAB + 256,
                              notes="LLaVA family, action tokens (8 per frame), unit-test size"),
    "tiny-qwen3vl-act": VLASpec(name="tiny-qwen3vl-act", family="qwen3_vl",
                                **{**_TINY, **_QWEN3_TINY, "num_waypoints": 4}, action_head="tokens",
                                vocab_size=MIN_VOCAB + 256,
                                notes="Qwen3-VL family (DeepStack into 2 blocks), action tokens (8 per frame)"),
    # bench-act: a short prompt (one camera) and 16 action tokens, so decode steps dominate a frame's time.
    "bench-act": VLASpec(name="bench-act", family="qwen2_vl", **{**_BENCH, "num_cameras": 1, "text_tokens": 16},
                         action_head="tokens", vocab_size=MIN_VOCAB + 256,
                         notes="Qwen2-VL family, one camera, 16 action tokens per frame: decode-bound"),
    # Real size: materialised on demand, side by side (model/seeded.py); `hybrid-vla info` from the shapes.
    "orion-like": VLASpec(name="orion-like", family="llava", num_blocks=32, hidden_size=4096, num_heads=32,
                          num_kv_heads=32, intermediate_size=11008, vocab_size=32064, vision_depth=24,
                          vision_hidden=1024, vision_heads=16, vision_intermediate=4096,
                          image_height=336, image_width=336, num_cameras=6, text_tokens=32,
                          head_hidden=1024, num_waypoints=6, real_size=True,
                          notes="LLaVA-7B shapes (CLIP ViT-L/14-336 + 32 x 4096 Llama blocks), like ORION"),
    "alpamayo-like": VLASpec(name="alpamayo-like", family="qwen3_vl", num_blocks=36, hidden_size=4096, num_heads=32,
                             num_kv_heads=8, intermediate_size=12288, vocab_size=151936, vision_depth=27,
                             vision_hidden=1152, vision_heads=16, vision_intermediate=4304, patch_size=16,
                             deepstack_blocks=3, image_height=320, image_width=576, num_cameras=16, text_tokens=32,
                             head_hidden=1024, num_waypoints=6, real_size=True,
                             notes="Qwen3-VL-8B shapes, 4 cameras x 4 frames of 320 x 576 (2880 image tokens), "
                                   "like Alpamayo 1"),
    # Alpamayo 1 as released: the VLM above (vocab: Qwen's 151669 + 4000 <iN> + 28 added special tokens, of the 29
    # listed: <|image_pad|> is Qwen's own) and its flow-matching expert as the head (model/plugins/alpamayo/head.py):
    # expert_cfg over the VLM's text config,
    # 64 (acceleration, curvature) steps of 0.1 s. Expert sizes: hidden 2048 as third-party ports read it, the rest
    # fitted to the model card's 2.3B (the released config.json is gated); docs/CHECKPOINTS.md.
    "alpamayo-r1-like": VLASpec(name="alpamayo-r1-like", family="qwen3_vl", num_blocks=36, hidden_size=4096,
                                num_heads=32, num_kv_heads=8, intermediate_size=12288, vocab_size=155697,
                                vision_depth=27, vision_hidden=1152, vision_heads=16, vision_intermediate=4304,
                                patch_size=16, deepstack_blocks=3, image_height=320, image_width=576,
                                num_cameras=16, text_tokens=128, head="alpamayo_expert",
                                head_config={"expert": _ALPAMAYO_EXPERT, "in_proj": _ALPAMAYO_IN_PROJ},
                                num_waypoints=64, waypoint_dt_s=0.1, real_size=True,
                                notes="Alpamayo 1 shapes: Qwen3-VL-8B (4 cameras x 4 frames, 48 history tokens) "
                                      "+ a 2.3B flow-matching expert over its per-layer KV"),
    # Alpamayo 2 Super (NVlabs/alpamayo2 @beb2977, read through its lucamodica/alpamayo2 mirror): a Qwen3-VL-32B VLM (64
    # blocks of hidden 5120, 64 heads of 128, 8 KV heads, MLP 25600: third-party reads of its config; the release's
    # config.json is gated) over 6 cameras x 4 frames inside the processor's pixel budget (163840..196608 px: 320 x
    # 576 gives 180 tokens an image), and a 2.3B flow-matching expert (hidden 1536, MLP 6144, 16 heads of 128 over the
    # VLM's 64 per-layer caches); vocabulary 151669 + 4000 <iN> + 29 special tokens, padded to a multiple of 128.
    "alpamayo2-super-like": VLASpec(name="alpamayo2-super-like", family="qwen3_vl", num_blocks=64, hidden_size=5120,
                                    num_heads=64, num_kv_heads=8, head_dim=128, intermediate_size=25600,
                                    vocab_size=155776, vision_depth=27, vision_hidden=1152, vision_heads=16,
                                    vision_intermediate=4304, patch_size=16, deepstack_blocks=3, image_height=320,
                                    image_width=576, num_cameras=24, text_tokens=128, head="alpamayo_expert",
                                    head_config={"expert": _ALPAMAYO2_SUPER_EXPERT, "in_proj": _ALPAMAYO_IN_PROJ},
                                    num_waypoints=64, waypoint_dt_s=0.1, real_size=True,
                                    notes="Alpamayo 2 Super shapes: Qwen3-VL-32B (6 cameras x 4 frames) + a 2.3B "
                                          "flow-matching expert over its per-layer KV"),
    "minddrive-like": VLASpec(name="minddrive-like", family="qwen2_5_vl", num_blocks=36, hidden_size=2048,
                              num_heads=16, num_kv_heads=2, intermediate_size=11008, vocab_size=151936,
                              vision_depth=32, vision_hidden=1280, vision_heads=16, vision_intermediate=3420,
                              image_height=224, image_width=392, num_cameras=6, text_tokens=32,
                              head_hidden=1024, num_waypoints=6, real_size=True,
                              notes="Qwen2.5-VL-3B shapes, like MindDrive's larger backbone"),
    # ORION / MindDrive at real size: their front end's shapes (EVA-02-L-sized ViT on 6 cameras of 640^2, 16-px
    # patches; ~530 scene + history tokens) in the reference scene encoder, over a plain Llama-7B / Qwen2.5-3B.
    "orion-scene-like": VLASpec(name="orion-scene-like", family="scene_llama", num_blocks=32, hidden_size=4096,
                                num_heads=32, num_kv_heads=32, intermediate_size=11008, vocab_size=32000,
                                scene_encoder="query_scene", head="gru", real_size=True, text_tokens=32,
                                head_hidden=1024, num_waypoints=6, num_cameras=6,
                                scene_config={**_REAL_SCENE, "scene_queries": 512},
                                notes="ORION's shape: 512 scene/map queries + 16 history over Llama-7B, one pass"),
    "minddrive-scene-like": VLASpec(name="minddrive-scene-like", family="scene_qwen2", num_blocks=36,
                                    hidden_size=2048, num_heads=16, num_kv_heads=2, intermediate_size=11008,
                                    vocab_size=151936, scene_encoder="query_scene", head="gru", query_tokens=2,
                                    real_size=True, text_tokens=32, head_hidden=1024, num_waypoints=6,
                                    num_cameras=6, lora_rank=16, lora_targets=["q_proj", "k_proj", "v_proj", "o_proj"],
                                    passes=_TINY_SCENE["passes"], scene_config={**_REAL_SCENE, "scene_queries": 512},
                                    notes="MindDrive's shape: 2 passes (LoRA r=16 on q/k/v/o) over Qwen2.5-3B"),
    "internvl3-8b-like": VLASpec(name="internvl3-8b-like", family="internvl", num_blocks=28, hidden_size=3584,
                                 num_heads=28, num_kv_heads=4, intermediate_size=18944, vocab_size=151674,
                                 vision_depth=24, vision_hidden=1024, vision_heads=16, vision_intermediate=4096,
                                 image_height=448, image_width=896, tile_size=448, num_cameras=1, text_tokens=32,
                                 head_hidden=1024, num_waypoints=8, real_size=True,
                                 notes="InternVL3-8B shapes (InternViT-300M, 256 tokens per 448 tile + Qwen2.5-7B "
                                       "blocks), like ReCogDrive; one camera in 2 tiles"),
}


# Alpamayo releases at unit-test size (model/plugins/alpamayo/tiny.py): their own model, not a VLASpec; load_vla
# builds them, `hybrid-vla verify` checks their split at every cut.
ALPAMAYO_PRESETS = {"tiny-alpamayo-r1": "alpamayo_r1", "tiny-alpamayo-1.5": "alpamayo1_5"}


def get_preset(name: str) -> VLASpec:
    expect(name not in ALPAMAYO_PRESETS, ConfigError,
           f"preset '{name}' is an Alpamayo release at unit-test size: it loads as its own model, not a VLA spec "
           f"(hybrid_vla_ros.model.load.load_vla builds it; `hybrid-vla verify --preset {name}` checks its split)")
    expect(name in PRESETS, ConfigError,
           f"unknown preset '{name}'; known presets: {sorted(PRESETS)}, Alpamayo: {sorted(ALPAMAYO_PRESETS)}")
    return PRESETS[name]
