"""The published formats `hybrid-vla convert --from` reads, each -> (flat state dict, what else it says).

    pth            a plain or mmcv `.pth` / `.pt` / `.bin` (mmcv wraps it: {"state_dict": ..., "meta": ...})
    ckpt           a PyTorch Lightning `.ckpt` ({"state_dict": ..., "epoch": ..., "hyper_parameters": ...}), or a
                   trainer's {"state_dict": ...} with nothing else (ReCogDrive's accelerate trainer)
    safetensors    a `.safetensors` file or a directory of them
    internvl_chat  an OpenGVLab remote-code directory (config.json model_type internvl_chat + safetensors or
                   pytorch_model.bin shards) -> transformers' native InternVL names and config

A model released as several files (ReCogDrive: its VLM as an internvl_chat directory, its planner as a Lightning
.ckpt) is read as one source: `read_sources` joins them, refusing a key two of them hold.

Pickle files are read by safe_load.py only: tensors and plain containers, never code."""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path

import torch

from ..errors import ConfigError, expect
from .internvl_chat import native_config, native_tensors
from .mapping import FORMATS
from .safe_load import load_pickled, load_safetensors, tensors_only, unwrap

DEFAULT_UNWRAP = {"pth": ["state_dict", "model", "module"], "ckpt": ["state_dict"]}
REPORTED = ("epoch", "global_step", "meta")   # top-level entries worth naming in the summary


@dataclass
class Source:
    tensors: dict[str, torch.Tensor]
    backbone_config: dict | None = None          # a config.json the source itself implies (internvl_chat)
    config_dir: Path | None = None               # where its tokenizer / processor files are
    notes: dict = field(default_factory=dict)    # what the wrapper said (epoch, global_step, meta keys)


def _pickled(path: Path, fmt: str, keys) -> Source:
    expect(path.is_file(), ConfigError, f"--from {fmt}: '{path}' is not a file")
    loaded = load_pickled(path)
    keys = keys or DEFAULT_UNWRAP[fmt]
    # a ckpt's state dict is under a wrapper key (Lightning's .ckpt; an accelerate trainer's {"state_dict": ...}
    # alone): a bare state dict is a pth
    expect(fmt != "ckpt" or (isinstance(loaded, dict) and any(isinstance(loaded.get(k), dict) for k in keys)),
           ConfigError, f"checkpoint file '{path}': no {' / '.join(repr(k) for k in keys)} entry holding the state "
                        f"dict (a Lightning .ckpt has one; for a bare state dict use --from pth, or --also pth:PATH)")
    state, rest = unwrap(loaded, path, keys)
    notes = {k: (sorted(rest[k]) if isinstance(rest[k], dict) else rest[k]) for k in REPORTED if k in rest}
    return Source(tensors_only(state, path), notes=notes)


def _safetensors_files(path: Path) -> list[Path]:
    files = [path] if path.is_file() else sorted(path.glob("*.safetensors"))
    expect(bool(files), ConfigError, f"'{path}': no .safetensors file")
    return files


def _internvl_chat(directory: Path, keys) -> Source:
    expect(directory.is_dir() and (directory / "config.json").is_file(), ConfigError,
           f"--from internvl_chat: '{directory}' is not a directory with a config.json")
    try:
        chat = json.loads((directory / "config.json").read_text())
    except (json.JSONDecodeError, UnicodeDecodeError) as exc:
        raise ConfigError(f"checkpoint '{directory / 'config.json'}': not JSON ({exc})") from exc
    config = native_config(chat, directory)
    if list(directory.glob("*.safetensors")):
        tensors = load_safetensors(_safetensors_files(directory))
    else:
        bins = sorted(directory.glob("pytorch_model*.bin"))
        expect(bool(bins), ConfigError, f"checkpoint '{directory}': no safetensors and no pytorch_model*.bin")
        tensors = {}
        for path in bins:
            state, _ = unwrap(load_pickled(path), path, keys or [])
            tensors.update(tensors_only(state, path))
    tensors = native_tensors(tensors, config["vision_config"]["hidden_size"])
    return Source(tensors, backbone_config=config, config_dir=directory, notes={"model_type": "internvl_chat"})


def read_source(fmt: str, path: str | Path, unwrap_keys=None) -> Source:
    """`--from FORMAT SRC` -> its tensors (and config, for a model directory)."""
    expect(fmt in FORMATS, ConfigError, f"--from {fmt!r}: known formats {list(FORMATS)}")
    path = Path(path)
    expect(path.exists(), ConfigError, f"source '{path}': no such file or directory")
    if fmt in ("pth", "ckpt"):
        return _pickled(path, fmt, unwrap_keys)
    if fmt == "safetensors":
        return Source(load_safetensors(_safetensors_files(path)))
    return _internvl_chat(path, unwrap_keys)


def read_sources(inputs: list[tuple[str, str | Path]], unwrap_keys=None) -> Source:
    """[(FORMAT, SRC), ...] -> one Source: every input's tensors (a key in two inputs is refused, naming both),
    the first backbone config and side-file directory any input brings, the notes prefixed by the input's
    format when there are several."""
    read = [(fmt, Path(path), read_source(fmt, path, unwrap_keys)) for fmt, path in inputs]
    if len(read) == 1:
        return read[0][2]
    tensors, where, notes = {}, {}, {}
    for fmt, path, source in read:
        for key in sorted(set(source.tensors) & set(tensors))[:1]:
            raise ConfigError(f"source key '{key}' is in both '{where[key]}' and '{path}': each tensor must come "
                              f"from one input")
        tensors.update(source.tensors)
        where.update(dict.fromkeys(source.tensors, path))
        notes.update({f"{fmt} {k}": v for k, v in source.notes.items()})
    config = next((s.backbone_config for _, _, s in read if s.backbone_config is not None), None)
    config_dir = next((s.config_dir for _, _, s in read if s.config_dir is not None), None)
    return Source(tensors, backbone_config=config, config_dir=config_dir, notes=notes)
