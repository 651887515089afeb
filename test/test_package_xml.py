"""Every dependency key of package.xml resolves with rosdep on Humble, Jazzy and Kilted (the key lists of
../shared/rosdep/ when that folder exists: they come from ros/rosdistro, see its README)."""

import os
import xml.etree.ElementTree as ET
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
# ../shared/rosdep beside the checkout (the project's machines), or where HVLA_ROSDEP_KEYS points.
CANDIDATES = [Path(p) for p in (os.environ.get("HVLA_ROSDEP_KEYS", ""),) if p] + \
    [ROOT.parent / "shared" / "rosdep", Path("/work/shared/rosdep")]
KEY_LISTS = next((c for c in CANDIDATES if c.is_dir()), CANDIDATES[0])
DISTROS = ("humble", "jazzy", "kilted")
DEPEND_TAGS = ("depend", "exec_depend", "build_depend", "test_depend", "buildtool_depend", "build_export_depend")


def package_keys() -> set[str]:
    root = ET.parse(ROOT / "package.xml").getroot()
    return {el.text.strip() for tag in DEPEND_TAGS for el in root.iter(tag)}


@pytest.mark.skipif(not KEY_LISTS.is_dir(), reason=f"no rosdep key lists at {KEY_LISTS} (only on the project's machines)")
@pytest.mark.parametrize("distro", DISTROS)
def test_every_package_xml_key_resolves_on(distro):
    known = set((KEY_LISTS / f"keys-{distro}.txt").read_text().split())
    missing = sorted(package_keys() - known)
    assert not missing, f"rosdep keys unknown on {distro}: {missing}"


def test_package_xml_names_what_the_code_imports_from_ros():
    keys = package_keys()
    for needed in ("rclpy", "lifecycle_msgs", "sensor_msgs", "nav_msgs", "diagnostic_msgs", "python3-pil"):
        assert needed in keys
