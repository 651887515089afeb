"""A third party's scene encoder and head, in a package of its own installed into a fresh virtual environment,
are found through their entry points and served: a checkpoint naming them verifies exactly at every cut in a
subprocess of that environment. Where the package is not installed, the same checkpoint is refused by name."""

import json
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]

PYPROJECT = """
[build-system]
requires = ["setuptools"]
build-backend = "setuptools.build_meta"

[project]
name = "acme-vla-plugins"
version = "0.1.0"

[project.entry-points."hybrid_vla_ros.scene_encoders"]
mean_patch = "acme_vla_plugins:MeanPatchScene"

[project.entry-points."hybrid_vla_ros.heads"]
linear = "acme_vla_plugins:LinearHead"
"""

MODULE = '''
"""A memoryless scene encoder (mean-pooled patch grid per camera) and a linear head: a third party's plugins."""
import torch
from torch import nn
from hybrid_vla_ros.model.plugins import SceneEncoder, WaypointHead


class MeanPatchScene(SceneEncoder):
    def __init__(self, config, hidden_size):
        super().__init__(config)
        self.num_tokens = self.tokens_for(config)
        self.pool = nn.AdaptiveAvgPool2d(config["grid"])
        self.proj = nn.Linear(3, hidden_size)

    @classmethod
    def tokens_for(cls, config):
        return config["cameras"] * config["grid"] ** 2

    @classmethod
    def from_config(cls, config, hidden_size, spec=None):
        return cls(config, hidden_size)

    def forward(self, images, ego, stamp_ns):
        cells = self.pool(images).flatten(2).transpose(1, 2)          # (N, g*g, 3)
        return self.proj(cells.reshape(-1, 3))                        # (N g g, hidden)


class LinearHead(WaypointHead):
    def __init__(self, config, hidden_size):
        super().__init__(config)
        self.proj = nn.Linear(hidden_size * self.query_tokens, self.num_waypoints * 4)

    @classmethod
    def from_config(cls, config, hidden_size, spec=None):
        return cls(config, hidden_size)

    def forward(self, query_hidden):
        return self.proj(query_hidden.flatten(1)).view(-1, self.num_waypoints, 4)
'''

EXPORT = """
import dataclasses, sys
from hybrid_vla_ros.model.checkpoint import save_checkpoint
from hybrid_vla_ros.model.presets import get_preset
from hybrid_vla_ros.model.vla import build_model
spec = dataclasses.replace(get_preset("tiny-scene"), name="acme", scene_encoder="mean_patch", head="linear",
                           query_tokens=1, scene_config={"grid": 2, "cameras": 2})
save_checkpoint(build_model(spec), sys.argv[1])
"""


@pytest.fixture(scope="module")
def plugin_venv(tmp_path_factory):
    """A fresh venv (no packages of its own) that sees this environment's (torch, transformers, pip, setuptools,
    this repository) through a .pth file, with the plugin package installed into it by pip, offline."""
    root = tmp_path_factory.mktemp("plugin")
    package = root / "acme"
    (package / "acme_vla_plugins").mkdir(parents=True)
    (package / "pyproject.toml").write_text(PYPROJECT)
    (package / "acme_vla_plugins" / "__init__.py").write_text(textwrap.dedent(MODULE))
    venv = root / "venv"
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(venv)], check=True, timeout=300)
    python = venv / "bin" / "python"
    site = subprocess.run([str(python), "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
                          capture_output=True, text=True, check=True).stdout.strip()
    ours = [p for p in sys.path if p.endswith("site-packages")]
    (Path(site) / "parent_env.pth").write_text("\n".join([str(REPO)] + ours) + "\n")
    install = subprocess.run([str(python), "-m", "pip", "install", "--no-deps", "--no-build-isolation", "--no-index",
                              "-q", str(package)], capture_output=True, text=True, timeout=300)
    assert install.returncode == 0, install.stderr
    return python


def test_an_installed_plugin_package_is_found_through_its_entry_points_and_served_exactly(plugin_venv, tmp_path):
    ckpt = tmp_path / "acme"
    out = subprocess.run([str(plugin_venv), "-c", EXPORT, str(ckpt)], capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stderr
    meta = json.loads(subprocess.run([sys.executable, "-c", (
        "import json, sys; from safetensors import safe_open; "
        "print(json.dumps(safe_open(sys.argv[1], 'pt').metadata()))"), str(ckpt / "scene_encoder.safetensors")],
        capture_output=True, text=True, check=True).stdout)
    assert meta["plugin"] == "mean_patch" and json.loads(meta["config"]) == {"grid": 2, "cameras": 2}
    verify = subprocess.run([str(plugin_venv), "-m", "hybrid_vla_ros.cli", "verify", "--checkpoint", str(ckpt),
                             "--json"], capture_output=True, text=True, timeout=300)
    assert verify.returncode == 0, verify.stderr
    report = json.loads(verify.stdout)
    assert report["family"] == "scene_qwen2" and len(report["results"]) == 5
    # split vs HF's forward: same kernels, same inputs, one thread (test_partition.py, EXACT)
    assert report["max_abs_diff"] == 0.0
    # this test's own environment does not have the package: refused, naming what is there
    refused = subprocess.run([sys.executable, "-m", "hybrid_vla_ros.cli", "verify", "--checkpoint", str(ckpt)],
                             capture_output=True, text=True, timeout=300, cwd=REPO)
    assert refused.returncode != 0
    assert "no plugin 'mean_patch'" in refused.stderr and "query_scene" in refused.stderr, refused.stderr
