"""The DDS profile for large camera frames (data/dds/fastdds_large_frames.xml), applied through the
environment before rclpy creates its participant. ROS-import-free so entry points can call it first."""

from __future__ import annotations

import os
from importlib import metadata
from pathlib import Path

PROFILE = Path(__file__).resolve().parents[2] / "data" / "dds" / "fastdds_large_frames.xml"
PROFILE_VARIABLES = ("FASTDDS_DEFAULT_PROFILES_FILE", "FASTRTPS_DEFAULT_PROFILES_FILE")  # Fast DDS 3.x, 2.x
FAST_DDS_2_DISTROS = ("humble", "iron", "jazzy")


def fast_dds_major(environ) -> int:
    """Fast DDS 2.x (Humble, Jazzy) reads FASTRTPS_DEFAULT_PROFILES_FILE; 3.x (Kilted on) FASTDDS_..., and
    warns that the old name is deprecated when it is set. A sourced ROS says its distro; PyPI wheels say
    which Fast DDS they carry (ros-fastdds 3.x, ros-fastrtps 2.x)."""
    distro = environ.get("ROS_DISTRO", "")
    if distro:
        return 2 if distro in FAST_DDS_2_DISTROS else 3
    for package, major in (("ros-fastdds", 3), ("ros-fastrtps", 2)):
        try:
            metadata.version(package)
            return major
        except metadata.PackageNotFoundError:
            continue
    return 3


def use_large_frame_profile(environ=None) -> str:
    """Point Fast DDS at the package's profile unless the user chose one (either variable set, even empty,
    means the user decided), under the name this Fast DDS reads. -> what applies."""
    environ = os.environ if environ is None else environ
    chosen = [name for name in PROFILE_VARIABLES if name in environ]
    if chosen:
        return f"user's {chosen[0]}={environ[chosen[0]]!r}"
    name = PROFILE_VARIABLES[0] if fast_dds_major(environ) >= 3 else PROFILE_VARIABLES[1]
    environ[name] = str(PROFILE)
    return f"hybrid_vla_ros large-frame profile {PROFILE} ({name})"
