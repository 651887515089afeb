"""The sizes extract_manifest.py builds the authors' models at: the released config as it is (the LLM's config
is the base model's: LLaMA-7B / Vicuna for ORION, Qwen2-0.5B for MindDrive-0.5B, as transformers' own defaults
and the model cards give them), and a tiny one that changes sizes only (the `TINY` values below), with the
`hybrid-vla convert --set` overrides that tell the shipped mapping the same sizes."""

from __future__ import annotations

LLM = {
    "orion": {"model_type": "llava_llama", "hidden_size": 4096, "intermediate_size": 11008, "num_hidden_layers": 32,
              "num_attention_heads": 32, "num_key_value_heads": 32, "vocab_size": 32000,
              "max_position_embeddings": 2048, "rms_norm_eps": 1e-06, "pad_token_id": 0, "bos_token_id": 1,
              "eos_token_id": 2, "tie_word_embeddings": False},
    "minddrive": {"model_type": "llava_qwen2", "hidden_size": 896, "intermediate_size": 4864, "num_hidden_layers": 24,
                  "num_attention_heads": 14, "num_key_value_heads": 2, "vocab_size": 151936,
                  "max_position_embeddings": 32768, "rms_norm_eps": 1e-06, "rope_theta": 1000000.0,
                  "tie_word_embeddings": True, "bos_token_id": 151643, "eos_token_id": 151643,
                  # MindDrive's own config field (llava_qwen.py L71-74: weighted_mask of it + 14 = the resized
                  # 151680); its released config.json is not in the snapshot: assumed 151666 from that sum
                  "tokenizer_vocab_size": 151666},
}
# the tokenizer's base length (before the added tokens; the embedding is resized to it plus them): Vicuna's 32000
# (ORION's weighted_mask indexes number tokens up to 29955, so it stays at the tiny size), Qwen2's 151665
TOKENIZER = {"orion": 32000, "minddrive": 151665}
TINY_TOKENIZER = {"orion": 32000, "minddrive": 264}
TINY_LLM = {"orion": {"hidden_size": 64, "intermediate_size": 128, "num_hidden_layers": 2, "num_attention_heads": 4,
                      "num_key_value_heads": 4},
            "minddrive": {"hidden_size": 64, "intermediate_size": 128, "num_hidden_layers": 2,
                          "num_attention_heads": 4, "num_key_value_heads": 2, "vocab_size": 300,
                          "tokenizer_vocab_size": 265}}
TINY_BACKBONE = {"img_size": 64, "embed_dim": 64, "depth": 2, "num_heads": 4,
                 "window_block_indexes": [0], "window_size": 2}
TINY_DET = {"num_query": 12, "num_propagated": 6, "memory_len": 12, "topk_proposals": 6, "num_extra": 8}
TINY_MAP = {"num_lane": 18, "num_lanes_one2one": 6, "memory_len": 12, "topk_proposals": 6, "num_extra": 8}
TINY_PETR_FFN = 512


def llm_config(model: str, tiny: bool) -> dict:
    return {**LLM[model], **(TINY_LLM[model] if tiny else {})}


def tokenizer_base(model: str, tiny: bool) -> int:
    return (TINY_TOKENIZER if tiny else TOKENIZER)[model]


def tiny_config(cfg, model: str) -> None:
    """The released config dict (the authors' Config) changed to the tiny sizes, in place."""
    m, hidden = cfg.model, TINY_LLM[model]["hidden_size"]
    m.img_backbone.update(TINY_BACKBONE)
    m.img_backbone.pop("window_block_indexes", None)
    m.img_backbone.window_block_indexes = TINY_BACKBONE["window_block_indexes"]
    for head, sizes in (("pts_bbox_head", TINY_DET), ("map_head", TINY_MAP)):
        h = m[head]
        h.update(sizes)
        h.in_channels, h.out_dims = TINY_BACKBONE["embed_dim"], hidden
        h.transformer.feedforward_dims = TINY_PETR_FFN


def mapping_sets(model: str, cfg, tiny: bool, added_tokens: int) -> list:
    """[(KEY, VALUE)]: the shipped mapping's sizes that differ at this build (convert --set)."""
    if not tiny:
        return []
    b, det, map_ = TINY_BACKBONE, TINY_DET, TINY_MAP
    side = b["img_size"]
    sets = [("action_head.image_height", side), ("action_head.image_width", side),
            ("scene_encoder.config.image_height", side), ("scene_encoder.config.image_width", side),
            ("scene_encoder.config.ffn_dims", TINY_PETR_FFN),
            ("scene_encoder.config.backbone.embed_dim", b["embed_dim"]),
            ("scene_encoder.config.backbone.depth", b["depth"]),
            ("scene_encoder.config.backbone.num_heads", b["num_heads"]),
            ("scene_encoder.config.backbone.window_size", b["window_size"]),
            ("scene_encoder.config.backbone.window_blocks", b["window_block_indexes"])]
    sets += [(f"scene_encoder.config.det.{k}", v) for k, v in det.items()]
    sets += [(f"scene_encoder.config.map.{k}", v) for k, v in map_.items()]
    base = tokenizer_base(model, tiny)
    sets.append(("config_overrides.vocab_size", base + added_tokens))
    if model == "minddrive":
        sets.append(("action_head.head_config.decision_tokens", list(range(base, base + 7))))
    return sets
