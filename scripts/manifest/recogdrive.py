"""ReCogDrive's planner built by its authors' own classes (xiaomi-research/recogdrive @ 79a553b, as the fork
NIyueeE/recogdrive holds it): `ReCogDriveAgent` (navsim/agents/recogdrive/recogdrive_agent.py, the hidden-state
cache mode the released planners train in: no VLM inside) wrapped in their `AgentLightningModule`
(navsim/planning/training/agent_lightning_module.py) and written by a real Lightning Trainer's save_checkpoint,
for extract_manifest.py. Run with transformers 4.37.2 (internvl_chat/pyproject.toml), torch 2.13.0 here.

What is not the authors' own, each recorded in the manifest:
- weightless third-party modules their imports pull in (nuPlan, map and geometry libraries, ...): stubs.py;
- `.cuda()` (no GPU here): the identity while the agent is built;
- at the tiny size only, the size literals the planner hard-codes (feature_encoder's 1536 / 3584 VLM widths) and the
  DiT preset: replaced in a copy of those files (SIZE_PATCHES), so the planner reads a tiny VLM's width."""

from __future__ import annotations

import re
import shutil
import sys
import tempfile
from pathlib import Path

import stubs

STUB_ROOTS = ["nuplan", "shapely", "pyquaternion", "cv2", "matplotlib", "geopandas", "pandas", "scipy", "numba",
              "hydra", "omegaconf", "tqdm", "psutil", "ray", "sklearn", "PIL", "torchvision", "lzma_extra",
              "imageio", "decord", "deepspeed", "flash_attn", "bitsandbytes", "wandb", "tensorboard", "seaborn",
              "skimage", "tensorboardX", "lightning_fabric_extra", "einops_exts", "liger_kernel", "mmcv", "av"]
PLANNER = "navsim/agents/recogdrive/recogdrive_diffusion_planner.py"
AGENT = "navsim/agents/recogdrive/recogdrive_agent.py"
TINY_VLM_HIDDEN = 64      # the package's tiny-recogdrive VLM width, so its VLM directory pairs with this planner
TINY_DIT = {"heads": 2, "head_dim": 16, "layers": 2, "output_dim": 48, "mlp_hidden": 64}


def size_patches(tiny: bool) -> list:
    """[(file, regex, replacement)]: the tiny VLM width in place of the 2B / 8B ones feature_encoder hard-codes."""
    if not tiny:
        return []
    return [(PLANNER, r"nn\.Linear\(1536, config\.input_embedding_dim\)",
             f"nn.Linear({TINY_VLM_HIDDEN}, config.input_embedding_dim)")]


def working_copy(snapshot: Path, patches: list) -> Path:
    root = Path(tempfile.mkdtemp(prefix="recogdrive_authors_"))
    shutil.copytree(snapshot / "navsim", root / "navsim")
    for file, pattern, replacement in patches:
        path = root / file
        text, count = re.subn(pattern, replacement, path.read_text())
        assert count == 1, (file, pattern)
        path.write_text(text)
    return root


def build(snapshot: Path, tiny: bool, dit: dict | None):
    """(the Lightning module around the authors' agent, the patches used)."""
    import torch
    patches = size_patches(tiny)
    root = working_copy(snapshot, patches)
    stubs.install(STUB_ROOTS, force=["torchvision"], compiled=())   # installed with timm for another torch
    sys.path.insert(0, str(root))
    from navsim.agents.recogdrive import recogdrive_agent
    from navsim.planning.training.agent_lightning_module import AgentLightningModule
    assert Path(recogdrive_agent.__file__).resolve().is_relative_to(root.resolve())
    if dit is not None:                       # tiny: the DiT preset's sizes (heads, head_dim, layers, output_dim)
        recogdrive_agent.make_recogdrive_config = _tiny_config(recogdrive_agent.make_recogdrive_config, dit)
    original = torch.nn.Module.cuda
    torch.nn.Module.cuda = lambda self, *a, **k: self
    try:
        torch.manual_seed(0)
        agent = recogdrive_agent.ReCogDriveAgent(trajectory_sampling=_sampling(), cache_hidden_state=True,
                                                 dit_type="small", vlm_size="small", sampling_method="ddim")
    finally:
        torch.nn.Module.cuda = original
    return AgentLightningModule(agent), patches


def _tiny_config(make, dit: dict):
    def made(*args, **kwargs):
        config = make(*args, **{**kwargs, "input_embedding_dim": dit["heads"] * dit["head_dim"]})
        config.diffusion_model_cfg.update(num_heads=dit["heads"], head_dim=dit["head_dim"], num_layers=dit["layers"],
                                          output_dim=dit["output_dim"])
        config.hidden_size = dit["mlp_hidden"]
        return config
    return made


def _sampling():
    class Sampling:          # nuPlan's TrajectorySampling as the agent reads it (stubbed module): 8 poses, 0.5 s
        num_poses, interval_length, time_horizon = 8, 0.5, 4.0
    return Sampling()


def save_with_lightning(module, path: Path) -> None:
    """A real Lightning Trainer's save_checkpoint of the module (what ModelCheckpoint calls)."""
    import pytorch_lightning as pl
    trainer = pl.Trainer(accelerator="cpu", devices=1, logger=False, enable_checkpointing=False,
                         enable_progress_bar=False, max_epochs=1)
    trainer.strategy.connect(module)
    trainer.save_checkpoint(str(path))
