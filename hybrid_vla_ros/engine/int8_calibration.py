"""An int8 suffix's calibration, as a file: SmoothQuant smoothing scales per block and linear, and the
trajectory deviation int8 caused on the frames they came from (learn/calibrate.py measures both), so that
`dtype: auto` only takes int8 where the driving holds. Written next to a checkpoint as
`int8_calibration.safetensors` (tensors + JSON metadata; no pickle)."""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path

import torch
from safetensors.torch import safe_open, save_file

from ..errors import ConfigError, expect
from .int8 import quantized_copy

CALIBRATION_FILE = "int8_calibration.safetensors"
FORMAT = "hybrid_vla.int8_calibration.v1"
ALPHA = 0.5   # SmoothQuant's migration strength (learn/calibrate.py)


@dataclass
class Int8Calibration:
    """smoothing: block index -> linear name (inside the block) -> (K,) scales; empty when smoothing did not
    lower the deviation. deviation_m / max_deviation_m: int8 vs fp32 with the smoothing as kept;
    unsmoothed_deviation_m: without any. flavour: how the int8 suffix ran where it was measured
    (engine/placement.py int8_flavour): a CPU that runs another one must calibrate anew."""
    frames: int
    deviation_m: float
    max_deviation_m: float
    unsmoothed_deviation_m: float
    flavour: str
    source: str = ""
    alpha: float = ALPHA
    smoothing: dict[int, dict[str, torch.Tensor]] = field(default_factory=dict)

    def describe(self) -> dict:
        return {"frames": self.frames, "deviation_m": self.deviation_m, "max_deviation_m": self.max_deviation_m,
                "unsmoothed_deviation_m": self.unsmoothed_deviation_m, "smoothed": bool(self.smoothing),
                "flavour": self.flavour, "alpha": self.alpha, "source": self.source}

    def save(self, directory: str | Path) -> Path:
        path = Path(directory) / CALIBRATION_FILE
        tensors = {f"layers.{i}.{name}.smooth": s.contiguous() for i, block in self.smoothing.items()
                   for name, s in block.items()}
        save_file(tensors, str(path), metadata={"format": FORMAT, "calibration": json.dumps(self.describe())})
        return path

    @classmethod
    def load(cls, directory: str | Path) -> "Int8Calibration | None":
        """The calibration next to a checkpoint; None when it has none."""
        path = Path(directory) / CALIBRATION_FILE
        if not path.is_file():
            return None
        with safe_open(str(path), "pt") as f:
            meta = f.metadata() or {}
            expect(meta.get("format") == FORMAT, ConfigError,
                   f"{path}: format {meta.get('format')!r}, expected {FORMAT!r} (written by hybrid-vla calibrate)")
            smoothing: dict[int, dict[str, torch.Tensor]] = {}
            for key in f.keys():
                _, index, rest = key.split(".", 2)
                smoothing.setdefault(int(index), {})[rest.removesuffix(".smooth")] = f.get_tensor(key)
        fields = json.loads(meta["calibration"])
        return cls(fields["frames"], fields["deviation_m"], fields["max_deviation_m"], fields["unsmoothed_deviation_m"],
                   fields["flavour"], fields.get("source", ""), fields.get("alpha", ALPHA), smoothing)


def calibration_of(model) -> Int8Calibration | None:
    """model.int8_calibration; for a checkpoint model, read once from its directory (None: it has none)."""
    files = getattr(model, "checkpoint_files", None)
    if getattr(model, "int8_calibration", None) is None and files is not None and \
            not getattr(model, "int8_calibration_read", False):
        model.int8_calibration = Int8Calibration.load(files.directory)
        model.int8_calibration_read = True
    return getattr(model, "int8_calibration", None)


def int8_block(model, index: int, block: torch.nn.Module) -> torch.nn.Module:
    """Block `index` of `model` as the int8 suffix runs it: a quantized copy, smoothed where the model's
    calibration has scales for it."""
    calibration = calibration_of(model)
    return quantized_copy(block, calibration.smoothing.get(index) if calibration is not None else None)
