"""OpenGVLab's remote-code `internvl_chat` layout -> transformers' native `internvl` layout (config and tensor
names), written here from the facts of transformers' `models/internvl/convert_internvl_weights_to_hf.py`
(huggingface/transformers@015d3b27) and OpenGVLab/InternVL `internvl_chat/internvl/model/internvl_chat/`
(configuration_internvl_chat.py, modeling_internvl_chat.py): nothing of theirs is imported or run.

    vision_model.embeddings.class_embedding         -> vision_tower.embeddings.cls_token
    vision_model.embeddings.position_embedding      -> vision_tower.embeddings.position_embeddings
    vision_model.embeddings.patch_embedding.*       -> vision_tower.embeddings.patch_embeddings.projection.*
    vision_model.encoder.layers.N.attn.qkv.*        -> ...encoder.layer.N.attention.{q,k,v}_proj.* (split in 3)
    ...attn.proj.* / attn.q_norm / attn.k_norm      -> attention.projection_layer.* / attention.q_norm / k_norm
    ...ls1 / ls2 / norm1 / norm2 / mlp.fc1 / fc2    -> lambda_1 / lambda_2 / layernorm_before / _after / mlp.*
    mlp1.0 / mlp1.1 / mlp1.3                        -> multi_modal_projector.layer_norm / linear_1 / linear_2
    language_model.*                                 as they are (Qwen2 / Llama causal LM names)

Refused, with the reason: an InternLM2 / Phi3 / Gemma2 language model (fused `wqkv` and other names: not
converted here), `ps_version` other than v2 (v1's pixel shuffle leaves the grid transposed; transformers'
InternVL implements v2)."""

from __future__ import annotations

import json
import re
from pathlib import Path

import torch

from ..errors import ConfigError, expect

TEXT_TYPES = {"Qwen2ForCausalLM": "qwen2", "LlamaForCausalLM": "llama"}
# llm_config fields the native text config does not take (the conversion script's list, trimmed)
UNNEEDED = ("_name_or_path", "_attn_implementation_autoset", "auto_map", "use_bfloat16", "use_flash_attn", "bias",
            "architectures", "attn_implementation", "transformers_version", "torch_dtype", "model_type")
VISION_FIELDS = ("hidden_size", "num_hidden_layers", "num_attention_heads", "intermediate_size", "patch_size",
                 "norm_type", "layer_norm_eps")
_VISION_RULES = [(re.compile(p), r) for p, r in (
    (r"^vision_model\.", "vision_tower."), (r"\.layers\.", ".layer."),
    (r"\.class_embedding$", ".cls_token"), (r"\.position_embedding$", ".position_embeddings"),
    (r"\.patch_embedding\.", ".patch_embeddings.projection."), (r"\.ls(\d)$", r".lambda_\1"),
    (r"\.attn\.proj\.", ".attention.projection_layer."), (r"\.attn\.", ".attention."),
    (r"\.norm1\.", ".layernorm_before."), (r"\.norm2\.", ".layernorm_after."))]
_PROJECTOR = {"mlp1.0.": "multi_modal_projector.layer_norm.", "mlp1.1.": "multi_modal_projector.linear_1.",
              "mlp1.3.": "multi_modal_projector.linear_2."}


def _image_context_id(directory: Path) -> int | None:
    """<IMG_CONTEXT>'s id from the directory's tokenizer files (tokenizer.json or added_tokens.json)."""
    for name in ("tokenizer.json", "added_tokens.json"):
        path = directory / name
        if not path.is_file():
            continue
        data = json.loads(path.read_text())
        if name == "added_tokens.json" and "<IMG_CONTEXT>" in data:
            return int(data["<IMG_CONTEXT>"])
        for token in data.get("added_tokens", []) if isinstance(data, dict) else []:
            if token.get("content") == "<IMG_CONTEXT>":
                return int(token["id"])
    return None


def native_config(chat: dict, directory: Path) -> dict:
    """An internvl_chat config.json -> the config.json of transformers' InternVLForConditionalGeneration."""
    where = f"checkpoint '{directory / 'config.json'}'"
    expect(chat.get("model_type") == "internvl_chat", ConfigError,
           f"{where}: model_type {chat.get('model_type')!r}, expected 'internvl_chat' (--from internvl_chat)")
    llm, vision = chat.get("llm_config") or {}, chat.get("vision_config") or {}
    arch = (llm.get("architectures") or ["?"])[0]
    expect(arch in TEXT_TYPES, ConfigError,
           f"{where}: llm_config architecture {arch!r}; converted here: {sorted(TEXT_TYPES)} (InternLM2's fused "
           f"wqkv, Phi3 and Gemma2 are not)")
    expect(chat.get("ps_version", "v1") == "v2", ConfigError,
           f"{where}: ps_version {chat.get('ps_version', 'v1')!r}; only 'v2' matches transformers' pixel shuffle")
    missing = [f for f in VISION_FIELDS if f not in vision]
    expect(not missing, ConfigError, f"{where}: vision_config lacks {missing}")
    image_size = chat.get("force_image_size") or vision.get("image_size")
    ratio = chat.get("downsample_ratio", 0.5)
    native_vision = {f: vision[f] for f in VISION_FIELDS}
    native_vision.update(model_type="internvl_vision", image_size=image_size, hidden_act=vision.get("hidden_act", "gelu"),
                         attention_bias=bool(vision.get("qkv_bias", True)),
                         use_qk_norm=bool(vision.get("qk_normalization", False)),
                         use_absolute_position_embeddings=True)
    text = {k: v for k, v in llm.items() if k not in UNNEEDED}
    text["model_type"] = TEXT_TYPES[arch]
    config = {"model_type": "internvl", "architectures": ["InternVLForConditionalGeneration"],
              "vision_config": native_vision, "text_config": text, "downsample_ratio": ratio,
              "vision_feature_layer": chat.get("select_layer", -1), "vision_feature_select_strategy": "default",
              "projector_hidden_act": "gelu",
              "image_seq_length": int((image_size // vision["patch_size"]) ** 2 * ratio ** 2)}
    image_id = _image_context_id(directory)
    if image_id is not None:
        config["image_token_id"] = image_id
    return config


def _vision_key(key: str) -> str:
    for pattern, replacement in _VISION_RULES:
        key = pattern.sub(replacement, key)
    return key


def native_tensors(tensors: dict[str, torch.Tensor], vision_hidden: int) -> dict[str, torch.Tensor]:
    """internvl_chat tensor names -> the native layout's; the ViT's fused qkv split into q, k, v."""
    out: dict[str, torch.Tensor] = {}
    for key, tensor in tensors.items():
        if key.startswith("vision_model."):
            new = _vision_key(key)
            if ".attention.qkv." in new:
                expect(tensor.shape[0] == 3 * vision_hidden, ConfigError,
                       f"tensor '{key}': shape {tuple(tensor.shape)}, expected 3 x {vision_hidden} rows (q, k, v)")
                for i, name in enumerate(("q_proj", "k_proj", "v_proj")):
                    out[new.replace(".qkv.", f".{name}.")] = tensor[i * vision_hidden:(i + 1) * vision_hidden]
                continue
        else:
            prefix = next((p for p in _PROJECTOR if key.startswith(p)), None)
            new = _PROJECTOR[prefix] + key[len(prefix):] if prefix else key
        out[new] = tensor
    return out
