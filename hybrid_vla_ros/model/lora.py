"""Several passes per frame with their own LoRA adapters (MindDrive: a decision pass and an action pass over the
same scene tokens), never merged into the shared weights.

A model with passes runs them as one batch: row b of every hidden state is pass b. Each adapted linear layer
(`lora_targets` of every decoder block) keeps its base weights and gains `lora_adapters` (one low-rank A, B pair
per named adapter) and a forward hook adding, to row b, scaling * B(A(x_b)) of pass b's adapter (rows of a pass
without one get nothing). The adapters live inside the blocks, so they sit on whichever side of the cut their
block does. On disk they are peft's layout: `adapters/<name>/adapter_model.safetensors` (keys
`base_model.model.<module>.lora_A.weight`, `lora_B.weight`) with `adapter_config.json` (r, lora_alpha,
target_modules); the backbone's own safetensors stay untouched.
"""

from __future__ import annotations

import math

import torch
from torch import nn

from ..errors import ConfigError, expect

ADAPTERS = "lora_adapters"   # the child module name inside an adapted linear layer


class LoRA(nn.Module):
    def __init__(self, in_features: int, out_features: int, rank: int):
        super().__init__()
        self.lora_A = nn.Linear(in_features, rank, bias=False)
        self.lora_B = nn.Linear(rank, out_features, bias=False)
        nn.init.normal_(self.lora_A.weight, std=1.0 / math.sqrt(in_features))
        nn.init.normal_(self.lora_B.weight, std=0.02)   # trained adapters are non-zero: a seeded one is too


def lora_forward(module: nn.Linear, args, output: torch.Tensor) -> torch.Tensor:
    """Forward hook of an adapted linear layer: output (P, S, out) of input (P, S, in), row b += pass b's delta."""
    x, rows = args[0], module.lora_rows
    expect(x.dim() == 3 and x.shape[0] == len(rows), ConfigError,
           f"a {len(rows)}-pass model's adapted layer got input {tuple(x.shape)}: one row per pass expected")
    out = []
    for b, name in enumerate(rows):
        if name:
            adapter = module.lora_adapters[name]
            out.append(output[b] + adapter.lora_B(adapter.lora_A(x[b])) * module.lora_scaling)
        else:
            out.append(output[b])
    return torch.stack(out)


def attach_adapters(decoder, spec) -> None:
    """Give every `lora_targets` linear of every block one adapter per named pass adapter (seeded: the caller
    forks the RNG) and the hook that applies them by row."""
    names = sorted({p["adapter"] for p in spec.passes if p.get("adapter")})
    rows = tuple(p.get("adapter") or None for p in spec.passes)
    for layer in decoder.layers:
        for target in spec.lora_targets:
            linear = adapted_linear(layer, target)
            setattr(linear, ADAPTERS, nn.ModuleDict(
                {n: LoRA(linear.in_features, linear.out_features, spec.lora_rank) for n in names}))
            linear.lora_rows, linear.lora_scaling = rows, spec.lora_alpha / spec.lora_rank
            linear.register_forward_hook(lora_forward)


def adapted_linear(layer: nn.Module, target: str) -> nn.Linear:
    """`q_proj` -> the block's self_attn.q_proj (attention targets) or mlp.<target> (MLP targets)."""
    for parent in ("self_attn", "mlp"):
        module = getattr(getattr(layer, parent, None), target, None)
        if isinstance(module, nn.Linear):
            return module
    raise ConfigError(f"lora target {target!r}: not a linear layer of the decoder block's self_attn or mlp")


def is_adapter_parameter(name: str) -> bool:
    return f".{ADAPTERS}." in name


def peft_key(name: str) -> tuple[str, str]:
    """Our parameter name `backbone.<module>.lora_adapters.<adapter>.lora_A.weight` -> (adapter, its key in the
    adapter's safetensors: `base_model.model.<module>.lora_A.weight`)."""
    module, _, rest = name.partition(f".{ADAPTERS}.")
    adapter, _, leaf = rest.partition(".")
    return adapter, "base_model.model." + module[len("backbone."):] + "." + leaf


ADAPTER_DIR, ADAPTER_WEIGHTS, ADAPTER_CONFIG = "adapters", "adapter_model.safetensors", "adapter_config.json"


def save_adapters(model, directory) -> None:
    """Each named adapter to adapters/<name>/ in peft's layout (weights + adapter_config.json)."""
    import json
    from pathlib import Path
    from safetensors.torch import save_file
    spec, out = model.spec, {}
    for name, param in model.named_parameters():
        if is_adapter_parameter(name):
            adapter, key = peft_key(name)
            out.setdefault(adapter, {})[key] = param.detach().contiguous().cpu()
    for adapter, tensors in out.items():
        folder = Path(directory) / ADAPTER_DIR / adapter
        folder.mkdir(parents=True, exist_ok=True)
        save_file(tensors, str(folder / ADAPTER_WEIGHTS), metadata={"format": "pt"})
        (folder / ADAPTER_CONFIG).write_text(json.dumps({
            "peft_type": "LORA", "r": spec.lora_rank, "lora_alpha": spec.lora_alpha,
            "target_modules": list(spec.lora_targets), "bias": "none", "use_dora": False}, indent=2))


def read_adapters(directory, passes: list) -> tuple[dict, dict]:
    """The adapters the passes name, from adapters/<name>/ (peft's layout) -> (the spec's lora fields,
    adapter name -> (weights file, its keys)). Every adapter must share rank, alpha and targets."""
    import json
    from pathlib import Path
    from safetensors import safe_open
    names = sorted({p.get("adapter") for p in passes if isinstance(p, dict) and p.get("adapter")})
    fields, files = {}, {}
    for name in names:
        folder = Path(directory) / ADAPTER_DIR / name
        expect((folder / ADAPTER_WEIGHTS).is_file() and (folder / ADAPTER_CONFIG).is_file(), ConfigError,
               f"checkpoint '{directory}': a pass names adapter {name!r}, but {folder} has no {ADAPTER_WEIGHTS} "
               f"and {ADAPTER_CONFIG} (peft's layout)")
        try:
            config = json.loads((folder / ADAPTER_CONFIG).read_text())
        except json.JSONDecodeError as exc:
            raise ConfigError(f"checkpoint '{folder / ADAPTER_CONFIG}': not JSON ({exc})") from exc
        expect(config.get("peft_type", "LORA") == "LORA" and not config.get("use_dora") and
               config.get("bias", "none") == "none", ConfigError,
               f"checkpoint '{folder / ADAPTER_CONFIG}': only plain LoRA (no DoRA, no bias) is applied")
        mine = {"lora_rank": config.get("r"), "lora_alpha": float(config.get("lora_alpha", 0)),
                "lora_targets": sorted(config.get("target_modules") or [])}
        expect(not fields or fields == mine, ConfigError,
               f"checkpoint '{directory}': adapter {name!r} has {mine}, the others {fields}: one rank, alpha and "
               f"target set for every adapter")
        fields = mine
        with safe_open(str(folder / ADAPTER_WEIGHTS), "pt") as handle:
            files[name] = (folder / ADAPTER_WEIGHTS, set(handle.keys()))
    return fields, files


def adapter_source(files: dict, name: str, directory) -> tuple:
    """Our adapter parameter -> (its file, its key there): peft keys of the bare decoder or of a causal LM
    (`base_model.model.model.<module>`)."""
    adapter, key = peft_key(name)
    expect(adapter in files, ConfigError, f"checkpoint '{directory}': no adapter {adapter!r} for {name}")
    path, keys = files[adapter]
    nested = key.replace("base_model.model.", "base_model.model.model.", 1)
    found = key if key in keys else nested if nested in keys else None
    expect(found is not None, ConfigError, f"checkpoint '{path}': tensor '{key}' is missing")
    return path, found
