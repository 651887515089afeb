"""One model per (preset, checkpoint) per process: the prefix and suffix nodes in one process share its weights."""

from __future__ import annotations

import threading

from ...model.load import load_vla

_MODELS: dict = {}
_MODELS_LOCK = threading.Lock()


def shared_model(preset: str, checkpoint: str):
    """One VLAModel per (preset, checkpoint) per process: nodes in one process share its weights. A
    checkpoint's model (or a real-size preset's) starts with no weights read (meta): each stage reads its own side (ensure_loaded)."""
    key = (preset, checkpoint)
    with _MODELS_LOCK:
        if key not in _MODELS:
            _MODELS[key] = load_vla(preset=None if checkpoint else preset, checkpoint=checkpoint or None, lazy=True)
        return _MODELS[key]
