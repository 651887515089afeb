"""A checkpoint's config.json -> the transformers config of its backbone family, and the VLASpec fields that config
implies (model/checkpoint_files.py reads checkpoints through these)."""

from __future__ import annotations

import json
from pathlib import Path

from ...errors import ConfigError, expect
from ..registry import family_of_model_type, supported_model_types
from .base import ATTN_IMPL


def load_backbone_config(directory: Path):
    """config.json of a checkpoint directory -> the transformers config, offline; unknown families refused."""
    from transformers import AutoConfig
    path = directory / "config.json"
    try:
        model_type = json.loads(path.read_text()).get("model_type")
    except (json.JSONDecodeError, UnicodeDecodeError, AttributeError) as exc:
        raise ConfigError(f"checkpoint '{path}': not a JSON object ({exc})") from exc
    expect(isinstance(model_type, str) and family_of_model_type(model_type) is not None, ConfigError,
           f"checkpoint '{path}': model_type {model_type!r} is not supported; supported: {supported_model_types()}")
    try:
        return AutoConfig.from_pretrained(str(directory), local_files_only=True, attn_implementation=ATTN_IMPL)
    except Exception as exc:  # noqa: BLE001 - transformers/huggingface_hub raise their own validation types
        raise ConfigError(f"checkpoint '{path}': transformers cannot read it ({type(exc).__name__}: {exc})") from exc


def spec_fields(config, own_tokenizer: bool = False) -> dict:
    """VLASpec fields implied by a backbone config (the VLA's own fields come from the head's metadata).
    Without its own tokenizer, a checkpoint must use the built-in prompt's special-token ids."""
    family = family_of_model_type(config.model_type)
    for name, ours in family.special_token_fields.items():
        theirs = getattr(config, name, ours)
        expect(own_tokenizer or theirs in (ours, None), ConfigError,
               f"checkpoint config: {name}={theirs}, the built-in prompt layout uses {ours}; a checkpoint with "
               f"other special tokens must bring its tokenizer (tokenizer.json; docs/CHECKPOINTS.md)")
    text = config.get_text_config()
    shared = dict(family=family.name, num_blocks=text.num_hidden_layers, hidden_size=text.hidden_size,
                  num_heads=text.num_attention_heads, num_kv_heads=text.num_key_value_heads,
                  intermediate_size=text.intermediate_size, vocab_size=text.vocab_size)
    head_dim = getattr(text, "head_dim", None)   # said only where it is not hidden / heads (Qwen3-VL-32B: 128)
    if head_dim and head_dim != text.hidden_size // text.num_attention_heads:
        shared["head_dim"] = head_dim
    vision = getattr(config, "vision_config", None)   # a scene-encoded LLM has none
    if vision is not None:
        shared["patch_size"] = vision.patch_size
    return {**shared, **family.vision_spec_fields(config)}
