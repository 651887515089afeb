"""A ring's segment in /dev/shm (ROS-free): its name, its creation with the space reserved, its opening by a
reader with the owner checked, and the reclaim of segments a dead writer left. shm_ring.py lays the ring out
inside it.

- Names: `<segment_prefix(scope)><pid>_<name>_<8 random hex>`. The random part makes a name nobody can guess
  and plant beforehand; the final name is taken without replacing anything there (a planted or leftover file
  under it refuses the creation, cleanly).
- Space: a tmpfs segment is sparse; a write to a page /dev/shm has no room for is a SIGBUS that kills the
  process. The whole segment is reserved at creation (posix_fallocate): a /dev/shm too small refuses the
  creation with the sizes and the remedy instead (check_room says the same at the node's configure).
- Owner: a reader maps only a regular file of its own user (fstat after open, no symlink followed). Every
  refusal closes what it opened.
"""

from __future__ import annotations

import errno
import fcntl
import mmap
import os
import secrets
import stat
import time
from pathlib import Path

from ...errors import ConfigError, InputError, expect

SHM_DIR = Path("/dev/shm")
SEGMENT_PREFIX = "hvla_"
STAGING_GRACE_S = 10.0   # a staging file (a ring being made) this young is never reclaimed
REMEDY = ("give it more room (Docker: --shm-size=512m; Kubernetes: an emptyDir of medium Memory on /dev/shm), "
          "fewer states in flight (hybrid_vla_prefix's max_in_flight, or chunks: the ring holds max_in_flight x "
          "chunks of them), or the boundary carried inline on the topic (hybrid_vla_prefix's boundary_transport: "
          "inline)")


def segment_prefix(scope: str = "local", uid: int | None = None) -> str:
    """The name prefix of this user's rings in one scope (a ROS graph: see ros/nodes/serving/waypoints.py graph_scope)."""
    expect(scope.replace("_", "").isalnum(), InputError, f"ring scope '{scope}': letters, digits and _ only")
    return f"{SEGMENT_PREFIX}u{os.getuid() if uid is None else uid}_{scope}_"


def _owner_alive(path: Path) -> bool:
    """True while some process holds the owner's shared lock on the segment (kernel-tracked, released when
    the owner dies however it dies). Another user's segment we cannot open counts as alive."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW)
    except FileNotFoundError:
        return True  # gone already: nothing to reclaim
    except OSError:  # not ours to open, a symlink, ...: not ours to judge either
        return True
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        return True
    finally:
        os.close(fd)  # also drops the probe's lock
    return False


def reclaim_stale_segments(directory: Path = SHM_DIR) -> list[str]:
    """Unlink this user's ring segments that no live owner holds (a crashed or killed writer), and the staging
    files of creations that died half-way (their space is reserved: real memory; one younger than
    STAGING_GRACE_S may be a creation between its open and its lock). -> names."""
    removed = []
    own = f"{SEGMENT_PREFIX}u{os.getuid()}_*"
    for path in [*directory.glob(own), *directory.glob(f".{own}")]:
        if path.name.startswith(".") and _younger_than(path, STAGING_GRACE_S):
            continue
        if not _owner_alive(path):
            try:
                path.unlink()
                removed.append(path.name)
            except (FileNotFoundError, PermissionError):  # gone already, or not ours (sticky /dev/shm)
                pass
    return removed


def _younger_than(path: Path, seconds: float) -> bool:
    try:
        return time.time() - path.stat().st_mtime < seconds
    except OSError:   # gone already
        return True


def human(size: int) -> str:
    """4.0 MiB, 190 KiB, 1.5 GiB."""
    if size >= 2**30:
        return f"{size / 2**30:.1f} GiB"
    return f"{size / 2**20:.1f} MiB" if size >= 2**20 else f"{size / 2**10:.0f} KiB"


def room_error(what: str, needed: int, free: int, directory: Path) -> ConfigError:
    return ConfigError(f"{what} needs {human(needed)} ({needed} B) in {directory}, which has {human(free)} free "
                       f"({free} B): {REMEDY}")


def free_bytes(directory: Path) -> int:
    st = os.statvfs(directory)
    return st.f_bavail * st.f_frsize


def check_room(what: str, needed: int, directory: Path = SHM_DIR) -> None:
    """ConfigError (sizes, remedy) unless `directory` has `needed` bytes free, once this user's stale segments
    are gone (a configure-time check: the ring itself reserves its space when it is made)."""
    reclaim_stale_segments(directory)
    free = free_bytes(directory)
    if free < needed:
        raise room_error(what, needed, free, directory)


def name_token() -> str:
    """The random part of a ring's name (8 hex digits)."""
    return secrets.token_hex(4)


def create_segment(stem: str, size: int, write_header, directory: Path = SHM_DIR) -> tuple[Path, int, mmap.mmap]:
    """A new owner-only segment `<stem>_<random>` of `size` bytes, reserved, locked before it gets its name (a
    reclaimer never sees it unlocked), `write_header(mm)` called before the name appears. -> (path, fd, mm).
    Any failure leaves nothing behind (no descriptor, no staging file) and raises ConfigError saying why."""
    path = directory / f"{stem}_{name_token()}"
    staging = directory / f".{path.name}.{secrets.token_hex(4)}"  # a dot name: no reader looks it up
    try:
        fd = os.open(staging, os.O_CREAT | os.O_EXCL | os.O_RDWR | os.O_NOFOLLOW, 0o600)
    except OSError as exc:
        raise ConfigError(f"shared-memory ring '{path.name}': cannot create it in {directory} "
                          f"({exc.strerror})") from exc
    mm = None
    try:
        os.fchmod(fd, 0o600)  # owner-only whatever the umask
        fcntl.flock(fd, fcntl.LOCK_SH)  # held until this process closes the segment or dies
        _reserve(fd, size, path.name, directory)
        mm = mmap.mmap(fd, size)
        write_header(mm)
        _publish(staging, path)
    except BaseException as exc:
        if mm is not None:
            mm.close()
        os.close(fd)
        staging.unlink(missing_ok=True)
        if isinstance(exc, OSError):
            raise ConfigError(f"shared-memory ring '{path.name}': cannot create it ({exc.strerror or exc})") from exc
        raise
    return path, fd, mm


def _reserve(fd: int, size: int, name: str, directory: Path) -> None:
    """Every page of the segment allocated now: a full /dev/shm refuses here, not with a SIGBUS at a write."""
    try:
        os.posix_fallocate(fd, 0, size)
    except OSError as exc:
        if exc.errno not in (errno.ENOSPC, errno.ENOMEM, errno.EFBIG):
            raise
        raise room_error(f"shared-memory ring '{name}'", size, free_bytes(directory), directory) from exc


def _publish(staging: Path, path: Path) -> None:
    """The staging file under its final name, never over another file (a hard link fails if the name exists,
    where a rename would replace it or, on sticky /dev/shm, fail on another user's file)."""
    try:
        os.link(staging, path)
    except FileExistsError as exc:
        raise ConfigError(f"shared-memory ring '{path.name}': a file of that name already exists in "
                          f"{path.parent} (planted by someone else, or left behind); not replaced") from exc
    os.unlink(staging)


def open_segment(segment: str, directory: Path, min_size: int) -> tuple[int, mmap.mmap]:
    """A reader's view of this user's segment `segment`: (fd, mm) of a regular file owned by this user, at
    least `min_size` bytes. Every refusal is an InputError saying why, with nothing left open."""
    try:
        fd = os.open(directory / segment, os.O_RDWR | os.O_NOFOLLOW)
    except FileNotFoundError as exc:
        raise InputError(f"shared-memory segment '{segment}': does not exist (writer gone?)") from exc
    except OSError as exc:  # another user's (EACCES), a symlink (ELOOP), a directory, no descriptors left, ...
        raise InputError(f"shared-memory segment '{segment}': cannot be opened ({exc.strerror})") from exc
    except ValueError as exc:   # a NUL byte in the name
        raise InputError(f"shared-memory segment {segment[:80]!r}: not a file name ({exc})") from None
    try:
        st = os.fstat(fd)
        expect(stat.S_ISREG(st.st_mode), InputError, f"shared-memory segment '{segment}': not a regular file")
        expect(st.st_uid == os.getuid(), InputError,
               f"shared-memory segment '{segment}': owned by uid {st.st_uid}, not this user (uid {os.getuid()}); "
               f"another user's file under this user's ring names is never read")
        expect(st.st_size >= min_size, InputError, f"shared-memory segment '{segment}': only {st.st_size} bytes")
        return fd, mmap.mmap(fd, st.st_size)
    except BaseException as exc:
        os.close(fd)
        if isinstance(exc, OSError):   # a mapping the kernel refused
            raise InputError(f"shared-memory segment '{segment}': cannot be mapped ({exc.strerror or exc})") from exc
        raise
