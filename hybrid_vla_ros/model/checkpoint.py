"""Local checkpoint directories: `hybrid_vla.json` (the VLASpec) + `model.safetensors`. Never pickle, no hub."""

from __future__ import annotations

import json
from pathlib import Path

import torch
from safetensors import SafetensorError
from safetensors.torch import load_file, save_file

from ..errors import ConfigError, expect
from .spec import VLASpec
from .vla import VLAModel, build_model

SPEC_FILE = "hybrid_vla.json"
WEIGHTS_FILE = "model.safetensors"


def save_checkpoint(model: VLAModel, directory: str | Path) -> Path:
    directory = Path(directory)
    directory.mkdir(parents=True, exist_ok=True)
    (directory / SPEC_FILE).write_text(json.dumps(model.spec.to_dict(), indent=2))
    state = {k: v.detach().contiguous().cpu() for k, v in model.state_dict().items()}
    save_file(state, str(directory / WEIGHTS_FILE), metadata={"format": "pt", "producer": "hybrid_vla_ros"})
    return directory


def load_spec(directory: Path) -> VLASpec:
    spec_path = directory / SPEC_FILE
    expect(spec_path.is_file(), ConfigError, f"checkpoint '{directory}': missing {SPEC_FILE}")
    try:
        data = json.loads(spec_path.read_text())
    except (json.JSONDecodeError, UnicodeDecodeError) as exc:
        raise ConfigError(f"checkpoint '{directory}': {SPEC_FILE} is not valid JSON ({exc})") from exc
    expect(isinstance(data, dict), ConfigError, f"checkpoint '{directory}': {SPEC_FILE} must hold a JSON object")
    return VLASpec.from_dict(data, source=str(spec_path))


def load_checkpoint(directory: str | Path, dtype: torch.dtype = torch.float32) -> VLAModel:
    directory = Path(directory)
    expect(directory.is_dir(), ConfigError, f"checkpoint '{directory}': no such directory")
    spec = load_spec(directory)
    weights = directory / WEIGHTS_FILE
    expect(weights.is_file(), ConfigError,
           f"checkpoint '{directory}': missing {WEIGHTS_FILE} (only safetensors are loaded, never pickle)")
    try:
        state = load_file(str(weights))
    except (SafetensorError, OSError, ValueError) as exc:
        raise ConfigError(f"checkpoint '{directory}': {WEIGHTS_FILE} is corrupt or unreadable ({exc})") from exc
    model = build_model(spec, dtype=torch.float32)
    expected = model.state_dict()
    missing = sorted(set(expected) - set(state))
    unexpected = sorted(set(state) - set(expected))
    expect(not missing and not unexpected, ConfigError,
           f"checkpoint '{directory}': weights do not match spec '{spec.name}' "
           f"(missing {missing[:5]}{'...' if len(missing) > 5 else ''}, "
           f"unexpected {unexpected[:5]}{'...' if len(unexpected) > 5 else ''})")
    for key, tensor in state.items():
        expect(tuple(tensor.shape) == tuple(expected[key].shape), ConfigError,
               f"checkpoint '{directory}': tensor '{key}' has shape {tuple(tensor.shape)}, "
               f"spec expects {tuple(expected[key].shape)}")
    model.load_state_dict(state, strict=True)
    return model.to(dtype).eval()
