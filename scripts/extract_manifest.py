#!/usr/bin/env python3
"""A manifest of ORION's / MindDrive's checkpoint as the authors' own code saves it, from their repository.

    python scripts/extract_manifest.py --model orion --snapshot /path/to/Orion_25@2eddb62 --size tiny OUT.json.gz

Run it with a Python that has the versions the authors pin (ORION: transformers 4.31.0, peft 0.12.0; MindDrive:
transformers 4.45.2, peft 0.12.0; torch 2.13.0 here). It builds the authors' detector with their `build_model` on
their released config (ORION: adzoo/orion/configs/orion_stage3.py; MindDrive:
adzoo/minddrive/configs/minddrive_rl_ppo_train.py), at a tiny size (sizes only: manifest/sizes.py) saved by their
own mmcv `save_checkpoint`, or at the released size on the meta device through the same `get_state_dict` that
save_checkpoint calls, and writes every state-dict key with its shape and dtype, the keys that share storage, the
file's top-level layout, the stubs and patches used (manifest/authors.py), and the convert --set overrides for
the tiny sizes. The package's tests build a checkpoint from it (test/manifest_checkpoint.py); nothing of the
authors' is needed then.

Also `--model alpamayo_r1 | alpamayo1_5` (NVlabs/alpamayo, NVlabs/alpamayo1.5, transformers 4.57.1: their
save_pretrained; manifest/alpamayo.py), `--model alpamayo2_super` (NVlabs/alpamayo2, the same venv plus hydra-core;
manifest/alpamayo2.py) and `--model recogdrive` (the planner in its Lightning .ckpt, transformers
4.37.2, pytorch-lightning, diffusers; manifest/recogdrive.py), `--model recogdrive_vlm` (its InternVLChatModel's
save_pretrained, the same venv; manifest/chat_vlm.py) and `--model simlingo --internvl OpenGVLab/InternVL-snapshot`
(RenzKa/simlingo's DrivingModel; transformers 4.46.3, peft 0.13.2; manifest/simlingo.py). Give --commit when the
snapshot is not a git tree."""

from __future__ import annotations

import argparse
import gzip
import json
import subprocess
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent / "manifest"))

import authors  # noqa: E402
import sizes    # noqa: E402
import stubs    # noqa: E402

ALPAMAYO = ("alpamayo_r1", "alpamayo1_5")   # NVlabs/alpamayo, NVlabs/alpamayo1.5 (manifest/alpamayo.py)
OTHERS = {"alpamayo2_super": "alpamayo2_manifest",       # NVlabs/alpamayo2 (manifest/alpamayo2.py)
          "recogdrive": "recogdrive_manifest",            # its planner (manifest/recogdrive.py)
          "recogdrive_vlm": "recogdrive_vlm_manifest",    # its VLM (manifest/chat_vlm.py)
          "simlingo": "simlingo_manifest"}                # its DrivingModel (manifest/simlingo.py)

CONFIG = {"orion": "adzoo/orion/configs/orion_stage3.py", "minddrive": "adzoo/minddrive/configs/minddrive_rl_ppo_train.py"}
LLM_CLASSES = {"orion": ["LlavaLlamaForCausalLM"], "minddrive": ["LlavaLlamaForCausalLM", "LlavaQwen2ForCausalLM"]}
CONSTANT_VALUES = 256    # a frozen tensor this small has its values written (ranges, depth bins, code weights)
FORMAT = "hybrid_vla_manifest/1"


def build(model: str, snapshot: Path, tiny: bool):
    """The authors' detector and its config; `patches` the size patches used."""
    import torch
    patches = authors.size_patches(model, sizes.TINY_LLM[model]["hidden_size"]) if tiny else []
    root = authors.working_copy(snapshot, model, patches)
    mmcv = authors.import_authors(root)
    from mmcv.models import build_model
    from mmcv.utils import Config
    cfg = Config.fromfile(str(snapshot / CONFIG[model]))
    if tiny:
        sizes.tiny_config(cfg, model)
    authors.patch_loaders(sizes.llm_config(model, tiny), LLM_CLASSES[model], sizes.tokenizer_base(model, tiny))
    torch.manual_seed(0)
    if tiny:
        detector = build_model(cfg.model, train_cfg=cfg.get("train_cfg"), test_cfg=cfg.get("test_cfg"))
    else:
        with authors.parameters_on_meta():
            detector = build_model(cfg.model, train_cfg=cfg.get("train_cfg"), test_cfg=cfg.get("test_cfg"))
    return mmcv, detector, cfg, patches


def saved_state(mmcv, detector, tiny: bool) -> tuple[dict, dict]:
    """(state dict, the other top-level entries) as their save_checkpoint writes them (tiny: the file itself)."""
    import torch
    from mmcv.utils.checkpoint import get_state_dict, save_checkpoint
    if not tiny:
        return get_state_dict(detector), {"meta": {"mmcv_version": mmcv.__version__, "time": ""}}
    with tempfile.TemporaryDirectory() as folder:
        path = str(Path(folder) / "tiny.pth")
        save_checkpoint(detector, path)
        saved = torch.load(path, map_location="cpu", weights_only=False)
    return saved.pop("state_dict"), saved


def tensor_rows(state: dict, detector) -> list:
    """[key, shape, dtype, alias (the first key of the same storage) or None, values or None] per key."""
    frozen = {id(p) for p in detector.parameters() if not p.requires_grad} | {id(b) for b in detector.buffers()}
    first, rows = {}, []
    named = dict(detector.named_parameters(remove_duplicate=False))
    named.update(dict(detector.named_buffers(remove_duplicate=False)))
    for key, tensor in state.items():
        source = named.get(key)
        ident = id(source) if source is not None else (tensor.untyped_storage().data_ptr(), tensor.storage_offset())
        alias = first.setdefault(ident, key)
        small = tensor.device.type != "meta" and tensor.numel() <= CONSTANT_VALUES and source is not None \
            and id(source) in frozen
        rows.append([key, list(tensor.shape), str(tensor.dtype).replace("torch.", ""),
                     None if alias == key else alias, tensor.flatten().tolist() if small else None])
    return rows


def versions() -> dict:
    import importlib.metadata
    import torch
    import transformers
    found = {"python": sys.version.split()[0], "torch": torch.__version__, "transformers": transformers.__version__}
    for name in ("peft", "hydra-core"):
        try:
            found[name] = importlib.metadata.version(name)
        except importlib.metadata.PackageNotFoundError:
            pass
    return found


def snapshot_commit(snapshot: Path) -> str | None:
    head = subprocess.run(["git", "-C", str(snapshot), "rev-parse", "HEAD"], capture_output=True, text=True)
    return head.stdout.strip() or None


def manifest(model: str, snapshot: Path, tiny: bool, commit: str | None) -> dict:
    mmcv, detector, cfg, patches = build(model, snapshot, tiny)
    state, rest = saved_state(mmcv, detector, tiny)
    added = len(detector.tokenizer.added)
    return {"format": FORMAT, "model": model, "size": "tiny" if tiny else "released",
            "snapshot": {"config": CONFIG[model], "commit": commit or snapshot_commit(snapshot)},
            "versions": versions(), "stubbed_modules": stubs.stubbed(),
            "stand_ins": ["LLM from_pretrained: the class built from llm_config (no weights loaded)",
                          "AutoTokenizer.from_pretrained: a tokenizer of tokenizer_base ids, added tokens after"],
            "size_patches": [{"file": authors.DETECTOR[model], "regex": p, "replacement": r} for p, r in patches],
            "llm_config": sizes.llm_config(model, tiny), "tokenizer_base": sizes.tokenizer_base(model, tiny),
            "added_tokens": list(detector.tokenizer.added),
            "container": {"top_level": sorted(["state_dict", *rest]), "meta": sorted(rest.get("meta", {}))},
            "mapping_sets": sizes.mapping_sets(model, cfg, tiny, added),
            "tensors": tensor_rows(state, detector)}


def alpamayo_manifest(model: str, snapshot: Path, tiny: bool, commit: str | None) -> dict:
    """An Alpamayo release as the authors' save_pretrained writes it (manifest/alpamayo.py)."""
    import alpamayo
    import alpamayo_sizes
    built = alpamayo.build_and_save(model, snapshot, tiny)
    sizes_used = alpamayo_sizes.TINY if tiny else alpamayo_sizes.RELEASED
    return {"format": FORMAT, "model": model, "size": "tiny" if tiny else "released",
            "snapshot": {"source": alpamayo.SOURCES[model], "commit": commit or snapshot_commit(snapshot)},
            "versions": versions(), "stubbed_modules": stubs.stubbed(),
            "tokenizer_base": sizes_used["tokenizer_base"], **alpamayo.manifest_fields(model, built),
            "tensors": tensor_rows(built["state"], built["model"])}


def alpamayo2_manifest(model: str, snapshot: Path, tiny: bool, commit: str | None) -> dict:
    """Alpamayo 2 Super as the authors' save_pretrained writes it (manifest/alpamayo2.py)."""
    import alpamayo2
    import alpamayo2_sizes
    built = alpamayo2.build_and_save(snapshot, tiny)
    sizes_used = alpamayo2_sizes.TINY if tiny else alpamayo2_sizes.RELEASED
    return {"format": FORMAT, "model": model, "size": "tiny" if tiny else "released",
            "snapshot": {"source": alpamayo2.SOURCE, "commit": commit or snapshot_commit(snapshot)},
            "versions": versions(), "stubbed_modules": stubs.stubbed(),
            "tokenizer_base": sizes_used["tokenizer_base"], **alpamayo2.manifest_fields(built),
            "tensors": tensor_rows(built["state"], built["model"])}


def recogdrive_manifest(model: str, snapshot: Path, tiny: bool, commit: str | None) -> dict:
    """ReCogDrive's planner as their Lightning trainer writes it (manifest/recogdrive.py; the VLM is not built)."""
    import torch
    import recogdrive
    dit = recogdrive.TINY_DIT if tiny else None
    module, patches = recogdrive.build(snapshot, tiny, dit)
    with tempfile.TemporaryDirectory() as folder:
        path = Path(folder) / "planner.ckpt"
        recogdrive.save_with_lightning(module, path)
        saved = torch.load(path, map_location="cpu", weights_only=False)
    state = saved.pop("state_dict")
    return {"format": FORMAT, "model": model, "size": "tiny" if tiny else "released",
            "snapshot": {"source": recogdrive.AGENT, "commit": commit or snapshot_commit(snapshot)},
            "versions": versions(), "stubbed_modules": stubs.stubbed(),
            "stand_ins": ["torch.nn.Module.cuda: the identity while the agent is built (no GPU)"],
            "size_patches": [{"file": f, "regex": p, "replacement": r} for f, p, r in patches],
            "dit": dit, "vlm_hidden": recogdrive.TINY_VLM_HIDDEN if tiny else 1536,
            "container": {"top_level": sorted(["state_dict", *saved])},
            "tensors": tensor_rows(state, module)}


def recogdrive_vlm_manifest(model: str, snapshot: Path, tiny: bool, commit: str | None) -> dict:
    """ReCogDrive's VLM: the InternVLChatModel its fork holds (internvl_chat/), saved by its save_pretrained."""
    import chat_vlm
    built = chat_vlm.build(snapshot / "internvl_chat", "internvl3_2b", tiny)
    with tempfile.TemporaryDirectory() as folder:
        saved = chat_vlm.save(built, Path(folder) / "saved", tiny)
    return {"format": FORMAT, "model": model, "size": "tiny" if tiny else "released",
            "snapshot": {"source": "internvl_chat/internvl/model/internvl_chat/modeling_internvl_chat.py",
                         "commit": commit or snapshot_commit(snapshot)},
            "versions": versions(), "stubbed_modules": stubs.stubbed(),
            "stand_ins": [] if tiny else ["safetensors save_file: records (file, keys, metadata), meta tensors"],
            "sizes": chat_vlm.chat_config("internvl3_2b", tiny),
            "container": {k: saved[k] for k in ("files", "metadata", "index", "saved_files")},
            "config_json": saved["config_json"], "tensors": tensor_rows(saved["state"], built)}


def simlingo_manifest(model: str, snapshot: Path, tiny: bool, commit: str | None, internvl: Path | None = None) -> dict:
    """SimLingo's DrivingModel as its agent's strict load_state_dict reads pytorch_model.pt (manifest/simlingo.py);
    `internvl`: an OpenGVLab/InternVL snapshot (at simlingo.INTERNVL's commit)."""
    import simlingo
    assert internvl is not None, "--internvl: the OpenGVLab/InternVL snapshot SimLingo's InternVL2-1B code comes from"
    built = simlingo.build(snapshot, tiny, internvl / "internvl_chat")
    return {"format": FORMAT, "model": model, "size": "tiny" if tiny else "released",
            "snapshot": {"source": simlingo.SOURCE, "commit": commit or snapshot_commit(snapshot),
                         "internvl": simlingo.internvl_source()},
            "versions": versions(), "stubbed_modules": stubs.stubbed(), **simlingo.manifest_fields(built, tiny),
            "tensors": tensor_rows(built["state"], built["model"])}


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--model", choices=sorted([*CONFIG, *ALPAMAYO, *OTHERS]), required=True)
    parser.add_argument("--snapshot", type=Path, required=True, help="the authors' repository at the named commit")
    parser.add_argument("--commit", default=None, help="the snapshot's commit (when it is not a git work tree)")
    parser.add_argument("--internvl", type=Path, default=None, help="simlingo: an OpenGVLab/InternVL snapshot")
    parser.add_argument("--size", choices=["tiny", "released"], required=True)
    parser.add_argument("out", type=Path, help="the manifest (.json, or .json.gz)")
    args = parser.parse_args(argv)
    make = alpamayo_manifest if args.model in ALPAMAYO else globals().get(OTHERS.get(args.model, ""), manifest)
    extra = {"internvl": args.internvl} if args.model == "simlingo" else {}
    data = make(args.model, args.snapshot, args.size == "tiny", args.commit, **extra)
    text = json.dumps(data, separators=(",", ":"))
    args.out.write_bytes(gzip.compress(text.encode(), mtime=0) if args.out.suffix == ".gz" else text.encode())
    print(f"{args.out}: {len(data['tensors'])} tensors, {len(data['stubbed_modules'])} stubbed modules")
    return 0


if __name__ == "__main__":
    sys.exit(main())
