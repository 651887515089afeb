"""What a checkpoint directory holds (docs/CHECKPOINTS.md), each file checked before anything is built: the
backbone config, the safetensors weight map (never pickle), the action head's and the scene encoder's metadata,
and the VLASpec they imply. checkpoint.py builds and reads the model from it."""

from __future__ import annotations

import ctypes
import functools
import json
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path

import torch
from safetensors import SafetensorError, safe_open

from ..errors import ConfigError, expect
from .families import load_backbone_config, spec_fields
from .lora import read_adapters
from .tokenize.prompt import has_tokenizer
from .spec import VLASpec

CONFIG_FILE = "config.json"
WEIGHTS_FILE = "model.safetensors"
INDEX_FILE = "model.safetensors.index.json"
HEAD_FILE = "action_head.safetensors"
PROCESSOR_FILE = "preprocessor_config.json"  # optional: the image processor's mean/std/rescale/centre crop
HEAD_FORMAT = "hybrid_vla_action_head/1"
VLA_FIELDS = ("name", "num_cameras", "image_height", "image_width", "text_tokens", "num_waypoints",
              "waypoint_dt_s", "head_hidden", "head", "head_config", "query_tokens", "passes")
SCENE_FILE = "scene_encoder.safetensors"   # scene_* families: the encoder plugin's weights, its name and config
SCENE_FORMAT = "hybrid_vla_scene_encoder/1"
SCENE_PREFIX = "scene_encoder."
# An action-token model's head (TokenHead: proj.{weight,bias}, logits over the bins at the top of the vocabulary)
TOKEN_FIELDS = ("action_head", "action_bins", "action_step_range_m")
# head metadata beside the spec's fields: the action head's query token(s), a prompt slot's token (tokenizer prompts)
PROMPT_FIELDS = ("plan_token", "slot_token")
# written only when set (a reader from before them takes the rest)
OPTIONAL_FIELDS = ("instruction_template", "context", "query_embeddings", "prompt_slots", "frames_per_camera",
                   "frame_stride", "delay_aware")
# a scene-encoded model's own (its backbone config has no vision tower to say them): the image patch side
SCENE_SPEC_FIELDS = ("patch_size",)
PROMPT_FILE = "prompt_embeddings.safetensors"   # learned query embeddings and slot adaptors (model/prompt_embeddings.py)
PROMPT_PREFIX = "prompt_embeddings."
PICKLE_FILES = ("pytorch_model.bin", "pytorch_model.bin.index.json", "model.pt", "model.pth", "model.ckpt")
HEAD_PREFIX = "action_head."


def plain_tensors(tensors: dict) -> dict:
    """Contiguous CPU tensors for safetensors, which refuses tensors sharing storage: a module registered under
    several names (ORION's query_pos in both heads, its per-layer branches: one module) is copied per name."""
    seen, out = set(), {}
    for key, value in tensors.items():
        value = value.detach().contiguous().cpu()
        storage = value.untyped_storage().data_ptr()
        out[key] = value.clone() if storage in seen else value
        seen.add(storage)
    return out

@dataclass
class CheckpointFiles:
    """What a checkpoint directory holds, checked; `read_keys` records every tensor read (tests)."""
    directory: Path
    config: object  # the backbone's transformers config
    weight_map: dict[str, Path]  # checkpoint key -> safetensors file
    head_file: Path | None
    vla: dict
    scene_file: Path | None = None
    prompt_file: Path | None = None
    adapters: dict = field(default_factory=dict)   # LoRA adapter name -> (weights file, its keys)
    read_keys: set[str] = field(default_factory=set)
    head_keys: dict = field(default_factory=dict)   # a release's head read from its backbone files: ours -> its key


def _refuse_pickle(directory: Path) -> None:
    offered = [name for name in PICKLE_FILES if (directory / name).exists()]
    expect(not offered, ConfigError,
           f"checkpoint '{directory}': {offered[0] if offered else ''} is a pickle file; only safetensors are "
           f"loaded (`hybrid-vla convert` reads it with torch's weights-only unpickler and writes safetensors: "
           f"docs/CHECKPOINTS.md)")


def _weight_map(directory: Path) -> dict[str, Path]:
    index = directory / INDEX_FILE
    if index.is_file():
        try:
            entries = json.loads(index.read_text())["weight_map"]
        except (json.JSONDecodeError, UnicodeDecodeError, KeyError, TypeError) as exc:
            raise ConfigError(f"checkpoint '{directory}': {INDEX_FILE} is not a valid index ({exc})") from exc
        files = {name: directory / name for name in set(entries.values())}
        for name, path in sorted(files.items()):
            expect(path.is_file(), ConfigError, f"checkpoint '{directory}': shard {name} named in {INDEX_FILE} is missing")
        return {key: files[name] for key, name in entries.items()}
    _refuse_pickle(directory)
    single = directory / WEIGHTS_FILE
    expect(single.is_file(), ConfigError,
           f"checkpoint '{directory}': no {WEIGHTS_FILE} and no {INDEX_FILE} (only safetensors are loaded)")
    with _opened(single) as handle:
        return {key: single for key in handle.keys()}


@contextmanager
def _opened(path: Path, device: str = "cpu"):
    try:
        with safe_open(str(path), framework="pt", device=device) as handle:
            yield handle
    except (SafetensorError, OSError) as exc:
        raise ConfigError(f"checkpoint file '{path}' is corrupt or unreadable ({exc})") from exc


def read_tensor(handle, path: Path, key: str, expected: torch.Tensor, dtype: torch.dtype) -> torch.Tensor:
    """Tensor `key` of an opened safetensors file, checked against `expected` (shape, float or not), floats in
    `dtype`; the model's loader and Alpamayo's release reader (plugins/alpamayo/release.py) read through it."""
    expect(key in handle.keys(), ConfigError, f"checkpoint file '{path}': tensor '{key}' is missing")
    tensor = handle.get_tensor(key)
    expect(tuple(tensor.shape) == tuple(expected.shape), ConfigError,
           f"checkpoint file '{path}': tensor '{key}' has shape {tuple(tensor.shape)}, the config implies "
           f"{tuple(expected.shape)}")
    expect(tensor.is_floating_point() == expected.is_floating_point(), ConfigError,
           f"checkpoint file '{path}': tensor '{key}' has dtype {tensor.dtype}, expected a "
           f"{'floating point' if expected.is_floating_point() else 'integer'} tensor")
    # Our own memory, not the file's mapping: resident as read (a map pulls in neighbouring tensors' pages
    # on each fault, and follows the file if it is replaced while the car runs).
    converted = tensor.to(dtype) if tensor.is_floating_point() else tensor
    return converted.clone() if converted.data_ptr() == tensor.data_ptr() else converted


def _head_metadata(directory: Path, fresh_head: bool) -> tuple[Path | None, dict]:
    path = directory / HEAD_FILE
    if not path.is_file():
        expect(fresh_head, ConfigError,
               f"checkpoint '{directory}': no {HEAD_FILE} (the action head; docs/CHECKPOINTS.md). Pass "
               f"fresh_head / --fresh-head to start from a freshly initialised head on purpose")
        return None, {}
    with _opened(path) as handle:
        meta = handle.metadata() or {}
    expect(meta.get("format") == HEAD_FORMAT, ConfigError,
           f"checkpoint '{path}': metadata format {meta.get('format')!r}, expected {HEAD_FORMAT!r}")
    stray = sorted(set(meta) - {"format", "hybrid_vla"})
    expect(not stray, ConfigError, f"checkpoint '{path}': metadata keys {stray} are not read: the spec's fields "
           f"(head, head_config, query_tokens, passes, ...) go inside the 'hybrid_vla' JSON (docs/CHECKPOINTS.md)")
    try:
        vla = json.loads(meta.get("hybrid_vla", "{}"))
    except json.JSONDecodeError as exc:
        raise ConfigError(f"checkpoint '{path}': metadata 'hybrid_vla' is not JSON ({exc})") from exc
    known = VLA_FIELDS + TOKEN_FIELDS + PROMPT_FIELDS + OPTIONAL_FIELDS + SCENE_SPEC_FIELDS
    unknown = sorted(set(vla) - set(known))
    expect(isinstance(vla, dict) and not unknown, ConfigError,
           f"checkpoint '{path}': unknown fields {unknown} in metadata 'hybrid_vla'; known: {list(known)}")
    return path, vla


def inspect_checkpoint(directory: str | Path, fresh_head: bool = False) -> CheckpointFiles:
    directory = Path(directory)
    expect(directory.is_dir(), ConfigError, f"checkpoint '{directory}': no such directory")
    expect((directory / CONFIG_FILE).is_file(), ConfigError,
           f"checkpoint '{directory}': missing {CONFIG_FILE} (a Hugging Face model directory is expected)")
    config = load_backbone_config(directory)
    weight_map = _weight_map(directory)
    head_file, vla = _head_metadata(directory, fresh_head)
    scene_file, scene = _scene_metadata(directory)
    lora, adapters = read_adapters(directory, vla.get("passes") or [])
    prompt_file = directory / PROMPT_FILE if (directory / PROMPT_FILE).is_file() else None
    return CheckpointFiles(directory, config, weight_map, head_file, {**vla, **scene, **lora}, scene_file,
                           prompt_file, adapters)


def _scene_metadata(directory: Path) -> tuple[Path | None, dict]:
    """scene_encoder.safetensors -> (its path, the spec fields naming the plugin and its config), or none."""
    path = directory / SCENE_FILE
    if not path.is_file():
        return None, {}
    with _opened(path) as handle:
        meta = handle.metadata() or {}
    expect(meta.get("format") == SCENE_FORMAT and meta.get("plugin"), ConfigError,
           f"checkpoint '{path}': metadata format {meta.get('format')!r} / plugin {meta.get('plugin')!r}, expected "
           f"{SCENE_FORMAT!r} and the scene encoder plugin's name")
    try:
        config = json.loads(meta.get("config", "{}"))
    except json.JSONDecodeError as exc:
        raise ConfigError(f"checkpoint '{path}': metadata 'config' is not JSON ({exc})") from exc
    expect(isinstance(config, dict), ConfigError, f"checkpoint '{path}': metadata 'config' must be a JSON object")
    return path, {"scene_encoder": meta["plugin"], "scene_config": config}


def checkpoint_spec(files: CheckpointFiles) -> VLASpec:
    name = files.vla.get("name") or files.directory.name
    own = {k: v for k, v in files.vla.items() if k not in PROMPT_FIELDS}
    stray = [k for k in SCENE_SPEC_FIELDS if k in own and "scene_encoder" not in own]
    expect(not stray, ConfigError, f"checkpoint '{files.directory}': {stray} in the action head's metadata is for "
                                   f"scene-encoded models only (a vision tower's comes from its config.json)")
    fields = {**spec_fields(files.config, own_tokenizer=has_tokenizer(files.directory)), **own, "name": name}
    try:
        return VLASpec(**fields)
    except TypeError as exc:
        raise ConfigError(f"checkpoint '{files.directory}': {exc}") from exc


@functools.lru_cache(maxsize=1)
def _malloc_trim():
    """glibc's malloc_trim from the C library this process already runs (no search: ctypes.util.find_library
    starts ldconfig or a compiler), or None."""
    try:
        trim = getattr(ctypes.CDLL(None), "malloc_trim", None)
    except OSError:
        return None
    if trim is not None:
        trim.argtypes, trim.restype = [ctypes.c_size_t], ctypes.c_int
    return trim


def release_freed_heap() -> bool:
    """The freed heap given back to the system after each tensor read (glibc's malloc_trim(0); False where the C
    library has none: musl, macOS). Reading a checkpoint's tensors one at a time leaves each read's temporaries
    freed but resident (glibc keeps freed chunks of its heap, and raises its mmap threshold after a large one is
    freed, so the next reads land in the heap too). Measured on ORION's release layout with 2 MiB tensors
    (test/test_own_side.py's wide copy, `hybrid-vla memory`): a prefix held 1.13x to 1.18x its weights' bytes from
    one run to the next, its peak up to 1.49x; with the heap given back after each read, 1.07x and the peak 0.6 MiB
    above that, every run. A trim costs ~0.5 ms: a few hundred ms over a real model's tensors."""
    trim = _malloc_trim()
    if trim is None:
        return False
    trim(0)
    return True
