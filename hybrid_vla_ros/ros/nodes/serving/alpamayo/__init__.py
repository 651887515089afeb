"""An Alpamayo release (model/plugins/alpamayo) served by the prefix and suffix nodes (model.kind "alpamayo"): the
split of engine/expert_split run by the byte servers of engine/expert_serve, their messages on the graph's topics.

settings.py      the nodes' parameters -> what a frame runs by (sampling, flow, guidance, seed), checked
weights.py       each side's tensors of the release, read once per process and dtype
prefix_stage.py  cameras + odometry in; the frame's inputs; prefill, decode feeds and expert layers [0, p)
suffix_stage.py  each crossing answered; the trajectory and ~/debug/trajectory_info per frame
"""

from .prefix_stage import AlpamayoPrefixStage as Prefix
from .suffix_stage import AlpamayoSuffixStage as Suffix

__all__ = ["Prefix", "Suffix"]
