"""An Alpamayo release's tensors for one side of the graph, read once per process and dtype."""

from __future__ import annotations

import threading

import torch

from .....errors import ConfigError, expect

DTYPES = {"fp32": torch.float32, "bf16": torch.bfloat16, "fp16": torch.float16,
          "int8": torch.float32}   # int8: read fp32, then quantized; fp16: a GPU prefix only (settings.py)
CPU = torch.device("cpu")
_WEIGHTS: dict = {}
_LOCK = threading.Lock()


def with_weights(model, side: str, zone, dtype=torch.float32, int8: bool = False, device=CPU):
    """The release with the tensors of this node's side read (engine/expert_split/sides.py: a prefix never reads
    lm_head or the blocks past the zone, a suffix never the vision tower): one model per directory per process,
    so a prefix and a suffix in one process share it, each side's tensors read once. (The node's shared model is
    read shapes-only; one per dtype.) An Alpamayo preset (model/plugins/alpamayo/tiny.py) is built whole: the
    node's own model in fp32, else once per dtype. int8 (a suffix): a model of its own, read in fp32, its layers
    from the zone's start quantized (engine/expert_split/int8.py). device (a GPU prefix): a model per device too,
    its side read onto it."""
    if int8:
        return _int8_suffix(model, zone)
    from .....engine.expert_split.sides import side_reads
    from .....model.plugins.alpamayo import load_release
    from .....model.plugins.alpamayo.release import read_more
    from .....model.plugins.alpamayo.tiny import build_preset
    device = torch.device(device)
    if model.checkpoint_directory is None:
        if dtype == torch.float32 and device == CPU:
            return model
        with _LOCK:
            key = (model.preset_name, dtype, device)
            if key not in _WEIGHTS:
                _WEIGHTS[key] = build_preset(model.preset_name, dtype).to(device)
            return _WEIGHTS[key]
    key = (str(model.checkpoint_directory), dtype, device)
    with _LOCK:
        if key not in _WEIGHTS:
            _WEIGHTS[key] = load_release(key[0], dtype=dtype, shapes_only=True)
        release = _WEIGHTS[key]
        read_more(release, side_reads(release, side, zone), dtype, None if device == CPU else device)
        return release


def _int8_suffix(model, zone):
    from .....engine.expert_split.int8 import quantize_suffix
    from .....engine.expert_split.sides import side_reads
    from .....model.plugins.alpamayo import load_release
    from .....model.plugins.alpamayo.release import read_more
    from .....model.plugins.alpamayo.tiny import build_preset
    with _LOCK:
        if model.checkpoint_directory is None:
            release = build_preset(model.preset_name, torch.float32)
        else:
            release = load_release(str(model.checkpoint_directory), shapes_only=True)
            read_more(release, side_reads(release, "suffix", zone))
        quantize_suffix(release, zone[0])
        return release


def side_model(node, side: str):
    """The node's release for `side`, refused at configure for what Alpamayo's sides do not do (chunks, warm
    standby, a NUMA node), in the side's dtype (node.dtype_choice: settings.side_dtype)."""
    from .settings import prefix_device, refuse_unserved, side_dtype
    refuse_unserved(node.params, side)
    node.dtype_choice = side_dtype(node.params, side, node.model, node.cores)
    name = node.dtype_choice.dtype
    # int8 quantizes the suffix's layers from the zone's start; the prefix runs [0, p) in fp32, so with a cut that
    # moves, the layers between the zone's start and p would change precision with it, and the plan with them
    expect(name != "int8" or node.zone[0] == node.zone[1], ConfigError,
           f"dtype=int8: an Alpamayo suffix in int8 needs a fixed cut (dynamic zone [{node.zone[0]}, {node.zone[1]}] "
           f"lets it move, and the layers it crosses would change precision, so the plan would change with the cut); "
           f"set dynamic_zone_min = dynamic_zone_max = partition_point (or -1), or dtype fp32 / bf16")
    device = prefix_device(node.params) if side == "prefix" else CPU
    if device.type == "cuda":   # fp32 on the GPU means fp32: TF32 off (engine/placement.py exact_fp32)
        from .....engine.placement import Placement
        Placement(prefix_device=device, prefix_dtype=DTYPES[name]).exact_fp32()
    return with_weights(node.model, side, node.zone, DTYPES[name], int8=name == "int8", device=device)
