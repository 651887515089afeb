"""The DDS profile for large camera frames (data/dds/fastdds_large_frames.xml), applied through the
environment before rclpy creates its participant, and the reclaiming of the shared-memory segments that dead
participants leave in /dev/shm. ROS-import-free so entry points can call it first."""

from __future__ import annotations

import fcntl
import os
import re
import time
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


# ---- Fast DDS shared-memory segments of dead participants ----
# Every participant with the SHM transport makes /dev/shm/fastdds_<16 hex> (this profile: a 64 MiB segment, its
# pages real memory once written) and fastdds_<16 hex>_el, which it flock()s for its whole life. A participant
# that dies without shutting down (SIGKILL, OOM kill, a crash) leaves both behind, and nothing else removes
# them: one test suite left 229 of them, 4.3 GB of memory, and six suites on one machine ended in an OOM kill
# (docs/RELIABILITY.md). What `fastdds shm clean` does, without the tool: a segment whose lock file nobody
# holds is dead. The shared port segments (fastdds_port<N>) are small and left alone.
SHM_DIR = Path("/dev/shm")
PARTICIPANT_SEGMENT = re.compile(r"fastdds_[0-9a-f]{16}")
START_GRACE_S = 30.0   # a participant younger than this may be between creating its lock file and taking it


def _lock_free(lock_file: Path) -> bool:
    """True when no process holds `lock_file`'s flock (our own probe's lock is dropped on close)."""
    try:
        fd = os.open(lock_file, os.O_RDONLY)
    except OSError:
        return False
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        return True
    except OSError:
        return False
    finally:
        os.close(fd)


def _dead(segment: Path, now: float, grace_s: float) -> bool:
    lock_file = segment.with_name(segment.name + "_el")
    try:
        info = lock_file.stat()
    except OSError:
        return False
    return info.st_uid == os.getuid() and now - info.st_mtime > grace_s and _lock_free(lock_file)


def reclaim_dead_participant_segments(directory: Path = SHM_DIR, grace_s: float = START_GRACE_S) -> list[str]:
    """Unlink this user's Fast DDS participant segments (and their lock files) that no live process holds.
    -> the names removed. Safe beside running graphs: a live participant holds its lock."""
    if not directory.is_dir():
        return []
    now, removed = time.time(), []
    for segment in directory.glob("fastdds_*"):
        if PARTICIPANT_SEGMENT.fullmatch(segment.name) and _dead(segment, now, grace_s):
            for path in (segment, segment.with_name(segment.name + "_el")):
                try:
                    path.unlink()
                except OSError:  # gone already (another reclaimer)
                    pass
            removed.append(segment.name)
    return removed
