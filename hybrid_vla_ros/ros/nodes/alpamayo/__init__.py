"""An Alpamayo release (model/plugins/alpamayo) served by the prefix and suffix nodes: the split of
engine/expert_split run by the byte servers of engine/expert_serve, their messages on the graph's topics.

settings.py      the nodes' parameters -> what a frame runs by (sampling, flow, guidance, seed), checked
prefix_stage.py  cameras + odometry in; the frame's inputs; prefill, decode feeds and expert layers [0, p)
suffix_stage.py  each crossing answered; the trajectory and ~/debug/trajectory_info per frame
"""

from __future__ import annotations

import threading

import torch

DTYPES = {"fp32": torch.float32, "bf16": torch.bfloat16}
_WEIGHTS: dict = {}
_LOCK = threading.Lock()


def is_alpamayo(model) -> bool:
    from ....model.plugins.alpamayo.model import AlpamayoModel
    return isinstance(model, AlpamayoModel)


def with_weights(model, side: str, zone, dtype=torch.float32):
    """The release with the tensors of this node's side read (engine/expert_split/sides.py: a prefix never reads
    lm_head or the blocks past the zone, a suffix never the vision tower): one model per directory per process,
    so a prefix and a suffix in one process share it, each side's tensors read once. (The node's shared model is
    read shapes-only; one per dtype.) An Alpamayo preset (model/plugins/alpamayo/tiny.py) is built whole: the
    node's own model in fp32, else once per dtype."""
    from ....engine.expert_split.sides import side_reads
    from ....model.plugins.alpamayo import load_release
    from ....model.plugins.alpamayo.release import read_more
    from ....model.plugins.alpamayo.tiny import build_preset
    if model.checkpoint_directory is None:
        if dtype == torch.float32:
            return model
        with _LOCK:
            if (model.preset_name, dtype) not in _WEIGHTS:
                _WEIGHTS[model.preset_name, dtype] = build_preset(model.preset_name, dtype)
            return _WEIGHTS[model.preset_name, dtype]
    key = (str(model.checkpoint_directory), dtype)
    with _LOCK:
        if key not in _WEIGHTS:
            _WEIGHTS[key] = load_release(key[0], dtype=dtype, shapes_only=True)
        release = _WEIGHTS[key]
        read_more(release, side_reads(release, side, zone), dtype)
        return release


def expert_stage(node, table: str):
    """The node's stage for an Alpamayo release (None for any other model: the node's own stage)."""
    if not is_alpamayo(node.model):
        return None
    from ...params import chosen_cores
    from .settings import refuse_unserved, side_dtype
    side = "prefix" if table == "hybrid_vla_prefix" else "suffix"
    refuse_unserved(node.params, side)
    node.dtype_choice = side_dtype(node.params, side, node.model, chosen_cores(node.params["cores"]) or None)
    model = with_weights(node.model, side, node.zone, DTYPES[node.dtype_choice.dtype])
    if side == "prefix":
        from .prefix_stage import AlpamayoPrefixStage
        return AlpamayoPrefixStage(node, model)
    from .suffix_stage import AlpamayoSuffixStage
    return AlpamayoSuffixStage(node, model)
