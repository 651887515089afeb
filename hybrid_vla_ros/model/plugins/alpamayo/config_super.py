"""Alpamayo 2 Super's config.json (model_type `alpamayo2_super`; NVlabs/alpamayo2 @beb2977, src/alpamayo2_super/
config.py and models/expert.py) in the fields config.py reads for Alpamayo 1 / 1.5, so one parser serves the three:

    vlm_config (the whole Qwen3-VL config, its text vocabulary padded to 128)   -> the VLM (no backbone folder read)
    traj_ids: history_id0, future_id0, history_pad, future_pad, *_start, *_end  -> traj_token_start_idx = <i0>,
                                                                                   traj_token_ids, hist_token_start_idx
    history_vocab_size + future_vocab_size                                      -> traj_vocab_size (never sampled)
    expert_config: llm_config (the expert's own text config), action_space_cfg,
                   diffusion_cfg, action_in_proj_cfg, expert_non_causal_attention -> expert_cfg and the part configs
    hist_traj_tokenizer_cfg: num_bins, pad_origin_at_beginning                   -> history (48 or 45 tokens)

Its special tokens are the 29 of 1.5's list under their own names, added after the 4000 <iN> (config.py
build_alpamayo2_super_tokenizer); Qwen3-VL's <|image_pad|> is a base token, so it takes no new id. Its reasoning
never samples the text's end tokens (models/alpamayo2_super.py `_append_text_eos_mask`: the VLM's generation
config's eos ids, `<|traj_future_start|>` kept): masked_ids, from vlm_config (the VLM is built from it, so its
generation config is; a generation_config.json beside the release configures the wrapper, not the VLM)."""

from __future__ import annotations

from ....errors import ConfigError, expect

MODEL_TYPE = "alpamayo2_super"
TRAJ_IDS = ("history_id0", "future_id0", "history_pad", "future_pad", "history_start", "future_start",
            "history_end", "future_end")
EXPERT_FIELDS = ("hidden_size", "intermediate_size", "num_attention_heads", "num_hidden_layers",
                 "num_key_value_heads", "head_dim")
# llm_config fields that may differ from the VLM's text config without changing how the expert computes (its
# token embeddings are deleted; dtype and bookkeeping); any other difference is refused rather than dropped
INERT_FIELDS = ("vocab_size", "dtype", "torch_dtype", "model_type", "architectures", "_name_or_path",
                "transformers_version", "pad_token_id", "bos_token_id", "eos_token_id", "layer_types")


def vlm_of(raw: dict, where: str):
    """The embedded vlm_config -> a Qwen3VLConfig (the text vocabulary as saved: padded)."""
    from transformers.models.qwen3_vl import Qwen3VLConfig
    vlm = raw.get("vlm_config")
    expect(isinstance(vlm, dict) and isinstance(vlm.get("text_config"), dict), ConfigError,
           f"{where}: vlm_config is not the backbone's config (the release saves it whole)")
    return Qwen3VLConfig(**{k: v for k, v in vlm.items() if k not in ("architectures", "model_type", "_name_or_path")})


def text_eos_ids(raw: dict, keep: int) -> tuple[int, ...]:
    """The ids the reasoning masks: the VLM's generation config's eos_token_id (built from vlm_config: its own
    field, else its text config's; an int or a list), less `keep`."""
    vlm = raw["vlm_config"]
    eos = vlm.get("eos_token_id", vlm["text_config"].get("eos_token_id"))
    ids = [eos] if isinstance(eos, int) else list(eos or [])
    return tuple(int(i) for i in ids if int(i) != keep)


def as_release_fields(raw: dict, where: str) -> dict:
    """config.json of an Alpamayo 2 Super release -> the fields config.parse reads (Alpamayo 1's names)."""
    ids, expert = raw.get("traj_ids") or {}, raw.get("expert_config") or {}
    missing = [k for k in TRAJ_IDS if not isinstance(ids.get(k), int)]
    expect(not missing, ConfigError, f"{where}: traj_ids lacks {missing} (the release saves them)")
    expect(bool(raw.get("enable_expert", True)) and isinstance(expert.get("llm_config"), dict), ConfigError,
           f"{where}: no expert_config.llm_config (an expert-enabled Alpamayo 2 Super checkpoint saves it)")
    history, future = int(raw.get("history_vocab_size", 1000)), int(raw.get("future_vocab_size", 3000))
    expect(ids["future_id0"] == ids["history_id0"] + history, ConfigError,
           f"{where}: traj_ids.future_id0={ids['future_id0']}, expected history_id0 + history_vocab_size = "
           f"{ids['history_id0'] + history}")
    llm = expert["llm_config"]
    text = raw["vlm_config"]["text_config"]
    other = sorted(k for k in set(llm) | set(text) if k not in EXPERT_FIELDS + INERT_FIELDS and llm.get(k) != text.get(k))
    expect(not other, ConfigError,
           f"{where}: expert_config.llm_config differs from the VLM's text config in {other} "
           f"({', '.join(f'{k}: {llm.get(k)!r} vs {text.get(k)!r}' for k in other[:3])}); the expert is built here as "
           f"the VLM's text config with only {list(EXPERT_FIELDS)} set, so such a release is refused")
    return {**raw, "traj_token_start_idx": ids["history_id0"], "traj_vocab_size": history + future,
            "vocab_size": int(text["vocab_size"]), "add_special_tokens": True,
            "traj_token_ids": {"history": ids["history_pad"], "future": ids["future_pad"],
                               **{k: ids[k] for k in ("history_start", "future_start", "history_end", "future_end")}},
            "hist_token_start_idx": ids["history_id0"],
            "expert_cfg": {k: llm[k] for k in EXPERT_FIELDS if k in llm},
            "action_space_cfg": expert.get("action_space_cfg"), "diffusion_cfg": expert.get("diffusion_cfg"),
            "action_in_proj_cfg": expert.get("action_in_proj_cfg"),
            "expert_non_causal_attention": expert.get("expert_non_causal_attention", True),
            "masked_ids": text_eos_ids(raw, ids["future_start"])}
