"""One entry point to get a model: a named preset (seeded weights, offline) or a local checkpoint."""

from __future__ import annotations

import torch

from ..errors import ConfigError, expect
from .checkpoint import load_checkpoint
from .spec import get_preset
from .vla import VLAModel, build_model


def load_vla(preset: str | None = None, checkpoint: str | None = None, dtype: torch.dtype = torch.float32,
             shapes_only: bool = False, keep=None, fresh_head: bool = False) -> VLAModel:
    """keep(model) -> modules: with a checkpoint, read only those (the rest stays on the meta device)."""
    expect((preset is None) != (checkpoint is None), ConfigError,
           f"give exactly one of a preset or a checkpoint directory (got preset={preset!r}, checkpoint={checkpoint!r})")
    if checkpoint is not None:
        return load_checkpoint(checkpoint, dtype=dtype, keep=(lambda m: []) if shapes_only else keep,
                               fresh_head=fresh_head)
    spec = get_preset(preset)
    return build_model(spec, dtype=dtype, device="meta" if shapes_only or spec.shape_only else "cpu")
