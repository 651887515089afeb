"""SimLingo's `DrivingModel` built by its authors' own classes (RenzKa/simlingo @ eb2b89a:
simlingo_training/models/driving.py and what it instantiates, from their hydra config `config.yaml` with
`experiment=simlingo_seed1`, as train.py composes it), for extract_manifest.py. Run with the versions
environment.yaml pins: transformers 4.46.3, peft 0.13.2, pytorch-lightning 2.4.0, hydra-core 1.3.2 (torch 2.13.0
here, not their 2.2.0).

The release is `pytorch_model.pt`, the fp32 state dict DeepSpeed's zero_to_fp32 consolidates from the stage-2
checkpoint; their agent (team_code/agent_simlingo.py) reads it with `model.load_state_dict(torch.load(path))`,
strict: so its keys and shapes are the DrivingModel's `state_dict()`, which is what the manifest records (DeepSpeed
itself is not run here).

What is not the authors' own, each recorded in the manifest:
- `AutoModel.from_pretrained("OpenGVLab/InternVL2-1B", trust_remote_code=True)` (both the vision and the language
  side call it): OpenGVLab/InternVL's InternVLChatModel (the source of that remote code; chat_vlm.py) built from
  InternVL2-1B's config.json (released) or the tiny sizes;
- `AutoProcessor.from_pretrained`: an object holding a stand-in tokenizer (the model's build reads nothing of it);
- weightless modules their imports pull in (wandb, image I/O, timm's DropPath): stubs.py;
- released size: parameters on the meta device."""

from __future__ import annotations

import sys
from pathlib import Path

import chat_vlm
import stubs
from authors import StandInTokenizer, parameters_on_meta

SOURCE = "simlingo_training/models/driving.py"
INTERNVL = {"repo": "OpenGVLab/InternVL", "commit": "2410d1dbf208f0e799459aff9376e5747dbf41a2",
            "path": "internvl_chat/internvl/model/internvl_chat/"}
STUB_ROOTS = ["wandb", "cv2", "PIL", "imageio", "matplotlib", "scipy", "shapely", "carla", "ujson", "numba"]


def internvl_source() -> dict:
    return dict(INTERNVL)


def _compose(snapshot: Path):
    """Their hydra config as train.py composes it (config.yaml, experiment=simlingo_seed1)."""
    from hydra import compose, initialize_config_dir
    with initialize_config_dir(config_dir=str(snapshot / "simlingo_training" / "config"), version_base="1.1"):
        return compose(config_name="config", overrides=["experiment=simlingo_seed1"])


def _patch_loaders(internvl_root: Path, tiny: bool) -> None:
    import torch
    import transformers
    config_cls, model_cls = chat_vlm.import_internvl(internvl_root)

    def from_pretrained(variant, *args, **kwargs):
        assert variant == "OpenGVLab/InternVL2-1B", variant
        torch.manual_seed(0)
        return model_cls(config_cls(**chat_vlm.chat_config("internvl2_1b", tiny)))

    class Processor:
        def __init__(self):
            self.tokenizer = StandInTokenizer(chat_vlm.chat_config("internvl2_1b", tiny)["llm_config"]["vocab_size"])

    transformers.AutoModel.from_pretrained = staticmethod(from_pretrained)
    transformers.AutoProcessor.from_pretrained = staticmethod(lambda *a, **k: Processor())


def build(snapshot: Path, tiny: bool, internvl_root: Path) -> dict:
    """The authors' DrivingModel (tiny, or released on the meta device) -> {model, state, config}."""
    import hydra
    import torch
    import transformers
    from omegaconf import OmegaConf
    stubs.install(STUB_ROOTS, compiled=())
    sys.path.insert(0, str(snapshot))
    _patch_loaders(internvl_root, tiny)
    from simlingo_training import config as _registered     # noqa: F401  (their ConfigStore entries)
    cfg = _compose(snapshot)
    processor = transformers.AutoProcessor.from_pretrained(cfg.model.vision_model.variant, trust_remote_code=True)
    torch.manual_seed(0)
    make = lambda: hydra.utils.instantiate(cfg.model, cfg_data_module=cfg.data_module, processor=processor,  # noqa: E731
                                           cache_dir=None, _recursive_=False)
    if tiny:
        model = make()
    else:
        with parameters_on_meta():
            model = make()
    return {"model": model, "state": model.state_dict(),
            "model_cfg": OmegaConf.to_container(cfg.model, resolve=True)}


def manifest_fields(built: dict, tiny: bool) -> dict:
    return {"stand_ins": ["AutoModel.from_pretrained('OpenGVLab/InternVL2-1B', trust_remote_code=True): "
                          "OpenGVLab/InternVL's InternVLChatModel from config_json's sizes",
                          "AutoProcessor.from_pretrained: a stand-in tokenizer of the LLM's vocabulary size"]
                         + ([] if tiny else ["parameters over 4096 elements on the meta device"]),
            "config_json": chat_vlm.chat_config("internvl2_1b", tiny), "model_cfg": built["model_cfg"],
            "container": {"file": "pytorch_model.pt", "layout": "a bare state dict (torch.save of the model's "
                          "state_dict; the agent's strict load_state_dict reads it)"}}
