"""The routed tensors -> a checkpoint directory in the package's layout (docs/CHECKPOINTS.md, Layout), then
checked the way `load_checkpoint` reads it: every parameter the model needs is there in its shape. Written into a
staging folder beside OUT and moved to OUT only once checked: a refused conversion leaves nothing at OUT."""

from __future__ import annotations

import json
import shutil
import tempfile
from pathlib import Path

import torch
from safetensors import safe_open
from safetensors.torch import save_file

from ..errors import ConfigError, expect
from ..model.checkpoint_files import (CONFIG_FILE, HEAD_FILE, HEAD_FORMAT, HEAD_PREFIX, INDEX_FILE, PROMPT_FILE,
                                      SCENE_FILE, SCENE_FORMAT, WEIGHTS_FILE, plain_tensors)
from ..model.lora import ADAPTER_CONFIG, ADAPTER_DIR, ADAPTER_WEIGHTS
from .mapping import Mapping
from .route import Routed

# files of a base model's HF directory that go along with its config (tokenizer, image processor)
SIDE_FILES = ("tokenizer.json", "tokenizer_config.json", "special_tokens_map.json", "added_tokens.json", "vocab.json",
              "merges.txt", "tokenizer.model", "chat_template.jinja", "preprocessor_config.json",
              "generation_config.json")
MAX_SHARD_BYTES = 4 << 30


def _plain(tensors: dict) -> dict:
    return plain_tensors(tensors)   # a .pth of a model with shared modules holds shared storage


def _backbone(out: Path, tensors: dict, config: dict, max_shard: int) -> int:
    """model.safetensors (or shards + index, as save_pretrained names them) and config.json."""
    (out / CONFIG_FILE).write_text(json.dumps(config, indent=2, sort_keys=True))
    shards, size = [{}], 0
    for key in sorted(tensors):
        nbytes = tensors[key].numel() * tensors[key].element_size()
        if shards[-1] and size + nbytes > max_shard:
            shards.append({})
            size = 0
        shards[-1][key], size = tensors[key], size + nbytes
    if len(shards) == 1:
        save_file(_plain(shards[0]), str(out / WEIGHTS_FILE), metadata={"format": "pt"})
        return 1
    weight_map = {}
    for i, shard in enumerate(shards, 1):
        name = f"model-{i:05d}-of-{len(shards):05d}.safetensors"
        save_file(_plain(shard), str(out / name), metadata={"format": "pt"})
        weight_map.update({key: name for key in shard})
    (out / INDEX_FILE).write_text(json.dumps({"metadata": {}, "weight_map": weight_map}, indent=2))
    return len(shards)


def _adapters(out: Path, adapters: dict, alpha: float) -> None:
    """adapters/<name>/ in peft's layout, as model/lora.py writes and reads it; rank and targets from the tensors."""
    shapes = {}
    for name, tensors in sorted(adapters.items()):
        ranks = {t.shape[0] for k, t in tensors.items() if k.endswith("lora_A.weight")}
        targets = sorted({k.rsplit(".", 3)[-3] for k in tensors})
        expect(len(ranks) == 1, ConfigError, f"adapter {name!r}: lora_A ranks {sorted(ranks)}; one rank per adapter")
        shapes[name] = (ranks.pop(), targets)
        folder = out / ADAPTER_DIR / name
        folder.mkdir(parents=True, exist_ok=True)
        save_file(_plain(tensors), str(folder / ADAPTER_WEIGHTS), metadata={"format": "pt"})
        (folder / ADAPTER_CONFIG).write_text(json.dumps({
            "peft_type": "LORA", "r": shapes[name][0], "lora_alpha": alpha, "target_modules": shapes[name][1],
            "bias": "none", "use_dora": False}, indent=2))
    expect(len(set(map(str, shapes.values()))) <= 1, ConfigError,
           f"adapters {shapes}: every adapter must share rank and target modules (model/lora.py)")


def _side_parts(out: Path, routed: Routed, mapping: Mapping) -> None:
    head, scene = routed.parts["action_head"], routed.parts["scene_encoder"]
    expect(bool(head) == (mapping.action_head is not None), ConfigError,
           f"mapping '{mapping.source}': {len(head)} tensors go to the action head, and the mapping "
           f"{'gives no' if mapping.action_head is None else 'gives'} action_head metadata: both or neither")
    if head:
        save_file(_plain(head), str(out / HEAD_FILE),
                  metadata={"format": HEAD_FORMAT, "hybrid_vla": json.dumps(mapping.action_head)})
    expect(bool(scene) == (mapping.scene_encoder is not None), ConfigError,
           f"mapping '{mapping.source}': {len(scene)} tensors go to the scene encoder, and the mapping "
           f"{'names no' if mapping.scene_encoder is None else 'names a'} scene_encoder plugin: both or neither")
    if scene:
        save_file(_plain(scene), str(out / SCENE_FILE),
                  metadata={"format": SCENE_FORMAT, "plugin": mapping.scene_encoder["plugin"],
                            "config": json.dumps(mapping.scene_encoder.get("config", {}))})
    if routed.parts["prompt_embeddings"]:
        save_file(_plain(routed.parts["prompt_embeddings"]), str(out / PROMPT_FILE),
                  metadata={"format": "hybrid_vla_prompt_embeddings/1"})


def write_checkpoint(out: Path, routed: Routed, mapping: Mapping, config: dict, side_dir: Path | None,
                     max_shard: int = MAX_SHARD_BYTES) -> int:
    """Write OUT (which must be new or empty); returns the number of backbone shards."""
    expect(not out.exists() or (out.is_dir() and not any(out.iterdir())), ConfigError,
           f"output '{out}': exists and is not empty (nothing is overwritten)")
    expect(bool(routed.parts["backbone"]), ConfigError, f"mapping '{mapping.source}': no tensor goes to the backbone")
    passes = (mapping.action_head or {}).get("passes") or []
    unnamed = sorted(set(routed.adapters) - {p.get("adapter") for p in passes if isinstance(p, dict)})
    expect(not unnamed, ConfigError,
           f"mapping '{mapping.source}': adapter(s) {unnamed} are named by no pass of its action_head metadata, so no "
           f"pass would apply them: a one-pass model's LoRA is merged into the weights (adapters: {{merge: true}})")
    out.mkdir(parents=True, exist_ok=True)
    for name in SIDE_FILES if side_dir is not None else ():
        if (side_dir / name).is_file() and name != CONFIG_FILE:
            shutil.copyfile(side_dir / name, out / name)
    shards = _backbone(out, routed.parts["backbone"], config, max_shard)
    _side_parts(out, routed, mapping)
    if routed.adapters:
        _adapters(out, routed.adapters, float(mapping.adapters["lora_alpha"]))
    return shards


def write_checked(out: Path, routed: Routed, mapping: Mapping, config: dict, side_dir: Path | None,
                  max_shard: int = MAX_SHARD_BYTES, check: bool = True) -> tuple[int, list[str]]:
    """write_checkpoint into a staging folder beside OUT, check_checkpoint there, then move it to OUT; refused
    (ConfigError) with nothing left at OUT. -> (backbone shards, tensors nothing reads)."""
    expect(not out.exists() or (out.is_dir() and not any(out.iterdir())), ConfigError,
           f"output '{out}': exists and is not empty (nothing is overwritten)")
    out.parent.mkdir(parents=True, exist_ok=True)
    staging = Path(tempfile.mkdtemp(prefix=f".{out.name}.", suffix=".partial", dir=out.parent))
    files = {"action_head": HEAD_FILE, "scene_encoder": SCENE_FILE, "prompt_embeddings": PROMPT_FILE}
    origin = {(files[place[0]], name): key for (place, name), key in routed.origin.items() if place[0] in files}
    try:
        shards = write_checkpoint(staging, routed, mapping, config, side_dir, max_shard)
        unread = check_checkpoint(staging, origin) if check else []
        if out.exists():
            out.rmdir()
        staging.rename(out)
    except ConfigError as exc:
        shutil.rmtree(staging, ignore_errors=True)
        raise ConfigError(f"{exc}; nothing was written to '{out}'") from exc
    except BaseException:
        shutil.rmtree(staging, ignore_errors=True)
        raise
    return shards, unread


def check_checkpoint(out: Path, origin: dict | None = None) -> list[str]:
    """Build OUT's model on the meta device and look up every parameter's tensor and shape without reading it
    (missing or misshapen: ConfigError, naming the source key when `origin` ((file name, key) -> source key)
    knows it). Returns the backbone / head / scene / prompt / adapter tensors nothing reads."""
    from ..model.checkpoint import _source, load_checkpoint
    model = load_checkpoint(out, keep=lambda m: [], fresh_head=not (out / HEAD_FILE).is_file())
    files, used = model.checkpoint_files, set()
    for name, param in model.named_parameters():
        if files.head_file is None and name.startswith(HEAD_PREFIX):
            continue   # no head converted: a fresh one on request (load_checkpoint's fresh_head)
        path, key = _source(files, name, model.family.key_prefixes)
        with safe_open(str(path), "pt") as handle:
            expect(key in handle.keys(), ConfigError,
                   f"converted {path.name}: no tensor '{key}', which the model ({name}) needs: the source holds no key "
                   f"the mapping renames to it")
            shape = tuple(handle.get_slice(key).get_shape())
        source = (origin or {}).get((path.name, key))
        expect(shape == tuple(param.shape), ConfigError,
               f"converted {path.name}: tensor '{key}'{f' (source key {source!r})' if source else ''} has shape "
               f"{shape}, the config implies {tuple(param.shape)}")
        used.add((path, key))
    unread = []
    written = sorted(set(files.weight_map.values())) + [files.head_file, files.scene_file, files.prompt_file]
    for path in written + [f for f, _ in files.adapters.values()]:
        if path is not None:
            with safe_open(str(path), "pt") as handle:
                unread += [f"{path.relative_to(out)}:{k}" for k in handle.keys() if (path, k) not in used]
    return sorted(unread)


def torch_dtypes(tensors: dict) -> list[str]:
    return sorted({str(t.dtype).replace("torch.", "") for t in tensors.values() if isinstance(t, torch.Tensor)})
