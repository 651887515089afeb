"""The shared-memory ring's liveness follows its reader's own (engine/handover/ring_reader.py, issue 25): a
reader busy for seconds, in torch kernels or in Python, still beats every READER_BEAT_S from its own thread,
and a ring that appears while it is busy (a restarted prefix, a ring grown for a deeper cut) is beaten from
the moment its first descriptor arrives, not once the compute thread gets to it."""

import struct
import subprocess
import sys
import textwrap
import threading
import time

import pytest
import torch

from hybrid_vla_ros.engine.handover import shm_ring
from hybrid_vla_ros.engine.handover.shm_ring import READER_BEAT_S, READER_OFFSET, RECLAIM_AFTER_S
from hybrid_vla_ros.engine.handover.transport import SharedMemoryTransport
from hybrid_vla_ros.types import BoundaryState


def make_state(seq=0):
    return BoundaryState(hidden=torch.randn(1, 10, 8), position_ids=torch.arange(30).view(3, 1, 10),
                         attention_mask=torch.ones(1, 10, dtype=torch.long), partition=3, seq=seq,
                         stamp_ns=1_700_000_000_000_000_000 + seq, query_index=9)


def test_a_ring_that_appears_while_its_reader_is_busy_is_beaten_from_its_first_descriptor(monkeypatch):
    """The suffix computes a long frame of the old prefix; the restarted prefix's ring fills meanwhile. Its
    READY slots are the live reader's: the writer waits for them (before: taken back after 1 s as a dead
    reader's, the frame lost and counted at both ends). The contrast, a ring whose descriptor never arrives,
    is taken back after the first-contact wait, shortened here to RECLAIM_AFTER_S."""
    monkeypatch.setattr(shm_ring, "FIRST_CONTACT_S", RECLAIM_AFTER_S)
    reader, old = SharedMemoryTransport(), SharedMemoryTransport(slots=1, name="before")
    new, unwatched = SharedMemoryTransport(slots=1, name="after"), SharedMemoryTransport(slots=1, name="other")
    try:
        reader.receive(old.send(make_state(0)))              # the reader is up, busy with frame 0 now
        handle = new.send(make_state(0))                      # the restarted writer's first frame ...
        reader.watch(handle)                                  # ... its message arrived (the executor)
        unwatched.send(make_state(0))                         # (a descriptor that never arrived, for contrast)
        time.sleep(RECLAIM_AFTER_S + 0.3)                     # the reader is still computing
        with pytest.raises(TimeoutError):                     # the slot stays the live reader's
            new.ring.write(make_state(1), timeout_s=0.3)
        assert new.reclaimed == 0
        unwatched.ring.write(make_state(1), timeout_s=0.3)   # nobody ever beat that one: taken back
        assert unwatched.reclaimed == 1
        assert reader.receive(handle).seq == 0               # read in its turn, intact
    finally:
        for transport in (reader, old, new, unwatched):
            transport.close()


BUSY_READER = textwrap.dedent("""
    import sys, time
    import torch
    from hybrid_vla_ros.engine.handover.transport import SharedMemoryTransport
    torch.set_num_threads(1)
    reader = SharedMemoryTransport()
    size = 5000 if sys.argv[2] == "torch" else 64   # one 5000^3 GEMM: over a second in a single torch call
    a, b = torch.randn(size, size), torch.randn(size, size)
    for line in sys.stdin:
        segment, packed = line.split()
        reader.receive((segment, bytes.fromhex(packed)))
        print("got", flush=True)
        end = time.monotonic() + float(sys.argv[1])
        while time.monotonic() < end:                 # a real-size suffix frame: seconds of torch kernels ...
            c = a @ b
            if sys.argv[2] == "python":                # ... or of Python holding the GIL between bytecodes
                sum(i * i for i in range(200_000))
        print("done", flush=True)
""")


@pytest.mark.parametrize("work", ["torch", "python"])
def test_a_reader_busy_for_seconds_keeps_beating(work):
    """Sampled from the writer's process: the reader's heartbeat never goes quiet for long while its main
    thread computes (torch releases the GIL in its kernels, here one GEMM of over a second; pure Python
    hands it over every switch interval)."""
    child = subprocess.Popen([sys.executable, "-c", BUSY_READER, "1.5", work], stdin=subprocess.PIPE,
                             stdout=subprocess.PIPE, text=True)
    writer = SharedMemoryTransport(slots=1)
    gaps, stop = [], threading.Event()

    def sample() -> None:
        while not stop.wait(0.02):
            beat_ns = struct.unpack_from("<Q", writer.ring._mm, READER_OFFSET)[0]
            gaps.append(time.monotonic_ns() / 1e9 - beat_ns / 1e9)
    try:
        segment, packed = writer.send(make_state(0))
        child.stdin.write(f"{segment} {packed.hex()}\n")
        child.stdin.flush()
        assert child.stdout.readline().split() == ["got"]
        sampler = threading.Thread(target=sample)
        sampler.start()
        assert child.stdout.readline().split() == ["done"]
        stop.set()
        sampler.join()
        assert len(gaps) > 20 and max(gaps) < 5 * READER_BEAT_S < RECLAIM_AFTER_S, max(gaps)
    finally:
        stop.set()
        child.kill()
        child.wait(10)
        writer.close()
