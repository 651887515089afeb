"""The DDS profile for large camera frames (data/dds/fastdds_large_frames.xml), applied through the
environment before rclpy creates its participant. ROS-import-free so entry points can call it first."""

from __future__ import annotations

import os
from pathlib import Path

PROFILE = Path(__file__).resolve().parent.parent / "data" / "dds" / "fastdds_large_frames.xml"
PROFILE_VARIABLES = ("FASTDDS_DEFAULT_PROFILES_FILE", "FASTRTPS_DEFAULT_PROFILES_FILE")  # Fast DDS 3.x, 2.x


def use_large_frame_profile(environ=None) -> str:
    """Point Fast DDS at the package's profile unless the user chose one (either variable set, even empty,
    means the user decided). Sets both names: Humble's Fast DDS 2.6 reads the older one. -> what applies."""
    environ = os.environ if environ is None else environ
    chosen = [name for name in PROFILE_VARIABLES if name in environ]
    if chosen:
        return f"user's {chosen[0]}={environ[chosen[0]]!r}"
    for name in PROFILE_VARIABLES:
        environ[name] = str(PROFILE)
    return f"hybrid_vla_ros large-frame profile {PROFILE}"
