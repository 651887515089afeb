"""Which parameters of an Alpamayo release each side of the cut reads (prefix.py and suffix.py run nothing else).

For a cut that may move anywhere in the zone [lo, hi] (the scheduler's), with L VLM blocks and L_e expert layers:
  prefix: the vision tower, the token embeddings, VLM blocks [0, hi), expert layers [0, min(hi, L_e)),
          action_in_proj (the flow time's Fourier conditioning of the action state);
  suffix: VLM blocks [lo, L), the final norm, lm_head, expert layers [min(lo, L_e), L_e), the expert's norm,
          action_out_proj.
Blocks lo..hi-1 are read on both sides: that is what lets p move without a load. Buffers (rotary tables, the
action space's statistics) are small and read on both sides. Everything else stays on the meta device."""

from __future__ import annotations

import re
from collections.abc import Callable

VLM_BLOCK = re.compile(r"^vlm\.model\.language_model\.layers\.(\d+)\.")
EXPERT_LAYER = re.compile(r"^expert\.layers\.(\d+)\.")
PREFIX_MODULES = ("vlm.model.visual.", "vlm.model.language_model.embed_tokens.", "action_in_proj.")
SUFFIX_MODULES = ("vlm.model.language_model.norm.", "vlm.lm_head.", "expert.norm.", "action_out_proj.")
SIDES = ("prefix", "suffix")


def side_reads(model, side: str, zone: tuple[int, int]) -> Callable[[str], bool]:
    """name -> whether the `side` of a cut moving in `zone` runs the parameter of that name."""
    if side not in SIDES:
        raise ValueError(f"side {side!r}: expected one of {SIDES}")
    lo, hi = zone
    layers = model.expert.config.num_hidden_layers
    blocks = model.config.vlm.text_config.num_hidden_layers
    if side == "prefix":
        modules, vlm, expert = PREFIX_MODULES, range(0, hi), range(0, min(hi, layers))
    else:
        modules, vlm, expert = SUFFIX_MODULES, range(lo, blocks), range(min(lo, layers), layers)

    def reads(name: str) -> bool:
        for pattern, kept in ((VLM_BLOCK, vlm), (EXPERT_LAYER, expert)):
            found = pattern.match(name)
            if found:
                return int(found.group(1)) in kept
        return name.startswith(modules)
    return reads
