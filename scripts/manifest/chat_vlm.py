"""OpenGVLab's `InternVLChatModel` (internvl_chat/internvl/model/internvl_chat/) built from a snapshot's own code and
saved by its own `save_pretrained`, for extract_manifest.py: ReCogDrive's VLM (the copy NIyueeE/recogdrive holds,
transformers 4.37.2 as internvl_chat/pyproject.toml pins) and the InternVL2-1B that SimLingo's classes load with
`AutoModel.from_pretrained(..., trust_remote_code=True)` (OpenGVLab/InternVL's copy, the source of that remote code).

The sizes (config.json fields) are inputs, each with its source; what the state dict holds is the authors' classes'.
- tiny: the package's tiny InternVL shapes (tiny-recogdrive / tiny-simlingo: LLM 64 wide, 4 blocks, vocabulary
  512; ViT 32 wide, 2 layers, 56-px tiles of 14-px patches), so the planner manifest's feature_encoder (64 wide)
  and the package's tiny mapping pair with it;
- internvl3_2b (ReCogDrive-VLM-2B's base): InternViT-300M-448px-V2_5 + Qwen2.5-1.5B (OpenGVLab/InternVL README's
  model table); the ViT's fields are InternVL2-1B's (the same InternViT-300M shapes), the LLM's Qwen2.5-1.5B's
  (1536 wide: the width ReCogDrive's planner hard-codes), the vocabulary InternVL3's 151674;
- internvl2_1b (SimLingo's base): OpenGVLab/InternVL2-1B's config.json as tothelast/simlingo_qcar2_integration
  holds it (pretrained/InternVL2-1B/config.json @ a1ae471).
Stubbed when not installed: timm (DropPath, weightless; drop_path_rate 0 builds nn.Identity), bitsandbytes, deepspeed,
image / video I/O. flash_attn is not stubbed: its ImportError is what makes the authors' code choose eager attention."""

from __future__ import annotations

import sys
from pathlib import Path

import stubs

STUB_ROOTS = ["timm", "bitsandbytes", "deepspeed", "decord", "imageio", "cv2", "PIL", "torchvision"]
FORCE = ["torchvision", "timm"]          # installed in the venvs for another torch: importing them fails

_QWEN = {"architectures": ["Qwen2ForCausalLM"], "model_type": "qwen2", "hidden_act": "silu", "rms_norm_eps": 1e-6,
         "rope_theta": 1000000.0, "tie_word_embeddings": False, "use_sliding_window": False}
_VIT = {"architectures": ["InternVisionModel"], "model_type": "intern_vit_6b", "norm_type": "layer_norm",
        "layer_norm_eps": 1e-6, "hidden_act": "gelu", "qkv_bias": True, "qk_normalization": False, "patch_size": 14,
        "drop_path_rate": 0.0, "dropout": 0.0, "attention_dropout": 0.0, "initializer_factor": 1.0}
_CHAT = {"downsample_ratio": 0.5, "select_layer": -1, "ps_version": "v2", "dynamic_image_size": True,
         "use_thumbnail": True, "min_dynamic_patch": 1, "max_dynamic_patch": 12, "use_backbone_lora": 0,
         "use_llm_lora": 0}
TINY = {"llm": {**_QWEN, "hidden_size": 64, "intermediate_size": 128, "num_hidden_layers": 4, "num_attention_heads": 4,
                "num_key_value_heads": 2, "vocab_size": 512, "max_position_embeddings": 4096},
        "vit": {**_VIT, "hidden_size": 32, "intermediate_size": 64, "num_hidden_layers": 2, "num_attention_heads": 2,
                "image_size": 56},
        "chat": {**_CHAT, "force_image_size": 56}}
_VIT_300M = {**_VIT, "hidden_size": 1024, "intermediate_size": 4096, "num_hidden_layers": 24, "num_attention_heads": 16,
             "image_size": 448}
RELEASED = {
    "internvl3_2b": {"llm": {**_QWEN, "hidden_size": 1536, "intermediate_size": 8960, "num_hidden_layers": 28,
                             "num_attention_heads": 12, "num_key_value_heads": 2, "vocab_size": 151674,
                             "max_position_embeddings": 32768},
                     "vit": _VIT_300M, "chat": {**_CHAT, "force_image_size": 448}},
    "internvl2_1b": {"llm": {**_QWEN, "hidden_size": 896, "intermediate_size": 4864, "num_hidden_layers": 24,
                             "num_attention_heads": 14, "num_key_value_heads": 2, "vocab_size": 151655,
                             "max_position_embeddings": 32768, "bos_token_id": 151643, "eos_token_id": 151645},
                     "vit": _VIT_300M, "chat": {**_CHAT, "force_image_size": 448}},
}
TEMPLATE = {"internvl3_2b": "internvl2_5", "internvl2_1b": "Hermes-2"}


def chat_config(name: str, tiny: bool) -> dict:
    """InternVLChatConfig's keyword arguments (llm_config, vision_config, the chat fields)."""
    sizes = TINY if tiny else RELEASED[name]
    return {"llm_config": dict(sizes["llm"]), "vision_config": dict(sizes["vit"]),
            "template": TEMPLATE[name], **sizes["chat"]}


def import_internvl(code_root: Path):
    """(InternVLChatConfig, InternVLChatModel) from `code_root` (a directory holding the `internvl` package)."""
    stubs.install(STUB_ROOTS, force=FORCE, compiled=())
    sys.path.insert(0, str(code_root))
    from internvl.model.internvl_chat import InternVLChatConfig, InternVLChatModel
    import internvl.model.internvl_chat.modeling_internvl_chat as modeling
    assert Path(modeling.__file__).resolve().is_relative_to(code_root.resolve()), modeling.__file__
    return InternVLChatConfig, InternVLChatModel


def build(code_root: Path, name: str, tiny: bool):
    """The authors' InternVLChatModel at the size asked (released: parameters on the meta device)."""
    import torch
    from authors import parameters_on_meta
    config_cls, model_cls = import_internvl(code_root)
    config = config_cls(**chat_config(name, tiny))
    torch.manual_seed(0)
    if tiny:
        return model_cls(config)
    with parameters_on_meta():
        return model_cls(config)


def save(model, out: Path, tiny: bool) -> dict:
    """The model's own save_pretrained -> {state, files, metadata, config_json, saved_files} (released: the
    safetensors writer records instead of writing, as for Alpamayo; a meta tensor's storage is itself)."""
    import json
    import transformers.modeling_utils as modeling_utils
    from alpamayo import RecordingWriter, _saved_files
    if tiny:
        model.save_pretrained(str(out))
        state, files, metadata = _saved_files(out)
    else:
        writer, storage = RecordingWriter(), modeling_utils.id_tensor_storage
        modeling_utils.safe_save_file, original = writer, modeling_utils.safe_save_file
        # meta tensors all report storage 0, which 4.37.2's shared-tensor check would drop as ties: each its own
        modeling_utils.id_tensor_storage = lambda t: (t.device, id(t)) if t.device.type == "meta" else storage(t)
        try:
            model.save_pretrained(str(out))
        finally:
            modeling_utils.safe_save_file, modeling_utils.id_tensor_storage = original, storage
        state, files, metadata = writer.state, writer.files, writer.metadata
    index = out / "model.safetensors.index.json"
    return {"state": state, "files": files, "metadata": metadata,
            "config_json": json.loads((out / "config.json").read_text()),
            "index": sorted(json.loads(index.read_text())) if index.is_file() else None,
            "saved_files": sorted(p.name for p in out.iterdir())}
