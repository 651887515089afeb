"""The shell scripts' embedded Python stays in step with the package: every `from hybrid_vla_ros... import ...`
in scripts/*.sh resolves (a script for a GPU that is lent only sometimes must not fail on a moved module)."""

import importlib
import re
import subprocess
from pathlib import Path

import pytest

SCRIPTS = sorted((Path(__file__).resolve().parents[1] / "scripts").glob("*.sh"))
IMPORT = re.compile(r"^\s*from (hybrid_vla_ros[\w.]*) import ([\w, ]+)$", re.MULTILINE)


@pytest.mark.parametrize("script", SCRIPTS, ids=lambda p: p.name)
def test_a_script_parses_and_its_package_imports_resolve(script):
    assert subprocess.run(["bash", "-n", str(script)], capture_output=True).returncode == 0
    for module, names in IMPORT.findall(script.read_text()):
        loaded = importlib.import_module(module)
        missing = [n.strip() for n in names.split(",") if not hasattr(loaded, n.strip())]
        assert not missing, f"{script.name}: {module} has no {missing}"


def test_the_gpu_script_imports_are_checked_at_all():
    text = (Path(__file__).resolve().parents[1] / "scripts" / "gpu_plan_check.sh").read_text()
    assert len(IMPORT.findall(text)) >= 3
