"""Tiny checkpoints laid out as published releases lay them out (key names, nesting, file container, config
fields: read from the public code, written here at toy sizes; no code of theirs): OpenGVLab's remote-code InternVL
directory, SimLingo's `pytorch_model.pt` and ReCogDrive's planner `.ckpt` (recogdrive_ckpt). Each is written from a
package model saved in its own layout, so a conversion back must reproduce that model."""

import json
import math

import torch
from safetensors import safe_open
from safetensors.torch import load_file, save_file

_TO_CHAT = [("vision_tower.", "vision_model."), (".encoder.layer.", ".encoder.layers."),
            (".embeddings.cls_token", ".embeddings.class_embedding"),
            (".embeddings.position_embeddings", ".embeddings.position_embedding"),
            (".patch_embeddings.projection.", ".patch_embedding."), (".lambda_", ".ls"),
            (".attention.projection_layer.", ".attn.proj."), (".layernorm_before.", ".norm1."),
            (".layernorm_after.", ".norm2."), ("multi_modal_projector.layer_norm.", "mlp1.0."),
            ("multi_modal_projector.linear_1.", "mlp1.1."), ("multi_modal_projector.linear_2.", "mlp1.3.")]


def internvl_chat_state(saved, **chat_fields):
    """A saved InternVL checkpoint (native names) as OpenGVLab's remote-code repository lays it out (InternVL2-1B's
    names and config fields, at tiny sizes): fused ViT qkv, mlp1.*, language_model.model.* (as save_pretrained also
    writes it), llm_config / vision_config. -> (tensors, config.json, the image token id)."""
    native, chat = load_file(str(saved / "model.safetensors")), {}
    for key, tensor in native.items():
        if ".attention.k_proj." in key or ".attention.v_proj." in key:
            continue
        if ".attention.q_proj." in key:
            tensor = torch.cat([native[key.replace("q_proj", n)] for n in ("q_proj", "k_proj", "v_proj")])
            key = key.replace(".attention.q_proj.", ".attn.qkv.")
        for ours, theirs in _TO_CHAT:
            key = key.replace(ours, theirs, 1) if ours in key else key
        chat[key] = tensor
    chat["language_model.lm_head.weight"] = native["language_model.model.embed_tokens.weight"].clone()
    config = json.loads((saved / "config.json").read_text())
    text, vision = config["text_config"], config["vision_config"]
    llm = {**{k: v for k, v in text.items() if k not in ("rope_parameters", "dtype")}, "architectures": ["Qwen2ForCausalLM"],
           "rope_theta": text["rope_parameters"]["rope_theta"], "rope_scaling": None, "torch_dtype": "float32"}
    vit = {**{k: vision[k] for k in ("hidden_size", "num_hidden_layers", "num_attention_heads", "intermediate_size",
                                    "norm_type", "layer_norm_eps", "hidden_act")},
           "image_size": vision["image_size"][0], "patch_size": vision["patch_size"][0], "qkv_bias": True,
           "qk_normalization": False, "architectures": ["InternVisionModel"], "drop_path_rate": 0.0}
    chat_config = {
        "model_type": "internvl_chat", "architectures": ["InternVLChatModel"], "auto_map": {},
        "llm_config": llm, "vision_config": vit, "downsample_ratio": 0.5, "select_layer": -1, "ps_version": "v2",
        "template": "internvl2_5", "force_image_size": vit["image_size"], "dynamic_image_size": True,
        "use_thumbnail": True, "max_dynamic_patch": 6, **chat_fields}
    return chat, chat_config, config["image_token_id"]


def internvl_chat_dir(saved, directory, **chat_fields):
    """internvl_chat_state written as a remote-code directory (config.json + model.safetensors) -> image token id."""
    chat, chat_config, image_token = internvl_chat_state(saved, **chat_fields)
    directory.mkdir()
    (directory / "config.json").write_text(json.dumps(chat_config))
    save_file({k: v.contiguous() for k, v in chat.items()}, str(directory / "model.safetensors"))
    return image_token


# SimLingo's LoRA targets (peft `all-linear` over the Qwen2 LLM's decoder linears)
SIMLINGO_LORA = ("q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj")
SIMLINGO_LLM = "language_model.model.base_model.model."   # peft's wrap of the LLM inside DrivingModel


def simlingo_state(saved, lora_rank=4, lora_alpha=64.0, seed=0):
    """A saved tiny-simlingo checkpoint -> SimLingo's DrivingModel state dict (RenzKa/simlingo, as its agent loads
    `pytorch_model.pt`: a raw dict, strict): the InternVL vision side under `vision_model.image_encoder.model.`
    (remote-code names), the LLM wrapped by peft (`base_layer` + a `default` LoRA on every decoder linear), the
    shared embedding / lm_head saved again under `adaptors.language.`, the driving adaptor's query tables (1, n, H)
    and heads, `wp_encoder.mlp.*`. The LoRA is random and the base weights are W - alpha / r * B @ A, so the merged
    model is the saved one (up to float rounding). -> (state dict, the internvl_chat config.json, image token id)."""
    chat, chat_config, image_token = internvl_chat_state(saved)
    generator = torch.Generator().manual_seed(seed)
    state = {}
    for key, tensor in chat.items():
        if key.startswith(("vision_model.", "mlp1.")):
            state["vision_model.image_encoder.model." + key] = tensor
        elif key == "language_model.lm_head.weight":
            state[SIMLINGO_LLM + "lm_head.weight"] = tensor
        else:
            inner = key[len("language_model."):]                         # model.layers.N..., model.norm..., ...
            module, _, leaf = inner.rpartition(".")
            if module.rsplit(".", 1)[-1] in SIMLINGO_LORA and leaf == "weight":
                a = torch.randn(lora_rank, tensor.shape[1], generator=generator) * 0.1
                b = torch.randn(tensor.shape[0], lora_rank, generator=generator) * 0.1
                state[f"{SIMLINGO_LLM}{module}.base_layer.weight"] = \
                    (tensor.double() - (b.double() @ a.double()) * (lora_alpha / lora_rank)).float()
                state[f"{SIMLINGO_LLM}{module}.lora_A.default.weight"] = a
                state[f"{SIMLINGO_LLM}{module}.lora_B.default.weight"] = b
            elif module.rsplit(".", 1)[-1] in SIMLINGO_LORA:
                state[f"{SIMLINGO_LLM}{module}.base_layer.{leaf}"] = tensor
            else:
                state[SIMLINGO_LLM + inner] = tensor
    state[SIMLINGO_LLM + "embed_tokens.weight"] = chat["language_model.model.embed_tokens.weight"]   # shared, again
    state["adaptors.language.embed_tokens.weight"] = chat["language_model.model.embed_tokens.weight"]
    state["adaptors.language.lm_head.weight"] = chat["language_model.lm_head.weight"]
    prompt, head = load_file(str(saved / "prompt_embeddings.safetensors")), load_file(str(saved / "action_head.safetensors"))
    state["adaptors.driving.query_embeds_wps"] = prompt["queries.0"].unsqueeze(0)       # (1, 20, H)
    state["adaptors.driving.query_embeds_speed"] = prompt["queries.1"].unsqueeze(0)     # (1, 10, H)
    state.update({"adaptors.driving.route_head." + k[len("route."):]: v for k, v in head.items() if k.startswith("route.")})
    state.update({"adaptors.driving.speed_wps_head." + k[len("speed."):]: v for k, v in head.items()
                  if k.startswith("speed.")})
    state.update({"wp_encoder.mlp." + k[len("adaptors.target_point."):]: v for k, v in prompt.items()
                  if k.startswith("adaptors.target_point.")})
    return state, chat_config, image_token


RECOGDRIVE_PREFIX = "agent.action_head."   # AgentLightningModule.agent -> ReCogDriveAgent.action_head
# InternVL3's remote-code config fields where they differ from InternVL2-1B's (ReCogDrive's VLM is fine-tuned
# from InternVL3-2B / 8B: 448 px tiles, up to 12 of them with a thumbnail, as its agent tiles the front camera)
INTERNVL3_FIELDS = {"max_dynamic_patch": 12}


def recogdrive_buffers(train_steps=100, steps=5, head_dim=16):
    """The planner's persistent buffers as its state dict holds them (ReCogDriveDiffusionPlanner's DDPM / DDIM
    tables on the cosine schedule, DDIM's eta 0 table, the RoPE frequencies, EtaFixed's logit atanh(1) = inf):
    values the package recomputes, so the conversion drops them."""
    s = torch.linspace(0, train_steps + 1, train_steps + 1, dtype=torch.float64) / (train_steps + 1)
    f = torch.cos((s + 0.008) / 1.008 * math.pi / 2) ** 2
    betas = (1 - f[1:] / f[:-1]).clamp(0, 0.999).float()
    bar = torch.cumprod(1 - betas, dim=0)
    prev = torch.cat([torch.ones(1), bar[:-1]])
    var = betas * (1 - prev) / (1 - bar)
    out = {"ddpm_betas": betas, "ddpm_alphas": 1 - betas, "ddpm_alphas_cumprod": bar, "ddpm_alphas_cumprod_prev": prev,
           "ddpm_sqrt_alphas_cumprod": bar.sqrt(), "ddpm_sqrt_one_minus_alphas_cumprod": (1 - bar).sqrt(),
           "ddpm_sqrt_recip_alphas_cumprod": (1 / bar).sqrt(), "ddpm_sqrt_recipm1_alphas_cumprod": (1 / bar - 1).sqrt(),
           "ddpm_var": var, "ddpm_logvar_clipped": var.clamp(min=1e-20).log(),
           "ddpm_mu_coef1": betas * prev.sqrt() / (1 - bar), "ddpm_mu_coef2": (1 - prev) * (1 - betas).sqrt() / (1 - bar)}
    t = torch.arange(steps) * (train_steps // steps)                                     # 0, 20, 40, 60, 80
    a, a_prev = bar[t], torch.cat([torch.ones(1), bar[t[:-1]]])
    out.update({"ddim_t_schedule": t, "ddim_t": t.flip(0), "ddim_alphas": a.flip(0), "ddim_alphas_sqrt": a.sqrt().flip(0),
                "ddim_alphas_prev": a_prev.flip(0), "ddim_sqrt_one_minus_alphas": (1 - a).sqrt().flip(0),
                "ddim_sigmas": torch.zeros(steps),
                "model.rotary_embedder.inv_freq": 1.0 / 10000 ** (torch.arange(0, head_dim, 2).float() / head_dim),
                "eta.eta_logit": torch.full((1,), math.inf)})
    return out


def recogdrive_ckpt(saved, path, epoch=9):
    """A saved tiny-recogdrive checkpoint's planner -> ReCogDrive's Lightning `.ckpt` at `path` (as its
    ModelCheckpoint writes it: the planner under `agent.action_head.`, its buffers beside the weights, no VLM
    (hidden states cached in training), Lightning's payload around it). -> the state dict."""
    head = load_file(str(saved / "action_head.safetensors"))
    with safe_open(str(saved / "action_head.safetensors"), "pt") as handle:
        config = json.loads(handle.metadata()["hybrid_vla"])["head_config"]
    state = {RECOGDRIVE_PREFIX + k: v for k, v in head.items()}
    state.update({RECOGDRIVE_PREFIX + k: v for k, v in recogdrive_buffers(
        config["train_steps"], config["steps"], config["head_dim"]).items()})
    torch.save({"epoch": epoch, "global_step": 1664 * (epoch + 1), "pytorch-lightning_version": "2.3.3",
                "state_dict": state, "loops": {"fit_loop": {"state_dict": {}, "epoch_progress": {"current": {
                    "completed": epoch}}}},
                "callbacks": {"ModelCheckpoint{'monitor': None, 'mode': 'min', 'every_n_train_steps': 0, "
                              "'every_n_epochs': 1, 'train_time_interval': None}": {
                                  "best_model_path": "", "last_model_path": str(path), "dirpath": str(path.parent)}},
                "optimizer_states": [], "lr_schedulers": []}, path)
    return state
