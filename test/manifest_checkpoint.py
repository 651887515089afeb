"""A checkpoint in a published layout built from a manifest that scripts/extract_manifest.py wrote from the
authors' own module tree (test/data/manifests/*.json.gz): every key, shape and dtype as their code saves it, the
keys that share storage sharing it, the file's top-level entries, and the values the authors' code sets for small
frozen tensors (ranges, depth bins); every other tensor seeded from its key. No network, no authors' code."""

from __future__ import annotations

import gzip
import hashlib
import json
from pathlib import Path

import torch

MANIFESTS = Path(__file__).resolve().parent / "data" / "manifests"
SCALE = 0.05


def load_manifest(name: str) -> dict:
    return json.loads(gzip.decompress((MANIFESTS / f"{name}.json.gz").read_bytes()))


def _seeded(key: str, shape, dtype, scale: float = SCALE) -> torch.Tensor:
    seed = int.from_bytes(hashlib.sha256(key.encode()).digest()[:4], "little")
    generator = torch.Generator().manual_seed(seed)
    if key.endswith(("norm.weight", "ln.weight", "ffn_ln.weight")) or ".norm" in key and key.endswith(".weight"):
        return (1.0 + torch.randn(shape, generator=generator) * scale).to(dtype)
    return (torch.randn(shape, generator=generator) * scale).to(dtype)


def state_from_manifest(manifest: dict, scale: float = SCALE) -> dict:
    """{key: tensor} as the manifest describes: shapes, dtypes, shared storage, recorded values, seeded rest (each
    N(0, scale^2) from its key's seed; norm weights 1 + that)."""
    state = {}
    for key, shape, dtype, alias, values in manifest["tensors"]:
        if alias is not None:
            state[key] = state[alias]
            continue
        torch_dtype = getattr(torch, dtype)
        if values is not None:
            state[key] = torch.tensor(values, dtype=torch_dtype).reshape(shape)
        else:
            state[key] = _seeded(key, shape, torch_dtype, scale)
    return state


def write_pth(manifest: dict, path: Path, scale: float = SCALE) -> dict:
    """The mmcv file (its top-level entries as the manifest lists them) -> the state dict written."""
    state = state_from_manifest(manifest, scale)
    container = {"state_dict": state}
    if "meta" in manifest["container"]["top_level"]:
        container["meta"] = {k: "" for k in manifest["container"]["meta"]}
    torch.save(container, path)
    return state


def llm_config_dir(manifest: dict, folder: Path) -> Path:
    """The base LLM's config.json as the manifest's llm_config gives it (the transformers model type the
    authors' LLaVA class extends: llama / qwen2)."""
    config = dict(manifest["llm_config"])
    config["model_type"] = {"llava_llama": "llama", "llava_qwen2": "qwen2"}.get(config["model_type"],
                                                                             config["model_type"])
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "config.json").write_text(json.dumps(config))
    return folder


def sets(manifest: dict) -> list:
    return [tuple(s) for s in manifest["mapping_sets"]]


def write_pretrained(manifest: dict, folder: Path, scale: float = SCALE) -> dict:
    """A save_pretrained directory as the manifest lists it: config.json as the authors' code wrote it, each
    safetensors file with its keys and metadata, the shard index when there is one -> the state dict written."""
    from safetensors.torch import save_file
    state = state_from_manifest(manifest, scale)
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "config.json").write_text(json.dumps(manifest["config_json"]))
    container = manifest["container"]
    for name, keys in container["files"].items():
        save_file({k: state[k].contiguous() for k in keys}, str(folder / name), metadata=container["metadata"][name])
    if container["index"] is not None:
        weight_map = {k: name for name, keys in container["files"].items() for k in keys}
        (folder / "model.safetensors.index.json").write_text(json.dumps({"metadata": {}, "weight_map": weight_map}))
    return state


def write_safetensors_release(manifest: dict, folder: Path, scale: float = SCALE) -> dict:
    """An Alpamayo save_pretrained directory (manifest/alpamayo.py): write_pretrained, and the backbone's
    config.json where a relative vlm_name_or_path points -> the state dict written."""
    state = write_pretrained(manifest, folder, scale)
    backbone = folder / manifest["config_json"]["vlm_name_or_path"]
    backbone.mkdir(parents=True, exist_ok=True)
    (backbone / "config.json").write_text(json.dumps(manifest["backbone_config"]))
    return state


def meta_model_check(model, parts: dict) -> tuple[list, list]:
    """The package's model (on the meta device) against routed parts ({"backbone": the native-named tensors,
    "action_head": ..., "prompt_embeddings": ...}) -> ([(parameter, routed shape or None, wanted shape)], the
    routed keys no parameter reads)."""
    from hybrid_vla_ros.model.checkpoint import _checkpoint_key
    wrong, used = [], set()
    for name, param in model.named_parameters():
        part = next((p for p in parts if p != "backbone" and name.startswith(p + ".")), "backbone")
        key = name[len(part) + 1:]
        if part == "backbone":
            key = _checkpoint_key(key, parts["backbone"], model.family.key_prefixes)
        got = parts[part].get(key) if key is not None else None
        used.add((part, key))
        if got is None or tuple(got.shape) != tuple(param.shape):
            wrong.append((name, None if got is None else tuple(got.shape), tuple(param.shape)))
    left = sorted(f"{part}: {k}" for part, tensors in parts.items() for k in tensors if (part, k) not in used)
    return wrong, left
