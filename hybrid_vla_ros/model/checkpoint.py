"""Checkpoint directories in Hugging Face's layout, read per stage. Never pickle, never the hub.

    config.json                          the backbone's HF config (a model_type of model/families/)
    model.safetensors                    the backbone's weights, or sharded:
    model-0000X-of-0000N.safetensors     ... with model.safetensors.index.json (`weight_map`: key -> file)
    action_head.safetensors              the action head (docs/CHECKPOINTS.md): mlp.0.{weight,bias},
                                         mlp.2.{weight,bias}, or an action-token model's proj.{weight,bias};
                                         metadata `hybrid_vla` = the VLA's own fields (cameras, image size,
                                         prompt length, waypoints; action_head, bins, range; the head
                                         plugin, its config and query tokens) as JSON
    scene_encoder.safetensors            scene_* families: the scene encoder plugin's weights; metadata
                                         `plugin` (its name) and `config` (its JSON config)
    prompt_embeddings.safetensors        a model with learned query embeddings or prompt slots: `queries.<i>`
                                         (n_i, H) per group, `adaptors.<slot>.<i>.{weight,bias}`
                                         (model/prompt_embeddings.py)
    int8_calibration.safetensors         optional: an int8 suffix's smoothing and measured deviation, read by
                                         engine/int8_calibration.py (written by `hybrid-vla calibrate`)

`save_checkpoint` writes it with transformers' own `save_pretrained`. `load_checkpoint` builds the model
with its parameters on the meta device (buffers such as rotary tables are computed as usual) and reads from
the safetensors files only the tensors of the modules the caller keeps, straight into the wanted dtype:
a stage's process never materialises the other side's weights, nor an fp32 copy of a bf16 model.
"""

from __future__ import annotations

import json
import threading
from pathlib import Path

import torch
from safetensors.torch import save_file
from torch import nn

from ..errors import ConfigError, expect
from .checkpoint_files import (CONFIG_FILE, HEAD_FILE, HEAD_FORMAT, HEAD_PREFIX, INDEX_FILE, OPTIONAL_FIELDS,
                               PROCESSOR_FILE, PROMPT_FILE, PROMPT_PREFIX, SCENE_FILE, SCENE_FORMAT, SCENE_PREFIX,
                               SCENE_SPEC_FIELDS, TOKEN_FIELDS, VLA_FIELDS, WEIGHTS_FILE, CheckpointFiles, _opened,
                               checkpoint_spec, inspect_checkpoint, plain_tensors, read_tensor,
                               release_freed_heap)
from .lora import adapter_source, is_adapter_parameter, save_adapters
from .preprocess import ImageProcessing
from .tokenize.prompt import has_tokenizer, load_prompt
from .seeded import parameters_on_meta
from .vla import VLAModel, make_action_head


def save_checkpoint(model: VLAModel, directory: str | Path, max_shard_size: str | int = "2GB") -> Path:
    """The HF layout (transformers' save_pretrained for the backbone) plus the action head file."""
    expect(model.spec.action_head != "text", ConfigError,
           f"model '{model.spec.name}' writes its plan as text: it is served from its release directory as its "
           f"authors saved it (model/plugins/onevl.py), not written in this package's layout")
    directory = Path(directory)
    directory.mkdir(parents=True, exist_ok=True)
    from transformers.utils import logging as hf_logging
    hf_logging.disable_progress_bar()
    own = {k: v for k, v in model.backbone.state_dict().items() if not is_adapter_parameter(k)}  # not LoRA
    # transformers 5 writes safetensors only (its save_pretrained has no safe_serialization argument any more)
    model.backbone.save_pretrained(directory, state_dict=own, max_shard_size=max_shard_size)
    save_adapters(model, directory)   # peft's layout, beside the untouched backbone
    head = {k: v.detach().contiguous().cpu() for k, v in model.action_head.state_dict().items()}
    fields = VLA_FIELDS + (TOKEN_FIELDS if model.spec.action_head == "tokens" else ())
    vla = {name: getattr(model.spec, name) for name in fields}
    vla.update({name: getattr(model.spec, name) for name in OPTIONAL_FIELDS if getattr(model.spec, name)})
    vla.update({name: getattr(model.spec, name) for name in SCENE_SPEC_FIELDS if model.spec.scene_encoder})
    vla.update(model.prompt.save(directory))  # a checkpoint's own tokenizer goes along, with its query token
    save_file(head, str(directory / HEAD_FILE), metadata={"format": HEAD_FORMAT, "hybrid_vla": json.dumps(vla)})
    if model.scene_encoder is not None:
        tensors = plain_tensors(model.scene_encoder.state_dict())   # shared modules: one copy per name
        save_file(tensors, str(directory / SCENE_FILE),
                  metadata={"format": SCENE_FORMAT, "plugin": model.spec.scene_encoder,
                            "config": json.dumps(model.spec.scene_config)})
    if model.prompt_embeddings is not None:
        tensors = {k: v.detach().contiguous().cpu() for k, v in model.prompt_embeddings.state_dict().items()}
        save_file(tensors, str(directory / PROMPT_FILE), metadata={"format": "hybrid_vla_prompt_embeddings/1"})
    return directory


def _checkpoint_key(key: str, available, key_prefixes) -> str | None:
    """Our parameter name -> the checkpoint's name for it (identity or one of the family's layouts), None if
    absent."""
    if key in available:
        return key
    return next((theirs + key[len(ours):] for theirs, ours in key_prefixes
                 if key.startswith(ours) and theirs + key[len(ours):] in available), None)


def _source(files: CheckpointFiles, name: str, key_prefixes) -> tuple[Path, str]:
    """Our parameter name -> (file, key in it)."""
    if name in files.head_keys:   # a release's text head is its own LM head (model/plugins/onevl.py)
        return files.weight_map[files.head_keys[name]], files.head_keys[name]
    if name.startswith(HEAD_PREFIX):
        return files.head_file, name[len(HEAD_PREFIX):]
    if is_adapter_parameter(name):
        return adapter_source(files.adapters, name, files.directory)
    if name.startswith(PROMPT_PREFIX):
        expect(files.prompt_file is not None, ConfigError,
               f"checkpoint '{files.directory}': the model has prompt embeddings, the directory no {PROMPT_FILE}")
        return files.prompt_file, name[len(PROMPT_PREFIX):]
    if name.startswith(SCENE_PREFIX):
        expect(files.scene_file is not None, ConfigError,
               f"checkpoint '{files.directory}': the model has a scene encoder, the directory no {SCENE_FILE}")
        return files.scene_file, name[len(SCENE_PREFIX):]
    ours = name[len("backbone."):]
    key = _checkpoint_key(ours, files.weight_map, key_prefixes)
    expect(key is not None, ConfigError,
           f"checkpoint '{files.directory}': tensor '{ours}' is in no safetensors file (nor in the index)")
    return files.weight_map[key], key


def materialise(model: VLAModel, files: CheckpointFiles, modules, dtype: torch.dtype, device: str = "cpu") -> None:
    """Read the parameters of `modules` (parts of `model`) from the checkpoint, in `dtype` on `device`
    (safetensors reads them there: no CPU copy of a GPU stage's weights); the rest stays on the meta
    device. A head missing on purpose (fresh_head) is initialised from the spec's seed."""
    wanted = {id(p) for m in modules for p in m.parameters()}
    fresh_head = files.head_file is None and not files.head_keys
    for name, param in list(model.named_parameters()):
        if id(param) not in wanted or param.device.type != "meta" or (fresh_head and name.startswith(HEAD_PREFIX)):
            continue
        path, key = _source(files, name, model.family.key_prefixes)
        # a file opened per tensor: its mapped pages are let go at once (open for the whole read, the
        # pages the copies came from stay resident until the end: peak RSS 1.4x higher on `bench`)
        with _opened(path, device) as handle:
            tensor = read_tensor(handle, path, key, param, dtype)
        owner, leaf = _owner(model, name)
        owner._parameters[leaf] = nn.Parameter(tensor, requires_grad=False)
        files.read_keys.add(key)
        release_freed_heap()   # this read's temporaries given back before the next read (checkpoint_files.py)
    if fresh_head and any(id(p) in wanted for p in model.action_head.parameters()):
        with torch.random.fork_rng(devices=[]):
            torch.manual_seed(model.spec.seed)
            model.action_head = make_action_head(model.spec).to(device, dtype)


_LOAD_LOCK = threading.Lock()


def ensure_loaded(model: VLAModel, modules, dtype: torch.dtype, device=torch.device("cpu")) -> None:
    """A stage's modules read now (a checkpoint's, or drawn for a real-size preset: model/seeded.py); nodes
    sharing one model in a process each ask for their side; what is already there stays as it is: a stage
    that wants it in another dtype converts its own copy, never the shared module. A small preset model
    (seeded weights, built whole) is a no-op."""
    files = getattr(model, "checkpoint_files", None)
    seeded = getattr(model, "seeded_weights", None)
    if files is None and seeded is None:
        return
    with _LOAD_LOCK:
        unread = [m for m in modules if any(p.device.type == "meta" for p in m.parameters())]
        if files is not None:
            materialise(model, files, modules, dtype, str(device))
        else:
            seeded.materialise(model, modules, dtype, device)
        for module in unread:  # their buffers (rotary tables) as a whole-model .to() would
            module.to(device=device, dtype=dtype)


def _processor_config(directory: Path) -> dict | None:
    path = directory / PROCESSOR_FILE
    if not path.is_file():
        return None
    try:
        config = json.loads(path.read_text())
    except (json.JSONDecodeError, UnicodeDecodeError) as exc:
        raise ConfigError(f"checkpoint '{path}': not JSON ({exc})") from exc
    expect(isinstance(config, dict), ConfigError, f"checkpoint '{path}': expected a JSON object")
    return config


def _owner(model: nn.Module, name: str) -> tuple[nn.Module, str]:
    path, _, leaf = name.rpartition(".")
    return model.get_submodule(path), leaf


def load_checkpoint(directory: str | Path, dtype: torch.dtype = torch.float32, keep=None,
                    fresh_head: bool = False, release=None) -> VLAModel:
    """The model of a checkpoint directory. keep(model) -> the modules to read (default: all of them);
    everything else keeps its parameters on the meta device. release: a published layout read as it is, without
    our head file (model/plugins/onevl.py): (its VLA fields, prompt(family, config), head_key(files))."""
    files = inspect_checkpoint(directory, fresh_head or release is not None)
    if release is not None:
        vla, make_prompt, head_key = release
        files.vla, files.head_keys = {**vla, **files.vla}, {HEAD_PREFIX + "weight": head_key(files)}
    spec = checkpoint_spec(files)
    with parameters_on_meta():
        model = VLAModel(spec, backbone_config=files.config)
    model.checkpoint_files = files
    if release is not None:
        model.prompt = make_prompt(model.family, files.config)
    elif has_tokenizer(files.directory):
        model.prompt = load_prompt(files.directory, model.family, files.config, files.vla.get("plan_token"),
                                   files.vla.get("slot_token"))
        model.prompt.check_query_tokens(spec.query_tokens, spec.slot_tokens)   # the head names its query tokens
    model.image_processing = ImageProcessing.for_spec(spec, _processor_config(files.directory),
                                                      str(files.directory / PROCESSOR_FILE))
    ensure_loaded(model, keep(model) if keep else [model], dtype)
    return model.eval()


__all__ = ["CONFIG_FILE", "HEAD_FILE", "INDEX_FILE", "WEIGHTS_FILE", "ensure_loaded",
           "inspect_checkpoint", "load_checkpoint", "save_checkpoint"]
