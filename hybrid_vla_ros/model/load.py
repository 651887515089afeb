"""One entry point to get a model: a named preset (seeded weights, offline) or a local checkpoint."""

from __future__ import annotations

import hashlib
from pathlib import Path

import torch

from ..errors import ConfigError, expect
from .checkpoint import ensure_loaded, load_checkpoint
from .plugins import alpamayo, onevl
from .presets import ALPAMAYO_PRESETS, get_preset
from .vla import VLAModel, build_model


BUILTIN_PREFIX = "builtin:"
BUILTIN_DIR = Path(__file__).resolve().parents[1] / "data" / "models"   # checkpoints shipped in the package


def builtin_checkpoints() -> list[str]:
    return sorted(p.name for p in BUILTIN_DIR.iterdir() if p.is_dir()) if BUILTIN_DIR.is_dir() else []


def resolve_checkpoint(checkpoint: str) -> str:
    """'builtin:NAME' -> the directory of the checkpoint shipped in the package; any other value as given."""
    if not checkpoint.startswith(BUILTIN_PREFIX):
        return checkpoint
    name = checkpoint[len(BUILTIN_PREFIX):]
    expect(name in builtin_checkpoints(), ConfigError,
           f"checkpoint '{checkpoint}': no such built-in checkpoint (shipped: "
           f"{', '.join(BUILTIN_PREFIX + n for n in builtin_checkpoints()) or 'none'})")
    return str(BUILTIN_DIR / name)


def load_vla(preset: str | None = None, checkpoint: str | None = None, dtype: torch.dtype = torch.float32,
             shapes_only: bool = False, keep=None, fresh_head: bool = False, lazy: bool = False) -> VLAModel:
    """keep(model) -> modules: with a checkpoint (a directory, or 'builtin:NAME' for one shipped in the package)
    or a real-size preset, read (draw) only those; the rest stays on the meta device. lazy: none of them (each
    stage then reads its own side: ensure_loaded). shapes_only: never any."""
    expect((preset is None) != (checkpoint is None), ConfigError,
           f"give exactly one of a preset or a checkpoint directory (got preset={preset!r}, checkpoint={checkpoint!r})")
    if checkpoint is not None:
        if alpamayo.is_release(resolve_checkpoint(checkpoint)):   # a published Alpamayo directory, as released:
            return alpamayo.load_release(resolve_checkpoint(checkpoint), dtype=dtype,   # its own model (the nodes
                                         shapes_only=shapes_only or lazy)               # serve it: ros/nodes/serving/alpamayo)
        if onevl.is_release(resolve_checkpoint(checkpoint)):   # a OneVL directory as its authors save it
            return onevl.load_release(resolve_checkpoint(checkpoint), dtype, keep, shapes_only or lazy)
        return load_checkpoint(resolve_checkpoint(checkpoint), dtype=dtype,
                               keep=(lambda m: []) if shapes_only or lazy else keep, fresh_head=fresh_head)
    if preset in ALPAMAYO_PRESETS:   # an Alpamayo release at unit-test size: its own model, built whole
        from .plugins.alpamayo.tiny import build_preset
        return build_preset(preset, dtype, shapes_only)
    spec = get_preset(preset)
    if shapes_only:
        return build_model(spec, dtype=dtype, device="meta")
    model = build_model(spec, dtype=dtype, lazy=lazy or keep is not None)
    if keep is not None and not lazy and spec.real_size:
        ensure_loaded(model, keep(model), dtype)
    return model


WEIGHT_SAMPLE_BYTES = 1 << 16


def model_id(model: VLAModel) -> int:
    """A 63-bit id of the model a stage runs, equal on every stage that loads the same model: the spec (seeded
    weights of a preset follow from it) and, for a checkpoint, each weight file's name, size and last 64 KiB
    (fine-tunes of one architecture differ there). Computed once per model. Never 0 (0 = "any")."""
    cached = getattr(model, "_model_id", None)
    if cached is not None:
        return cached
    digest = hashlib.sha256(repr(model.spec).encode())
    files = getattr(model, "checkpoint_files", None)
    if files is not None:
        paths = set(files.weight_map.values()) | {f for f in (files.head_file, files.scene_file) if f}
        for path in sorted(paths):
            size = path.stat().st_size
            digest.update(f"{path.name}:{size}".encode())
            with open(path, "rb") as f:
                f.seek(max(0, size - WEIGHT_SAMPLE_BYTES))
                digest.update(f.read())
    model._model_id = (int.from_bytes(digest.digest()[:8], "little") >> 1) or 1
    return model._model_id
