"""Alpamayo 1 (R1) and 1.5 built by their authors' own classes (NVlabs/alpamayo `AlpamayoR1`, NVlabs/alpamayo1.5
`Alpamayo1_5`, from a snapshot's src/), saved by their own `save_pretrained`, for extract_manifest.py.

Run with the versions the authors pin (both pyproject.toml: transformers 4.57.1; torch 2.13.0 here, not their 2.8.0).
What is not the authors' own, each recorded in the manifest:
- weightless third-party modules their imports pull in (logging colours, scipy's rotations): stubs.py;
- the processor `AutoProcessor.from_pretrained(vlm_name_or_path)` (a hub download): a stand-in tokenizer of the
  base vocabulary's length that knows the base vocabulary's vision tokens (their names: transformers' Qwen3-VL
  processor; their ids: the backbone config) and numbers added tokens after the base, as `add_tokens` does;
- the backbone's config.json (`Qwen3VLConfig.from_pretrained(vlm_name_or_path)`): written beside the build from
  alpamayo_sizes.py (tiny: toy sizes; released: Qwen3-VL-8B-Instruct's published shapes);
- at the released size, the files: save_pretrained runs on the meta device and its safetensors writer only
  records (file name, keys, metadata) instead of writing."""

from __future__ import annotations

import contextlib
import json
import os
import sys
import tempfile
from pathlib import Path

from authors import StandInTokenizer, parameters_on_meta
import alpamayo_sizes
import stubs

STUB_ROOTS = ["colorlog", "scipy", "av", "mediapy", "cv2", "physical_ai_av", "wandb", "matplotlib", "pandas",
              "flash_attn", "rich"]
CLASSES = {"alpamayo_r1": ("alpamayo_r1.models.alpamayo_r1", "AlpamayoR1", "alpamayo_r1.config", "AlpamayoR1Config"),
           "alpamayo1_5": ("alpamayo1_5.models.alpamayo1_5", "Alpamayo1_5", "alpamayo1_5.config",
                           "Alpamayo1_5Config")}
SOURCES = {"alpamayo_r1": "src/alpamayo_r1/models/alpamayo_r1.py", "alpamayo1_5": "src/alpamayo1_5/models/alpamayo1_5.py"}
# transformers' Qwen3VLProcessor names these tokens (image_token / video_token, vision_start / _end); the base
# tokenizer holds them, at the ids the backbone config gives
VISION_TOKENS = {"<|vision_start|>": "vision_start_token_id", "<|vision_end|>": "vision_end_token_id",
                 "<|image_pad|>": "image_token_id", "<|video_pad|>": "video_token_id"}


class QwenTokenizer(StandInTokenizer):
    """The stand-in tokenizer with the base vocabulary's vision tokens: `add_tokens` of one of them adds nothing
    and it keeps its base id (a tokenizer reuses a token it already has)."""

    def __init__(self, base: int, known: dict):
        super().__init__(base)
        self.known = dict(known)

    def add_tokens(self, tokens, special_tokens=False) -> int:
        return super().add_tokens([t for t in tokens if t not in self.known], special_tokens)

    def _id(self, text: str) -> list:
        return [self.known[text]] if text in self.known else super()._id(text)


def _backbone_tokens(vlm: dict) -> dict:
    return {token: vlm[field] for token, field in VISION_TOKENS.items()}


def patch_processor(base: int, vlm: dict) -> None:
    """AutoProcessor.from_pretrained -> an object whose .tokenizer is a fresh QwenTokenizer (one per call, as
    each call loads a new one)."""
    import transformers

    class Processor:
        def __init__(self):
            self.tokenizer = QwenTokenizer(base, _backbone_tokens(vlm))

    transformers.AutoProcessor.from_pretrained = staticmethod(lambda *a, **k: Processor())


def import_authors(root: Path, model: str):
    """The authors' model and config classes from the snapshot's src/ (stubs installed first)."""
    import importlib
    stubs.install(STUB_ROOTS, compiled=())
    sys.path.insert(0, str(root / "src"))
    module, cls, config_module, config_cls = CLASSES[model]
    loaded = importlib.import_module(module)
    assert Path(loaded.__file__).resolve().is_relative_to(root.resolve()), loaded.__file__
    return getattr(loaded, cls), getattr(importlib.import_module(config_module), config_cls)


class RecordingWriter:
    """safetensors' save_file as save_pretrained calls it, recording instead of writing (meta tensors)."""

    def __init__(self):
        self.files: dict = {}
        self.metadata: dict = {}
        self.state: dict = {}

    def __call__(self, tensors, filename, metadata=None):
        name = Path(filename).name
        self.files[name] = sorted(tensors)
        self.metadata[name] = dict(metadata or {})
        self.state.update(tensors)


@contextlib.contextmanager
def _working_dir(folder: Path):
    before = os.getcwd()
    os.chdir(folder)
    try:
        yield
    finally:
        os.chdir(before)


def _write_backbone(folder: Path, name: str, vlm: dict) -> None:
    from transformers import Qwen3VLConfig
    Qwen3VLConfig(**vlm).save_pretrained(str(folder / name))


def _saved_files(folder: Path) -> tuple[dict, dict, dict]:
    """(state, {file: keys}, {file: metadata}) of the safetensors files save_pretrained wrote."""
    from safetensors import safe_open
    state, files, metadata = {}, {}, {}
    for path in sorted(folder.glob("*.safetensors")):
        with safe_open(str(path), framework="pt") as handle:
            files[path.name] = sorted(handle.keys())
            metadata[path.name] = dict(handle.metadata() or {})
            state.update({k: handle.get_tensor(k) for k in handle.keys()})
    return state, files, metadata


def build_saved(model_cls, config, out: Path, tiny: bool) -> tuple:
    """The authors' class built from `config` (seed 0) and saved by its own save_pretrained into `out` -> (model,
    state, {file: keys}, {file: metadata}); at the released size on the meta device, the writer recording."""
    import torch
    import transformers.modeling_utils as modeling_utils
    torch.manual_seed(0)
    if tiny:
        built = model_cls(config)
        built.save_pretrained(str(out))
        return (built, *_saved_files(out))
    writer = RecordingWriter()
    with parameters_on_meta():       # buffers stay real: their code computes with them (.item())
        built = model_cls(config)
    modeling_utils.safe_save_file, original = writer, modeling_utils.safe_save_file
    try:
        built.save_pretrained(str(out))
    finally:
        modeling_utils.safe_save_file = original
    return built, writer.state, writer.files, writer.metadata


def build_and_save(model: str, snapshot: Path, tiny: bool) -> dict:
    """The authors' model built and saved by its own save_pretrained -> what the manifest needs."""
    sizes = alpamayo_sizes.TINY if tiny else alpamayo_sizes.RELEASED
    model_cls, config_cls = import_authors(snapshot, model)
    patch_processor(sizes["tokenizer_base"], sizes["vlm"])
    work = Path(tempfile.mkdtemp(prefix=f"{model}_authors_"))
    out = work / "saved"
    with _working_dir(work):
        _write_backbone(work, sizes["release"]["vlm_name_or_path"], sizes["vlm"])
        config = config_cls(**alpamayo_sizes.release_kwargs(model, tiny))
        built, state, files, metadata = build_saved(model_cls, config, out, tiny)
    saved_config = json.loads((out / "config.json").read_text())
    index = out / "model.safetensors.index.json"
    return {"model": built, "state": state, "files": files, "metadata": metadata, "config_json": saved_config,
            "index": sorted(json.loads(index.read_text())) if index.is_file() else None,
            "backbone_config": json.loads((work / sizes["release"]["vlm_name_or_path"] / "config.json").read_text()),
            "special_token_ids": dict(built.special_token_ids),
            "saved_files": sorted(p.name for p in out.iterdir())}


def manifest_fields(model: str, built: dict) -> dict:
    """The Alpamayo-specific manifest entries (extract_manifest.py adds the common ones)."""
    return {"stand_ins": ["AutoProcessor.from_pretrained: a tokenizer of tokenizer_base ids that holds the "
                          "backbone's vision tokens (" + ", ".join(VISION_TOKENS) + ") at the backbone config's "
                          "ids; added tokens numbered after the base",
                          "the backbone's config.json (backbone_config) written where vlm_name_or_path points"],
            "source": SOURCES[model],
            "container": {"files": built["files"], "metadata": built["metadata"], "index": built["index"],
                          "saved_files": built["saved_files"]},
            "config_json": built["config_json"], "backbone_config": built["backbone_config"],
            "special_token_ids": built["special_token_ids"]}
