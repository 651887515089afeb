"""An Alpamayo release (model/plugins/alpamayo) served by the prefix and suffix nodes: the split of
engine/expert_split run by the byte servers of engine/expert_serve, their messages on the graph's topics.

settings.py      the nodes' parameters -> what a frame runs by (sampling, flow, guidance, seed), checked
prefix_stage.py  cameras + odometry in; the frame's inputs; prefill, decode feeds and expert layers [0, p)
suffix_stage.py  each crossing answered; the trajectory and ~/debug/trajectory_info per frame
"""

from __future__ import annotations

import threading

_WEIGHTS: dict = {}
_LOCK = threading.Lock()


def is_alpamayo(model) -> bool:
    from ....model.plugins.alpamayo.model import AlpamayoModel
    return isinstance(model, AlpamayoModel)


def with_weights(model):
    """The release with its weights read: one per directory per process (the node's shared model is read
    shapes-only; the prefix and the suffix in one process share this one)."""
    from ....model.plugins.alpamayo import load_release
    if model.checkpoint_directory is None:   # an Alpamayo preset (model/plugins/alpamayo/tiny.py): built whole
        return model
    directory = str(model.checkpoint_directory)
    with _LOCK:
        if directory not in _WEIGHTS:
            _WEIGHTS[directory] = load_release(directory)
        return _WEIGHTS[directory]


def expert_stage(node, table: str):
    """The node's stage for an Alpamayo release (None for any other model: the node's own stage)."""
    if not is_alpamayo(node.model):
        return None
    model = with_weights(node.model)
    if table == "hybrid_vla_prefix":
        from .prefix_stage import AlpamayoPrefixStage
        return AlpamayoPrefixStage(node, model)
    from .suffix_stage import AlpamayoSuffixStage
    return AlpamayoSuffixStage(node, model)
