"""Alpamayo 2 Super built by its authors' own classes (NVlabs/alpamayo2 `Alpamayo2Super` with its `ExpertModel`, from
a snapshot's src/), saved by their own `save_pretrained`, for extract_manifest.py (`--model alpamayo2_super`).

Run with the versions the authors pin (pyproject.toml: transformers 4.57.1; torch 2.13.0 here, not their 2.8.0;
Python 3.11 here, not their 3.12). What is not the authors' own, each recorded in the manifest (as for
manifest/alpamayo.py):
- weightless third-party modules their imports pull in: stubs.py;
- `AutoTokenizer.from_pretrained(vlm_name_or_path)` (a hub download): the stand-in tokenizer of the base vocabulary's
  length that knows the backbone's vision tokens, numbering added tokens after the base as `add_tokens` does;
- the backbone's config.json, written where vlm_name_or_path points (alpamayo2_sizes.py);
- at the released size, the files: save_pretrained runs on the meta device and records instead of writing."""

from __future__ import annotations

import importlib
import json
import sys
import tempfile
from pathlib import Path

import alpamayo
import alpamayo2_sizes
import stubs

SOURCE = "src/alpamayo2_super/models/alpamayo2_super.py"


def import_authors(root: Path):
    stubs.install(alpamayo.STUB_ROOTS, compiled=())
    sys.path.insert(0, str(root / "src"))
    loaded = importlib.import_module("alpamayo2_super.models.alpamayo2_super")
    assert Path(loaded.__file__).resolve().is_relative_to(root.resolve()), loaded.__file__
    return loaded.Alpamayo2Super, importlib.import_module("alpamayo2_super.config").Alpamayo2SuperConfig


def patch_tokenizer(base: int, vlm: dict) -> None:
    """AutoTokenizer.from_pretrained -> a fresh stand-in (one per call, as each call loads a new one)."""
    import transformers
    known = alpamayo._backbone_tokens(vlm)
    transformers.AutoTokenizer.from_pretrained = staticmethod(lambda *a, **k: alpamayo.QwenTokenizer(base, known))


def _write_backbone(folder: Path, name: str, vlm: dict) -> None:
    from transformers import Qwen3VLConfig
    config = Qwen3VLConfig(**{k: v for k, v in vlm.items() if k != "architectures"})
    config.architectures = list(vlm["architectures"])
    config.save_pretrained(str(folder / name))


def build_and_save(snapshot: Path, tiny: bool) -> dict:
    """The authors' model built and saved by its own save_pretrained -> what the manifest needs."""
    sizes = alpamayo2_sizes.TINY if tiny else alpamayo2_sizes.RELEASED
    model_cls, config_cls = import_authors(snapshot)
    patch_tokenizer(sizes["tokenizer_base"], sizes["vlm"])
    work = Path(tempfile.mkdtemp(prefix="alpamayo2_super_authors_"))
    out = work / "saved"
    with alpamayo._working_dir(work):
        _write_backbone(work, sizes["release"]["vlm_name_or_path"], sizes["vlm"])
        config = config_cls(**alpamayo2_sizes.release_kwargs(tiny))
        built, state, files, metadata = alpamayo.build_saved(model_cls, config, out, tiny)
    index = out / "model.safetensors.index.json"
    return {"model": built, "state": state, "files": files, "metadata": metadata,
            "config_json": json.loads((out / "config.json").read_text()),
            "index": sorted(json.loads(index.read_text())) if index.is_file() else None,
            "backbone_config": json.loads((work / sizes["release"]["vlm_name_or_path"] / "config.json").read_text()),
            "traj_ids": dict(config.traj_ids), "tokenizer_length": len(built.tokenizer),
            "added_tokens": list(built.tokenizer.added), "saved_files": sorted(p.name for p in out.iterdir())}


def manifest_fields(built: dict) -> dict:
    return {"stand_ins": ["AutoTokenizer.from_pretrained: a tokenizer of tokenizer_base ids that holds the backbone's "
                          "vision tokens (" + ", ".join(alpamayo.VISION_TOKENS) + ") at the backbone config's ids; "
                          "added tokens numbered after the base",
                          "the backbone's config.json (backbone_config) written where vlm_name_or_path points"],
            "source": SOURCE,
            "container": {"files": built["files"], "metadata": built["metadata"], "index": built["index"],
                          "saved_files": built["saved_files"]},
            "config_json": built["config_json"], "backbone_config": built["backbone_config"],
            "traj_ids": built["traj_ids"], "tokenizer_length": built["tokenizer_length"],
            "added_tokens": built["added_tokens"]}
