"""Build ORION's / MindDrive's own model (their `build_model` on their released config) from a snapshot of the
authors' repository, at a tiny size or at the released size on the meta device, for extract_manifest.py.

What is not the authors' own, each recorded in the manifest:
- third-party modules with no weights (image I/O, plotting, dataset SDKs, flash-attn, compiled CUDA ops): stubs.py;
- the LLM's `from_pretrained` (a weights loader: the class is built from its config instead) and the tokenizer
  (a stand-in with the base vocabulary's size that numbers added tokens after it, as a real one does);
- at the tiny size only, size literals the detector hard-codes (ORION's planner widths 4096 / 8192, MindDrive's
  896): replaced in a copy of that one file (SIZE_PATCHES), so the planner follows the tiny LLM's width."""

from __future__ import annotations

import re
import shutil
import sys
import tempfile
from contextlib import contextmanager
from pathlib import Path

import stubs

STUB_ROOTS = ["cv2", "nuscenes", "matplotlib", "shapely", "pyquaternion", "scipy", "numba", "terminaltables",
              "pycocotools", "detectron2", "diffusers", "flash_attn", "parrots", "stable_baselines3", "IPython",
              "waymo_open_dataset", "torchmetrics", "open3d", "mc", "mmdet", "prettytable", "skimage", "sklearn",
              "similaritymeasures", "casadi", "yapf", "addict", "lyft_dataset_sdk", "pandas", "seaborn", "plyfile",
              "trimesh", "imageio", "networkx", "descartes", "ujson", "petrel_client", "gym", "gymnasium", "wandb",
              "team_code", "rl_projects", "carla", "srunner", "leaderboard", "black", "zmq", "pavi",
              "psutil"]   # MindDrive's RL runner imports its CARLA agent
STUB_FORCE = ["torchvision"]     # installed with timm, built for another torch: never imported for real
DETECTOR = {"orion": "mmcv/models/detectors/orion.py", "minddrive": "mmcv/models/detectors/minddrive.py"}


def size_patches(model: str, hidden: int) -> list:
    """[(regex, replacement)] on the detector's source at the tiny size: its hard-coded planner widths."""
    if model == "orion":
        return [(r"\b8192\b", str(2 * hidden)), (r"\b4096\b", str(hidden))]
    return [(r"\b896\b", str(hidden))]


def working_copy(snapshot: Path, model: str, patches: list) -> Path:
    """The snapshot's mmcv/ in a temporary folder, its detector file patched (sizes only)."""
    root = Path(tempfile.mkdtemp(prefix=f"{model}_authors_"))
    shutil.copytree(snapshot / "mmcv", root / "mmcv")
    path = root / DETECTOR[model]
    text = path.read_text()
    for pattern, replacement in patches:
        text = re.sub(pattern, replacement, text)
    path.write_text(text)
    return root


class StandInTokenizer:
    """The tokenizer's part in building the model: its length, and ids for added tokens after the base vocabulary
    (as `add_tokens` numbers them). No vocabulary, no weights."""

    def __init__(self, base: int):
        self.added: list[str] = []
        self.base, self.unk_token, self.pad_token = base, "<unk>", None

    def add_tokens(self, tokens, special_tokens=False) -> int:
        new = [t for t in tokens if t not in self.added]
        self.added += new
        return len(new)

    def __len__(self) -> int:
        return self.base + len(self.added)

    def _id(self, text: str) -> list:
        return [self.base + self.added.index(text)] if text in self.added else [0]

    def convert_tokens_to_ids(self, tokens):
        return [self._id(t)[0] for t in tokens] if isinstance(tokens, list) else self._id(tokens)[0]

    def __call__(self, text, add_special_tokens=True, **kwargs):
        class Encoded:
            input_ids = [self._id(t) for t in text] if isinstance(text, list) else self._id(text)
        return Encoded()


def import_authors(root: Path):
    """The authors' `mmcv` package from the working copy (stubs installed first) -> that module."""
    stubs.install(STUB_ROOTS, force=STUB_FORCE)
    sys.path.insert(0, str(root))
    import mmcv   # noqa: F401  (theirs: the working copy's)
    assert Path(mmcv.__file__).resolve().is_relative_to(root.resolve()), mmcv.__file__
    return mmcv


def patch_loaders(llm_config: dict, lm_class_names: list, vocab: int) -> None:
    """from_pretrained of the authors' LLM classes -> the class built from `llm_config` (no weights to load);
    AutoTokenizer.from_pretrained -> StandInTokenizer(vocab)."""
    import transformers
    import mmcv.utils.misc as misc

    def built(cls, path, torch_dtype=None, device_map=None, **kwargs):
        config = cls.config_class(**llm_config)
        model = cls(config, **kwargs)
        return model.to(torch_dtype) if torch_dtype is not None else model

    for name in lm_class_names:
        cls = getattr(misc, name)
        cls.from_pretrained = classmethod(built)
    transformers.AutoTokenizer.from_pretrained = staticmethod(lambda *a, **k: StandInTokenizer(vocab))


@contextmanager
def parameters_on_meta(small: int = 4096):
    """Parameters over `small` elements registered inside go to the meta device (their init then does nothing);
    buffers and small parameters stay real, as the authors' code computes them and goes on computing with them
    (position_range -> coords_d; rope tables)."""
    from torch import nn
    original = nn.Module.register_parameter

    def register(module, name, param):
        if param is not None and param.device.type != "meta" and param.numel() > small:
            param = nn.Parameter(param.to("meta"), requires_grad=param.requires_grad)
        original(module, name, param)
    nn.Module.register_parameter = register
    try:
        yield
    finally:
        nn.Module.register_parameter = original
