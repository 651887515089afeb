"""Partition rules, in one place: a valid cut, the dynamic zone (one value type), the modules each side holds
and their bytes. Used by the stages, the nodes, both scheduler policies, the scheduler node and `info`."""

from __future__ import annotations

import math
from typing import NamedTuple

import torch

from ...errors import ConfigError, expect
from ...model.vla import VLAModel
from ..placement import DTYPE_NAMES

UNSET = -1  # a dynamic_zone_min/max parameter of -1 means "the partition point itself", for every node


def check_partition(partition, num_blocks: int, where: str = "partition") -> int:
    expect(isinstance(partition, int) and not isinstance(partition, bool), ConfigError,
           f"{where}: {partition!r} is not an integer")
    expect(0 <= partition <= num_blocks, ConfigError,
           f"{where}: {partition} is outside 0..{num_blocks} (the model has {num_blocks} blocks)")
    return partition


class Zone(NamedTuple):
    """The dynamic zone [lo, hi]: the partition may move anywhere inside it because blocks lo..hi-1 are resident
    on both sides. Unpacks as (lo, hi)."""
    lo: int
    hi: int

    @classmethod
    def around(cls, partition: int, num_blocks: int, zone=None) -> "Zone":
        """`zone` (lo, hi) or None (= no dynamic zone: [partition, partition]), checked against the model."""
        lo, hi = zone if zone is not None else (partition, partition)
        check_partition(lo, num_blocks, "dynamic zone start")
        check_partition(hi, num_blocks, "dynamic zone end")
        expect(lo <= hi, ConfigError, f"dynamic zone [{lo}, {hi}]: start must not exceed end")
        expect(lo <= partition <= hi, ConfigError, f"partition {partition} lies outside the dynamic zone [{lo}, {hi}]")
        return cls(lo, hi)

    @classmethod
    def from_parameters(cls, zone_min: int, zone_max: int, partition: int, num_blocks: int) -> "Zone":
        """From the nodes' dynamic_zone_min/max parameters, where -1 means the partition point itself."""
        check_partition(partition, num_blocks, "partition_point")
        lo = partition if zone_min == UNSET else zone_min
        hi = partition if zone_max == UNSET else zone_max
        check_partition(lo, num_blocks, "dynamic_zone_min")
        check_partition(hi, num_blocks, "dynamic_zone_max")
        expect(lo <= partition <= hi, ConfigError,
               f"partition_point {partition} lies outside the dynamic zone [{lo}, {hi}]")
        return cls(lo, hi)

    def contains(self, partition: int) -> bool:
        return self.lo <= partition <= self.hi

    def check(self, partition, num_blocks: int, where: str = "partition_point") -> int:
        """A run-time move of the cut: refused with the reason when it leaves the zone."""
        check_partition(partition, num_blocks, where)
        expect(self.contains(partition), ConfigError,
               f"{where} {partition} lies outside the dynamic zone [{self.lo}, {self.hi}] (blocks outside it are "
               f"not resident on both sides; widen dynamic_zone_min/max and restart)")
        return partition


def prefix_modules(model: VLAModel, partition: int) -> list[torch.nn.Module]:
    """What the prefix device holds: vision (or the scene encoder), embeddings, rotary tables and blocks [0, p)."""
    decoder = model.decoder
    owned = [m for m in (model.scene_encoder, model.prompt_embeddings) if m is not None]
    if model.backbone is not decoder:  # a VLM: its vision tower and projector (a plain LLM is its decoder)
        owned += [m for name, m in model.backbone.named_children() if m is not decoder]
    owned += [m for name, m in decoder.named_children() if name not in ("layers", "norm")]
    return owned + list(decoder.layers[:partition])


def suffix_modules(model: VLAModel, partition: int) -> list[torch.nn.Module]:
    """What the CPU holds: blocks [partition, L), the final norm and the action head."""
    return list(model.decoder.layers[partition:]) + [model.decoder.norm, model.action_head]


def side_modules(model: VLAModel, lo: int, hi: int) -> list[torch.nn.Module]:
    """Blocks [lo, hi), with the prefix's other parts when lo == 0 and the suffix's when hi == L."""
    modules = list(model.decoder.layers[lo:hi])
    if lo == 0:
        modules = prefix_modules(model, 0) + modules
    if hi == model.num_blocks:
        modules += [model.decoder.norm, model.action_head]
    return modules


def module_bytes(modules) -> tuple[int, int]:
    """(parameter count, bytes of parameters + buffers); works on meta tensors too."""
    params = sum(p.numel() for m in modules for p in m.parameters())
    nbytes = sum(t.numel() * t.element_size() for m in modules for t in list(m.parameters()) + list(m.buffers()))
    return params, nbytes


def prefix_bytes_by_partition(model: VLAModel) -> list[int]:
    """Bytes the prefix device holds at each partition 0..L (for a memory budget)."""
    return [module_bytes(prefix_modules(model, p))[1] for p in range(model.num_blocks + 1)]


def partition_report(model: VLAModel, partition: int, zone: tuple[int, int] | None = None) -> dict:
    """Blocks, parameters and bytes on each side of the cut. With a dynamic zone [lo, hi], blocks lo..hi-1
    are resident on both sides: `zone_bytes` is what that residency costs (once more on each device)."""
    check_partition(partition, model.num_blocks)
    lo, hi = Zone.around(partition, model.num_blocks, zone)
    prefix_params, prefix_bytes = module_bytes(prefix_modules(model, partition))
    suffix_params, suffix_bytes = module_bytes(suffix_modules(model, partition))
    total_params, total_bytes = module_bytes([model])
    dtype = next(model.parameters()).dtype
    return {"preset": model.spec.name, "family": model.spec.family, "num_blocks": model.num_blocks,
            "partition": partition, "prefix_blocks": partition, "suffix_blocks": model.num_blocks - partition,
            "prefix_params": prefix_params, "suffix_params": suffix_params, "total_params": total_params,
            "prefix_bytes": prefix_bytes, "suffix_bytes": suffix_bytes, "total_bytes": total_bytes,
            "zone": [lo, hi], "zone_bytes": module_bytes(model.decoder.layers[lo:hi])[1],
            "prefix_resident_bytes": module_bytes(prefix_modules(model, hi))[1],
            "suffix_resident_bytes": module_bytes(suffix_modules(model, lo))[1],
            "dtype": DTYPE_NAMES.get(dtype, str(dtype)), **boundary_bytes(model, partition, dtype.itemsize)}


def boundary_bytes(model: VLAModel, partition: int, itemsize: int) -> dict:
    """Bytes one frame's boundary state carries at this cut: hidden (S, H), positions and mask (int64), and for
    a DeepStack family cut below its depth k the k - p additions at the n image tokens (k - p, n, H) + their
    indices (n,)."""
    spec, family = model.spec, model.family
    image_tokens, seq = model.image_tokens, model.sequence_length
    positions = math.prod(family.position_ids_shape(seq))                               # 3 S (M-RoPE) or S
    plain = model.num_passes * (seq * spec.hidden_size * itemsize + (positions + seq) * 8)  # + the mask, per pass
    due = max(0, family.deepstack_blocks(model.backbone.config) - partition)
    deepstack = due * image_tokens * spec.hidden_size * itemsize + image_tokens * 8 if due else 0
    return {"boundary_tokens": seq, "boundary_bytes": plain + deepstack, "deepstack_bytes": deepstack}
