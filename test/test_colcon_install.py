"""`colcon build` of this package (ament_python) in a temporary workspace, as a user builds it in an Autoware
workspace, and the installed layout checked where `ros2 launch` and the nodes look: share/hybrid_vla_ros
(package.xml, launch, config, schema), the ament index marker, the executables in lib/hybrid_vla_ros, the
package's data (shipped model, drives, DDS profile) in the installed Python package. Then, with only the
install on the paths: the package imports from there, finds its share directory, its configs validate
against its schemas, the shipped model and drives load, the launch files' defaults resolve, an installed
executable runs, and the installed launch file brings the graph up, serves and stops."""

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path
from xml.etree import ElementTree

import pytest

from test_launch import launch_paths, launch_serves_and_stops

pytestmark = pytest.mark.slow
ROOT = Path(__file__).resolve().parents[1]
PACKAGE = "hybrid_vla_ros"
IGNORED = shutil.ignore_patterns(".git", ".venv*", "out", "build", "install", "log", "__pycache__", "*.egg-info",
                                 ".pytest_cache", ".hypothesis")


def colcon() -> str:
    found = shutil.which("colcon", path=str(Path(sys.executable).parent)) or shutil.which("colcon")
    if found is None:
        why = "colcon is not installed here (requirements.txt lists colcon-core and colcon-ros)"
        if os.environ.get("CI"):
            pytest.fail(why + "; CI's set-up should have")
        pytest.skip(why)
    return found


@pytest.fixture(scope="module")
def install(tmp_path_factory) -> Path:
    """colcon build --merge-install of a copy of this source tree; -> the install prefix."""
    tool = colcon()
    workspace = tmp_path_factory.mktemp("colcon_ws")
    shutil.copytree(ROOT, workspace / "src" / PACKAGE, ignore=IGNORED)
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}  # the build sees its own source only
    done = subprocess.run([tool, "build", "--merge-install"], cwd=workspace, env=env, capture_output=True,
                          text=True, timeout=600)
    assert done.returncode == 0, (done.stdout + done.stderr)[-4000:]
    assert f"Finished <<< {PACKAGE}" in done.stdout, done.stdout[-2000:]
    return workspace / "install"


def site_packages(prefix: Path) -> Path:
    return prefix / "lib" / f"python{sys.version_info[0]}.{sys.version_info[1]}" / "site-packages"


def files(folder: Path) -> dict[str, int]:
    return {str(p.relative_to(folder)): p.stat().st_size for p in folder.rglob("*") if p.is_file()}


def test_colcon_installs_what_ros2_launch_and_the_nodes_look_for(install):
    share = install / "share" / PACKAGE
    assert (share / "package.xml").read_text() == (ROOT / "package.xml").read_text()
    for folder in ("launch", "config", "schema"):
        assert files(share / folder) == files(ROOT / folder), folder
    assert (install / "share" / "ament_index" / "resource_index" / "packages" / PACKAGE).is_file()
    xml = ElementTree.parse(ROOT / "launch" / "hybrid_vla.launch.xml").getroot()
    executables = {n.get("exec") for n in xml.iter("node")} | {"hybrid-vla"}
    for exe in executables:  # where launch_ros looks: <prefix>/lib/<package>/<executable>
        script = install / "lib" / PACKAGE / exe
        assert os.access(script, os.X_OK), script
        assert script.read_text().splitlines()[0] == f"#!{sys.executable}", script
    installed = site_packages(install) / PACKAGE
    assert files(installed / "data") == files(ROOT / PACKAGE / "data")  # model, drives, DDS profile
    for module in ("ros/outputs/candidates.py", "ros/inputs/route_input.py"):  # the subpackages find_packages adds
        assert (installed / module).is_file(), module


CHECK = """
import json, sys
from pathlib import Path
import jsonschema, yaml
import hybrid_vla_ros
from ament_index_python.packages import get_package_prefix, get_package_share_directory
from launch import LaunchContext
from launch.actions import DeclareLaunchArgument
from launch.launch_description_sources import AnyLaunchDescriptionSource
from launch_ros.substitutions import FindPackageShare
from hybrid_vla_ros.model.load import load_vla, resolve_checkpoint
from hybrid_vla_ros.ros.bags.storage import bag_info
from hybrid_vla_ros.ros.demo import ROAD_DRIVE, SAMPLE_DRIVE
from hybrid_vla_ros.ros.launch_support import dds
from hybrid_vla_ros.ros.launch_support.bringup import config_dir, graph_params
from hybrid_vla_ros.ros.topics import NODES
share, context = Path(get_package_share_directory("hybrid_vla_ros")), LaunchContext()
out = {"package": hybrid_vla_ros.__file__, "share": str(share), "prefix": get_package_prefix("hybrid_vla_ros"),
       "find_package_share": FindPackageShare("hybrid_vla_ros").perform(context), "config_dir": str(config_dir()),
       "dds_profile": str(dds.PROFILE), "builtin_drive": resolve_checkpoint("builtin:drive"),
       "drive_messages": [bag_info(ROAD_DRIVE).message_count, bag_info(SAMPLE_DRIVE).message_count],
       "suffix_generator": graph_params()["hybrid_vla_suffix"]["generator_name"],
       "model_blocks": load_vla(checkpoint="builtin:drive").num_blocks}
for node in NODES:
    jsonschema.validate(yaml.safe_load((share / "config" / f"{node}.param.yaml").read_text()),
                        json.loads((share / "schema" / f"{node}.schema.json").read_text()))
out["launch_defaults"] = {}
for name in ("hybrid_vla.launch.py", "hybrid_vla.launch.xml"):
    for entity in AnyLaunchDescriptionSource(str(share / "launch" / name)).get_launch_description(context).entities:
        if isinstance(entity, DeclareLaunchArgument) and entity.default_value:
            out["launch_defaults"][f"{name}:{entity.name}"] = "".join(s.perform(context) for s in entity.default_value)
print(json.dumps(out))
"""


def installed_env(install: Path) -> dict:
    """Only the install (and launch, where it is vendored) on the paths: nothing of the source tree."""
    paths = launch_paths()
    if paths is None:
        pytest.skip("neither an installed launch_ros nor ../shared/vendor/ros2_launch is available here")
    env = {k: v for k, v in os.environ.items() if not k.startswith(("FASTDDS_", "FASTRTPS_"))}
    env["PYTHONPATH"] = os.pathsep.join([str(site_packages(install)), *paths[0]])
    env["AMENT_PREFIX_PATH"] = os.pathsep.join([str(install), *paths[1], os.environ.get("AMENT_PREFIX_PATH", "")])
    return env


def test_the_installed_package_finds_its_share_configs_schemas_and_data(install, tmp_path):
    env = installed_env(install)
    done = subprocess.run([sys.executable, "-c", CHECK], cwd=tmp_path, env=env, capture_output=True, text=True,
                          timeout=300)
    assert done.returncode == 0, done.stderr[-4000:]
    out = json.loads(done.stdout.strip().splitlines()[-1])
    share, site = install / "share" / PACKAGE, site_packages(install) / PACKAGE
    assert out["package"] == str(site / "__init__.py")  # the installed copy, not the source tree
    assert out["share"] == out["find_package_share"] == str(share) and out["prefix"] == str(install)
    assert out["config_dir"] == str(share / "config")
    assert out["dds_profile"] == str(site / "data" / "dds" / "fastdds_large_frames.xml")
    assert out["builtin_drive"] == str(site / "data" / "models" / "drive") and out["model_blocks"] == 4
    from hybrid_vla_ros.ros.bags.storage import bag_info
    data = ROOT / PACKAGE / "data"
    assert out["drive_messages"] == [bag_info(data / "road_drive").message_count,
                                     bag_info(data / "sample_drive").message_count]
    assert out["suffix_generator"] == "hybrid_vla"
    for launch in ("hybrid_vla.launch.py", "hybrid_vla.launch.xml"):
        for node in ("prefix", "suffix", "scheduler"):
            assert out["launch_defaults"][f"{launch}:{node}_param_file"] == str(
                share / "config" / f"hybrid_vla_{node}.param.yaml")
        assert out["launch_defaults"][f"{launch}:output/trajectories"] == \
            "/planning/generator/hybrid_vla/candidate_trajectories"
    (tmp_path / "s").mkdir()
    schema = subprocess.run([str(install / "lib" / PACKAGE / "hybrid-vla"), "schema", "--out", str(tmp_path / "s")],
                            cwd=tmp_path, env=env, capture_output=True, text=True, timeout=120)
    assert schema.returncode == 0, schema.stderr[-3000:]
    assert files(tmp_path / "s") == files(share / "schema")  # the installed executable runs the installed code


def test_the_installed_launch_file_serves_from_the_colcon_install(install, tmp_path, monkeypatch):
    launch_serves_and_stops(tmp_path, monkeypatch, "hybrid_vla.launch.xml", True, prefix=install,
                            python_path=(str(site_packages(install)),))
