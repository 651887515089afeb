"""The install prefix `colcon build` makes for this package, laid out for one `hybrid-vla launch` run in a
temporary folder (never in the source tree): share/hybrid_vla_ros/{package.xml,launch,config,schema}, the
ament index marker share/ament_index/resource_index/packages/hybrid_vla_ros, and lib/hybrid_vla_ros/<name>
for every console script of the installed distribution (what launch_ros runs for `<node exec=...>`), each
started with this interpreter. Copies, so that editing the checkout during a run changes nothing of it."""

from __future__ import annotations

import shutil
import sys
import tempfile
from contextlib import contextmanager
from importlib.metadata import PackageNotFoundError, distribution
from pathlib import Path

from ...errors import ConfigError

PACKAGE = "hybrid_vla_ros"
SHARED = ("package.xml", "launch", "config", "schema")


def source_root() -> Path:
    """The folder holding the hybrid_vla_ros package: the checkout for `pip install -e .`."""
    return Path(__file__).resolve().parents[3]


def source_share() -> Path:
    """Where package.xml, launch/ and config/ are: the checkout, else the share/ folder a `pip install .`
    writes (setup.py's data_files) under this environment's prefix."""
    for folder in (source_root(), Path(sys.prefix) / "share" / PACKAGE):
        if (folder / "package.xml").is_file() and (folder / "launch").is_dir():
            return folder
    raise ConfigError(f"{PACKAGE}'s launch files are neither in {source_root()} nor in "
                      f"{Path(sys.prefix) / 'share' / PACKAGE}: reinstall the package (pip install -e .)")


def console_scripts() -> dict[str, str]:
    """name -> 'module:function' of every console script the installed distribution declares."""
    try:
        points = distribution(PACKAGE).entry_points
    except PackageNotFoundError:
        raise ConfigError(f"{PACKAGE} is not installed in this environment (pip install -e .): its node "
                          "executables are unknown") from None
    return {p.name: p.value for p in points if p.group == "console_scripts"}


def write_executable(path: Path, target: str) -> None:
    module, _, function = target.partition(":")
    path.write_text(f"#!{sys.executable}\nimport sys\nfrom {module} import {function}\nsys.exit({function}())\n")
    path.chmod(0o755)


def lay_out(prefix: Path) -> Path:
    """The package's installed layout under `prefix`. -> prefix."""
    share, source = prefix / "share" / PACKAGE, source_share()
    share.mkdir(parents=True)
    for item in SHARED:
        if (source / item).is_dir():
            shutil.copytree(source / item, share / item)
        elif (source / item).is_file():
            shutil.copy(source / item, share / item)
    index = prefix / "share" / "ament_index" / "resource_index" / "packages"
    index.mkdir(parents=True)
    (index / PACKAGE).write_text("")
    lib = prefix / "lib" / PACKAGE
    lib.mkdir(parents=True)
    for name, target in console_scripts().items():
        write_executable(lib / name, target)
    return prefix


@contextmanager
def laid_out_prefix():
    """A temporary prefix with the package laid out, removed afterwards."""
    with tempfile.TemporaryDirectory(prefix="hybrid_vla_launch_") as folder:
        yield lay_out(Path(folder))
