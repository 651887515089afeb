"""The shared-memory ring where the host is hostile or short: a /dev/shm too small for the ring is refused at
creation (never a SIGBUS at the first write), a segment of another ring version or of another user is refused
without leaking a descriptor, a planted segment name never breaks (or leaks) a creation, and a write that
raises leaves its slot reusable."""

import json
import os
import secrets
import shutil
import subprocess
import sys
import tempfile
import textwrap
import time
from pathlib import Path

import pytest
import torch

from hybrid_vla_ros.engine.handover import codec
from hybrid_vla_ros.engine.handover.endpoints import HandoverDecoder, pack_envelope
from hybrid_vla_ros.engine.handover.shm_ring import (RING_HEADER, RING_MAGIC, SHM_DIR, SharedMemoryRing,
                                                     SlotDescriptor, reclaim_stale_segments, ring_bytes,
                                                     segment_prefix)
from hybrid_vla_ros.errors import InputError
from hybrid_vla_ros.types import BoundaryState

OTHER_UID = 54321   # nobody on this machine: a segment chowned to it is another user's


def make_state(seq=0, tokens=10, hidden=8, **fields):
    return BoundaryState(hidden=torch.randn(1, tokens, hidden), position_ids=torch.arange(tokens).view(1, tokens),
                         attention_mask=torch.ones(1, tokens, dtype=torch.long), partition=3, seq=seq,
                         stamp_ns=1_000 + seq, **fields)


def open_fds() -> int:
    return len(os.listdir("/proc/self/fd"))


def plant(directory, name: str, version: int = 2, slots: int = 1, capacity: int = 64):
    """A segment with a ring header (of `version`) and the size that header promises."""
    path = directory / name
    path.write_bytes(b"\0" * ring_bytes(slots, capacity))
    with open(path, "r+b") as f:
        f.write(RING_HEADER.pack(RING_MAGIC, version, slots, capacity, 99, 1))
    return path


def shm_envelope(segment: str, ring_id: int = 99) -> bytes:
    desc = SlotDescriptor(segment, ring_id, 0, 3, 0, 16).pack()
    return pack_envelope("shm", 1, {"shm_segment": segment, "shm_slot": desc})


# -- 4: refusals of attach close what they opened ------------------------------------------------------------
@pytest.mark.skipif(not SHM_DIR.is_dir(), reason="no /dev/shm on this machine")
def test_boundary_messages_naming_a_ring_of_another_version_leak_no_descriptor():
    segment = f"{segment_prefix('local')}{os.getpid()}_oldversion"
    path = plant(SHM_DIR, segment, version=2)
    decoder = HandoverDecoder()
    try:
        before = open_fds()
        for _ in range(50):
            decoder.watch(shm_envelope(segment))
            with pytest.raises(InputError, match="ring version 2, expected"):
                decoder.decode(shm_envelope(segment))
        assert open_fds() == before
    finally:
        decoder.close()
        path.unlink()


def test_every_refusal_of_attach_closes_what_it_opened(tmp_path):
    prefix = segment_prefix("local")
    plant(tmp_path, f"{prefix}1_version", version=7)                            # another version
    (tmp_path / f"{prefix}1_magic").write_bytes(b"NOTARING" + b"\0" * 200)       # not a ring
    plant(tmp_path, f"{prefix}1_short", version=3, slots=4, capacity=4096)      # header promises more
    os.truncate(tmp_path / f"{prefix}1_short", 512)
    (tmp_path / f"{prefix}1_tiny").write_bytes(b"\0" * 8)                        # shorter than a header
    (tmp_path / f"{prefix}1_dir").mkdir()                                        # not a file at all
    before = open_fds()
    for name in ("version", "magic", "short", "tiny", "dir"):
        for _ in range(20):
            with pytest.raises(InputError):
                SharedMemoryRing.attach(f"{prefix}1_{name}", directory=tmp_path)
    assert open_fds() == before


# -- 6: a write that raises releases its slot -----------------------------------------------------------------
def test_a_write_that_raises_leaves_its_slot_free_and_the_next_write_goes_through(tmp_path):
    ring = SharedMemoryRing.create("wedge", slots=2, slot_capacity=codec.encoded_size(make_state()),
                                   directory=tmp_path)
    reader = SharedMemoryRing.attach(ring.segment, directory=tmp_path)
    try:
        bad = make_state(seq=1, chunk_index=5, chunk_count=2)   # refused by the codec half-way into the slot
        with pytest.raises(InputError, match="chunk index 5"):
            ring.write(bad)
        assert ring.free_slots() == 2
        for seq in range(2, 6):   # the slot it took is reused, the ring goes round
            desc = ring.write(make_state(seq=seq), timeout_s=2.0)
            assert reader.read(desc).seq == seq
    finally:
        reader.close()
        ring.close()


# -- 9: another user's segment, a planted name ---------------------------------------------------------------
@pytest.mark.skipif(os.geteuid() != 0, reason="chown to another uid needs root")
def test_a_segment_owned_by_another_user_is_refused_naming_its_owner(tmp_path):
    ring = SharedMemoryRing.create("theirs", slots=1, slot_capacity=codec.encoded_size(make_state()),
                                   directory=tmp_path)
    try:
        os.chmod(ring.path, 0o666)
        os.chown(ring.path, OTHER_UID, -1)
        before = open_fds()
        with pytest.raises(InputError, match=rf"owned by uid {OTHER_UID}.*not this user \(uid {os.getuid()}\)"):
            SharedMemoryRing.attach(ring.segment, directory=tmp_path)
        assert open_fds() == before
    finally:
        ring.close()


def test_ring_names_are_not_predictable():
    a = SharedMemoryRing.create("same", slots=1, slot_capacity=codec.encoded_size(make_state()))
    b = SharedMemoryRing.create("same", slots=1, slot_capacity=codec.encoded_size(make_state()))
    try:
        assert a.segment != b.segment
        assert a.segment.startswith(f"{segment_prefix('local')}{os.getpid()}_") and "same" in a.segment
    finally:
        a.close()
        b.close()


NOBODY = 65534


def create_as_nobody(directory: Path, planted_token: str) -> dict:
    """In a forked child turned uid NOBODY: plant (as root, before the switch) the names a ring 'prefix' would
    get, then create it. -> what happened: the refusal, descriptors and files left over."""
    read, write = os.pipe()
    pid = os.fork()
    if pid == 0:   # the child: never returns into pytest
        try:
            os.close(read)
            secrets.token_hex = lambda n=None: planted_token   # the name component the attacker guessed right
            stem = f"{segment_prefix('local', NOBODY)}{os.getpid()}_prefix"
            planted = [stem, f"{stem}_{planted_token}"]
            for name in planted:
                (directory / name).write_bytes(b"x")
            os.setgid(NOBODY)
            os.setuid(NOBODY)
            before = count_fds()
            try:
                SharedMemoryRing.create("prefix", slots=1, slot_capacity=4096, directory=directory)
                result = {"refused": None}
            except Exception as exc:  # noqa: BLE001 - reported to the parent as it is
                result = {"refused": f"{type(exc).__name__}: {exc}"}
            result.update(fds=count_fds() - before, left=sorted(p.name for p in directory.iterdir()
                                                                if p.name not in planted))
            os.write(write, json.dumps(result).encode())
        finally:
            os._exit(0)
    os.close(write)
    with os.fdopen(read) as f:
        text = f.read()
    os.waitpid(pid, 0)
    return json.loads(text)


def count_fds() -> int:
    """Open descriptors, counted without /proc/self/fd (closed to a process that changed its uid)."""
    count = 0
    for fd in range(4096):
        try:
            os.fstat(fd)
            count += 1
        except OSError:
            pass
    return count


@pytest.mark.skipif(os.geteuid() != 0 or not SHM_DIR.is_dir(), reason="planting another user's file needs root")
def test_a_planted_segment_name_is_refused_clearly_and_leaks_nothing():
    """Another user pre-creates the name our ring would get (/dev/shm is sticky: a rename over it fails). The
    creation is refused with a HybridVLAError that says so (the prefix counts the frame as a `handover`
    rejection: chunk_flow), and leaves no descriptor and no staging file behind."""
    directory = Path(tempfile.mkdtemp(prefix="hvla_test_planted_", dir=SHM_DIR))
    try:
        os.chmod(directory, 0o1777)   # like /dev/shm itself
        result = create_as_nobody(directory, "feedf00d")
    finally:
        shutil.rmtree(directory, ignore_errors=True)
    assert result["fds"] == 0 and result["left"] == [], result
    assert (result["refused"] or "").startswith("ConfigError") and "already exists" in result["refused"], result


def test_staging_files_of_a_creation_that_died_are_reclaimed_and_fresh_ones_are_left_alone(tmp_path):
    """A writer killed between its staging file and the final name left a reserved (real memory) file that
    no reclaim glob matched."""
    stem = f".{segment_prefix('local')}1_prefix_0badc0de"
    dead, fresh = tmp_path / f"{stem}.11111111", tmp_path / f"{stem}.22222222"
    for path in (dead, fresh):
        path.write_bytes(b"\0" * 4096)
    os.utime(dead, (time.time() - 60, time.time() - 60))
    assert reclaim_stale_segments(tmp_path) == [dead.name]
    assert fresh.exists() and not dead.exists()


# -- 2: a /dev/shm too small for the ring ---------------------------------------------------------------------
SMALL_SHM = textwrap.dedent("""
    import sys
    from pathlib import Path
    from hybrid_vla_ros.engine.handover.shm_ring import SharedMemoryRing
    from hybrid_vla_ros.types import BoundaryState
    import torch
    state = BoundaryState(hidden=torch.ones(1, 1024, 512), position_ids=torch.arange(1024).view(1, 1024),
                          attention_mask=torch.ones(1, 1024, dtype=torch.long), partition=2, seq=0)
    from hybrid_vla_ros.engine.handover import codec
    try:
        ring = SharedMemoryRing.create("big", slots=2, slot_capacity=codec.encoded_size(state))
    except Exception as exc:
        print("REFUSED", type(exc).__name__, exc, flush=True)
        print("LEFT", sorted(p.name for p in Path("/dev/shm").iterdir()))
        sys.exit(0)
    print("CREATED", flush=True)
    ring.write(state)
    print("WRITTEN", flush=True)
""")


def unshare_works() -> bool:
    if shutil.which("unshare") is None:
        return False
    return subprocess.run(["unshare", "-m", "true"], capture_output=True).returncode == 0


@pytest.mark.skipif(not unshare_works(), reason="unshare -m (a mount namespace of its own) is not permitted here")
def test_a_dev_shm_too_small_for_the_ring_is_refused_at_creation_with_the_sizes_and_the_remedy():
    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    script = f"mount -t tmpfs -o size=1M tmpfs /dev/shm && exec {sys.executable} -c \"$0\""
    out = subprocess.run(["unshare", "-m", "sh", "-c", script, SMALL_SHM], capture_output=True, text=True,
                         timeout=60, env={**os.environ, "PYTHONPATH": root})
    assert out.returncode == 0, (out.returncode, out.stdout, out.stderr[-2000:])   # not -7 (SIGBUS)
    assert "REFUSED ConfigError" in out.stdout, out.stdout
    assert "needs 4.0 MiB" in out.stdout and "1.0 MiB free" in out.stdout, out.stdout
    for remedy in ("--shm-size", "max_in_flight", "boundary_transport"):
        assert remedy in out.stdout, out.stdout
    assert "LEFT []" in out.stdout, out.stdout

