"""Every source tensor to exactly one place: a part (backbone, action head, scene encoder), a LoRA adapter, or
dropped on purpose by the mapping. A key nothing takes is refused, naming it; so is a name two keys map to."""

from __future__ import annotations

from dataclasses import dataclass, field

import torch

from ..errors import ConfigError, expect
from .mapping import LORA_KEY, PARTS, Mapping


@dataclass
class Routed:
    parts: dict = field(default_factory=lambda: {p: {} for p in PARTS})   # part -> {name: tensor}
    adapters: dict = field(default_factory=dict)     # adapter -> {peft key: tensor}
    dropped: list = field(default_factory=list)      # source keys, as in the file
    origin: dict = field(default_factory=dict)       # (place, name) -> source key (collisions name both)

    def put(self, place: tuple, name: str, tensor: torch.Tensor, key: str, table: dict) -> None:
        seen = self.origin.get((place, name))
        expect(seen is None, ConfigError,
               f"source keys '{seen}' and '{key}' both map to '{name}' in {'/'.join(place)}: fix the mapping's renames")
        self.origin[(place, name)] = key
        table[name] = tensor


def _adapter(routed: Routed, mapping: Mapping, key: str, renamed: str, tensor) -> bool:
    """A peft multi-adapter key -> adapters/<name>/ under peft's name for the backbone module; True if taken."""
    found = LORA_KEY.match(renamed) if mapping.adapters is not None else None
    if found is None:
        return False
    target = mapping.part_of(found["module"])
    expect(target is not None and target[0] == "backbone", ConfigError,
           f"source key '{key}' (renamed '{renamed}'): a LoRA adapter of module '{found['module']}', which no "
           f"parts rule gives to the backbone (adapters are applied to the backbone's layers only)")
    name = f"base_model.model.{target[1]}.lora_{found['ab']}.weight"
    table = routed.adapters.setdefault(found["adapter"], {})
    routed.put(("adapters", found["adapter"]), name, tensor, key, table)
    return True


def route(tensors: dict[str, torch.Tensor], mapping: Mapping) -> Routed:
    routed, unmapped = Routed(), []
    for key in sorted(tensors):
        renamed = mapping.renamed(key)
        if mapping.dropped(renamed):
            routed.dropped.append(key)
        elif _adapter(routed, mapping, key, renamed, tensors[key]):
            continue
        elif (target := mapping.part_of(renamed)) is not None:
            routed.put((target[0],), target[1], mapping.shaped(renamed, tensors[key]), key, routed.parts[target[0]])
        else:
            unmapped.append(key if key == renamed else f"{key} (renamed: {renamed})")
    expect(not unmapped, ConfigError,
           f"mapping '{mapping.source}': {len(unmapped)} source key(s) are in no part and not dropped: "
           f"{', '.join(unmapped[:8])}{' ...' if len(unmapped) > 8 else ''}. Add a parts rule, or list them "
           f"under drop if they are left out on purpose")
    return routed


def merge_adapters(routed: Routed, alpha: float) -> None:
    """A one-pass model's LoRA (peft's default adapter) added into its backbone weights: W + alpha / r * B @ A,
    computed in float64, stored in W's dtype; the adapters are then gone from `routed`."""
    expect(len(routed.adapters) <= 1, ConfigError,
           f"adapters {sorted(routed.adapters)}: merge takes one adapter (a model with several passes keeps them "
           f"apart: leave merge out)")
    backbone = routed.parts["backbone"]
    for name, tensors in routed.adapters.items():
        unpaired = sorted(k for k in tensors if k.endswith(".lora_B.weight")
                          and k.replace(".lora_B.", ".lora_A.") not in tensors)
        expect(not unpaired, ConfigError, f"adapter {name!r}: lora_B without its lora_A: {unpaired[:4]}")
        for key_a in [k for k in tensors if k.endswith(".lora_A.weight")]:
            module = key_a[len("base_model.model."):-len(".lora_A.weight")]
            a, b = tensors[key_a], tensors.get(key_a.replace(".lora_A.", ".lora_B."))
            weight = backbone.get(f"{module}.weight")
            expect(b is not None and weight is not None and tuple(weight.shape) == (b.shape[0], a.shape[1]),
                   ConfigError, f"adapter {name!r}: module '{module}' needs lora_A, lora_B and its base weight of "
                                f"shape (out, in) = ({'?' if b is None else b.shape[0]}, {a.shape[1]})")
            delta = (b.double() @ a.double()) * (alpha / a.shape[0])
            backbone[f"{module}.weight"] = (weight.double() + delta).to(weight.dtype)
    routed.adapters = {}
