"""A released Alpamayo directory -> AlpamayoModel, offline, safetensors only:

    config.json                          model_type alpamayo_r1 / alpamayo1_5 and the release's fields (config.py)
    model.safetensors                    or model-0000X-of-0000N.safetensors + model.safetensors.index.json
    <vlm_name_or_path>/config.json       optional: the backbone's Qwen3-VL config, when it names a local folder

Every tensor the config implies must be there in its shape; a tensor the model has no place for is refused
(a different architecture would otherwise load half-read). The model is built on the meta device and each
parameter read straight into the wanted dtype; buffers (rotary tables, Fourier frequencies, the action space's
statistics) are computed from the config and replaced by the file's where it has them."""

from __future__ import annotations

from pathlib import Path

import torch
from torch import nn

from ....errors import ConfigError, expect
from ...checkpoint import _read
from ...checkpoint_files import _opened, _weight_map
from ...seeded import parameters_on_meta
from .config import parse, read_json
from .model import AlpamayoModel

SHOWN = 5   # keys named in an error message


def build(config, meta: bool = True) -> AlpamayoModel:
    """The model of a parsed config; parameters on the meta device unless `meta` is False (seeded init)."""
    if not meta:
        return AlpamayoModel(config)
    with parameters_on_meta():
        return AlpamayoModel(config)


def _check_keys(model: AlpamayoModel, weight_map: dict, directory: Path) -> None:
    params = {name for name, _ in model.named_parameters()}
    missing = sorted(params - set(weight_map))
    expect(not missing, ConfigError,
           f"Alpamayo checkpoint '{directory}': {len(missing)} tensors the config implies are in no safetensors "
           f"file, e.g. {missing[:SHOWN]}")
    unknown = sorted(set(weight_map) - model.published_keys())
    expect(not unknown, ConfigError,
           f"Alpamayo checkpoint '{directory}': {len(unknown)} tensors have no place in the model its config.json "
           f"describes, e.g. {unknown[:SHOWN]} (another architecture or a different expert_cfg?)")


def _set(model: nn.Module, name: str, tensor: torch.Tensor, parameter: bool) -> None:
    path, _, leaf = name.rpartition(".")
    owner = model.get_submodule(path)
    if parameter:
        owner._parameters[leaf] = nn.Parameter(tensor, requires_grad=False)
    else:
        owner._buffers[leaf] = tensor


def _read_all(model: AlpamayoModel, weight_map: dict, dtype: torch.dtype) -> None:
    """Parameters in `dtype`; saved buffers as stored (the action space's statistics stay fp32)."""
    entries = [(n, p, True) for n, p in model.named_parameters()]
    entries += [(n, b, False) for n, b in model.named_buffers() if n in weight_map]
    for name, current, parameter in entries:
        path = weight_map[name]
        with _opened(path) as handle:
            wanted = dtype if parameter else current.dtype
            _set(model, name, _read(handle, path, name, current, wanted), parameter)


def load_release(directory, dtype: torch.dtype = torch.float32, shapes_only: bool = False) -> AlpamayoModel:
    """The model of a released Alpamayo directory (ConfigError with the reason when it is not one)."""
    directory = Path(directory)
    expect(directory.is_dir(), ConfigError, f"Alpamayo checkpoint '{directory}': no such directory")
    config = parse(read_json(directory / "config.json"), directory)
    weight_map = _weight_map(directory)
    model = build(config)
    _check_keys(model, weight_map, directory)
    if not shapes_only:
        _read_all(model, weight_map, dtype)
    model.checkpoint_directory = directory
    return model.eval()
