"""Tiny ORION and MindDrive checkpoints in their published mmcv `.pth` layout
(docs/sources/published_orion_minddrive.md, sections a and d: `{'meta', 'state_dict', 'optimizer'}`; the LLM under
peft's `lm_head.base_model.model.`, the perception front end (img_backbone., pts_bbox_head., map_head., query_pos.,
..., position_range, coords_d) and the planner's keys at the top level; key names read from the public code, written
here at toy sizes, no code of theirs). Each is written from a package model saved in its own layout
(tiny-orion-release, tiny-minddrive-release: `orion_front` + LLM + planner), so a conversion back must give that
model."""

import torch
from safetensors.torch import load_file

LLM = "lm_head.base_model.model."               # Orion / Minddrive .lm_head: a PeftModel over the causal LM
TARGETS = ("q_proj", "k_proj", "v_proj", "o_proj")
META = {"mmcv_version": "1.7.0", "time": "Thu Apr 10 12:00:00 2025", "epoch": 6, "iter": 1000}


def _wrapped(backbone: dict, adapter_keys: dict) -> dict:
    """The LLM's own tensors (a bare decoder's names) as peft wraps them: `base_layer` in the adapted linears, the
    LoRA pairs `lora_{A,B}.<adapter>.weight` beside them (adapter_keys: adapter -> {module: (A, B)})."""
    out = {}
    for key, tensor in backbone.items():
        module, _, leaf = key.rpartition(".")
        if module.rsplit(".", 1)[-1] in TARGETS:
            out[f"{LLM}model.{module}.base_layer.{leaf}"] = tensor
        else:
            out[f"{LLM}model.{key}"] = tensor
    for adapter, pairs in adapter_keys.items():
        for module, (a, b) in pairs.items():
            out[f"{LLM}model.{module}.lora_A.{adapter}.weight"] = a
            out[f"{LLM}model.{module}.lora_B.{adapter}.weight"] = b
    return out


def _training_only(width: int, extra: int, prefix: str, seed: int) -> dict:
    """`<prefix>future_distribution.*` (input width + the ground-truth offsets), as a trained checkpoint holds it."""
    from hybrid_vla_ros.model.plugins.vae_planners import DistributionModule
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        module = DistributionModule(width + extra)
    return {f"{prefix}future_distribution.{k}": v.detach().clone() for k, v in module.state_dict().items()}


def _mmcv(path, state: dict) -> None:
    """mmcv's save_checkpoint: meta, the state dict, and the optimizer's state (Adam moments of a trainable tensor)."""
    first = next(iter(state.values()))
    torch.save({"meta": dict(META), "state_dict": state,
                "optimizer": {"state": {0: {"step": torch.tensor(1000.0), "exp_avg": torch.zeros_like(first),
                                            "exp_avg_sq": torch.zeros_like(first)}},
                              "param_groups": [{"lr": 2e-4, "weight_decay": 0.01, "params": [0]}]}}, path)


def rotary_buffers(layers: int, head_dim: int, positions: int = 64) -> dict:
    """transformers 4.31's per-layer `rotary_emb.inv_freq` (head_dim / 2) and `{cos,sin}_cached` (1, 1, positions,
    head_dim): non-persistent buffers, which mmcv's save_checkpoint keeps (its get_state_dict skips the
    non-persistent check, Orion_25 mmcv/utils/checkpoint.py L285-303)."""
    out = {}
    for n in range(layers):
        out[f"{LLM}model.layers.{n}.self_attn.rotary_emb.inv_freq"] = torch.zeros(head_dim // 2)
        for name in ("cos", "sin"):
            out[f"{LLM}model.layers.{n}.self_attn.rotary_emb.{name}_cached"] = torch.zeros(1, 1, positions, head_dim)
    return out


def orion_pth(saved, path, spec, front: dict, lora_rank: int = 16, lora_alpha: float = 16.0, seed: int = 0) -> dict:
    """tiny-orion-release saved at `saved` -> ORION's Orion.pth layout at `path`: the LLM wrapped by peft with a random
    `default` LoRA (r 16, alpha 16) on q/k/v/o whose base weights are W - alpha / r * B @ A (so the merged model is
    the saved one up to float rounding), `lm_head.weight` and the `weighted_mask` buffer (V), the stale rotary
    buffers, the planner (present_distribution, predict_model, ego_fut_decoder) and the training-only
    future_distribution (H + 12), and `front`, the front end's state_dict (a shared module's tensors sharing storage,
    as mmcv's save_checkpoint pickles them). -> the state dict."""
    backbone = load_file(str(saved / "model.safetensors"))
    generator, pairs = torch.Generator().manual_seed(seed), {}
    for key in [k for k in backbone if k.rsplit(".", 2)[-2] in TARGETS and k.endswith(".weight")]:
        w = backbone[key]
        a = torch.randn(lora_rank, w.shape[1], generator=generator) * 0.1
        b = torch.randn(w.shape[0], lora_rank, generator=generator) * 0.1
        backbone[key] = (w.double() - (b.double() @ a.double()) * (lora_alpha / lora_rank)).float()
        pairs[key[:-len(".weight")]] = (a, b)
    state = _wrapped(backbone, {"default": pairs})
    vocab, width = backbone["embed_tokens.weight"].shape
    state[LLM + "lm_head.weight"] = torch.randn(vocab, width, generator=generator) * 0.02
    state[LLM + "weighted_mask"] = torch.ones(vocab)
    state.update(rotary_buffers(spec.num_blocks, spec.hidden_size // spec.num_heads))
    state.update(load_file(str(saved / "action_head.safetensors")))
    state.update(_training_only(width, 12, "", seed))
    state.update(front)
    _mmcv(path, state)
    return state


def minddrive_pth(saved, path, spec, front: dict, seed: int = 0) -> dict:
    """tiny-minddrive-release saved at `saved` -> MindDrive's minddrive_rltrain.pth layout at `path`: the Qwen2 LLM
    wrapped by peft with its two adapters `action_expert` and `decision_expert` (the saved ones), `lm_head.weight`
    (the head's table), `weighted_mask`, both planner branches (present / predict / ego_fut_decoder and pw_*), the
    training-only future distributions (H + 12, H + 40), an RL run's `value_net` / `value_net_pro`, the model-level
    rotary buffer and `front` (as orion_pth's). -> the state dict."""
    backbone = load_file(str(saved / "model.safetensors"))
    pairs = {}
    for adapter in ("action_expert", "decision_expert"):
        tensors = load_file(str(saved / "adapters" / adapter / "adapter_model.safetensors"))
        modules = {k[len("base_model.model."):-len(".lora_A.weight")] for k in tensors if ".lora_A." in k}
        pairs[adapter] = {m: (tensors[f"base_model.model.{m}.lora_A.weight"],
                              tensors[f"base_model.model.{m}.lora_B.weight"]) for m in modules}
    state = _wrapped(backbone, pairs)
    # transformers 4.45's Qwen2Model.rotary_emb.inv_freq (non-persistent: saved by mmcv, rotary_buffers' note)
    state[LLM + "model.rotary_emb.inv_freq"] = torch.zeros(spec.hidden_size // spec.num_heads // 2)
    head = load_file(str(saved / "action_head.safetensors"))
    state[LLM + "lm_head.weight"] = head.pop("lm_head.weight")
    state[LLM + "weighted_mask"] = torch.ones(state[LLM + "lm_head.weight"].shape[0])
    state.update(head)
    width = backbone["embed_tokens.weight"].shape[1]
    state.update(_training_only(width, 12, "", seed))
    state.update(_training_only(width, 40, "pw_", seed + 1))
    a, b = pairs["action_expert"]["layers.0.self_attn.q_proj"]
    state["value_net.base_model.model.model.layers.0.self_attn.q_proj.lora_A.default.weight"] = a.clone()
    state["value_net.base_model.model.model.layers.0.self_attn.q_proj.lora_B.default.weight"] = b.clone()
    state["value_net_pro.weight"], state["value_net_pro.bias"] = torch.zeros(1, width), torch.zeros(1)
    state.update(front)
    _mmcv(path, state)
    return state
