"""Boundary transports and the wire format: round trips, and every decoder check."""

import os
import signal
import stat
import subprocess
import sys
import textwrap
import time

import pytest
import torch

from hybrid_vla_ros.engine.handover import codec, shm_segment
from hybrid_vla_ros.engine.handover import message as hvlm
from hybrid_vla_ros.engine.handover.shm_ring import (FIRST_CONTACT_S, RECLAIM_AFTER_S, SHM_DIR, SharedMemoryRing,
                                                   SlotDescriptor, reclaim_stale_segments)
from hybrid_vla_ros.engine.handover.transport import InProcessTransport, SharedMemoryTransport
from hybrid_vla_ros.types import BoundaryState
from hybrid_vla_ros.errors import InputError


def make_state(seq=0, partition=3, dtype=torch.float32, tokens=10, hidden=8):
    return BoundaryState(hidden=torch.randn(1, tokens, hidden).to(dtype),
                         position_ids=torch.arange(3 * tokens).view(3, 1, tokens),
                         attention_mask=torch.ones(1, tokens, dtype=torch.long), partition=partition, seq=seq,
                         stamp_ns=1_700_000_000_000_000_000 + seq, query_index=tokens - 1)


def assert_same(a, b):
    assert torch.equal(a.hidden, b.hidden) and a.hidden.dtype == b.hidden.dtype
    assert torch.equal(a.position_ids, b.position_ids) and torch.equal(a.attention_mask, b.attention_mask)
    assert (a.partition, a.seq, a.stamp_ns, a.query_index) == (b.partition, b.seq, b.stamp_ns, b.query_index)


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16, torch.float16])
def test_codec_round_trip_keeps_dtype_shape_and_metadata(dtype):
    state = make_state(dtype=dtype)
    data = codec.encode(state)
    assert len(data) == codec.encoded_size(state)
    assert_same(state, codec.decode(data))


def test_codec_rejects_foreign_bytes_and_other_versions():
    data = bytearray(codec.encode(make_state()))
    with pytest.raises(InputError, match=r"magic b'XXXX', expected b'HVLM'"):
        codec.decode(b"XXXX" + bytes(data[4:]))
    data[4] = 9
    with pytest.raises(InputError, match=r"HVLM version 9; this node reads version 1"):
        codec.decode(bytes(data))
    with pytest.raises(InputError, match="shorter than a magic"):
        codec.decode(b"HV")
    with pytest.raises(InputError, match="shorter than the header"):
        codec.decode(b"HVLM\x01")


def test_codec_rejects_truncated_and_padded_payloads():
    data = codec.encode(make_state())
    with pytest.raises(InputError, match="truncated"):
        codec.decode(data[:-5])
    with pytest.raises(InputError, match="3 trailing bytes"):
        codec.decode(data + b"abc")


def test_codec_rejects_unknown_dtype_and_size_mismatch():
    data = bytearray(codec.encode(make_state()))
    first_tensor = hvlm.HEADER.size + hvlm.ENTRY.size + hvlm.PART.size   # `hidden`, the entry's first part
    bad = bytearray(data)
    bad[first_tensor] = 99
    with pytest.raises(InputError, match="tensor 'hidden' has unknown dtype code 99"):
        codec.decode(bytes(bad))
    bad = bytearray(data)
    bad[first_tensor + 2] = 11  # first dim 1 -> 11: shape no longer matches the declared byte count
    with pytest.raises(InputError, match=r"tensor 'hidden' declares 320 bytes, shape \(11, 10, 8\)"):
        codec.decode(bytes(bad))


def test_in_process_transport_hands_over_the_same_object():
    transport = InProcessTransport()
    state = make_state()
    handle = transport.send(state)
    assert isinstance(handle, int)
    assert transport.receive(handle) is state
    with pytest.raises(InputError, match=f"handle {handle}: unknown or already taken"):
        transport.receive(handle)


def test_shm_ring_round_trip_permissions_and_cleanup():
    transport = SharedMemoryTransport(slots=2)
    for seq in range(5):
        state = make_state(seq=seq, dtype=torch.bfloat16)
        assert_same(state, transport.receive(transport.send(state)))
    path = transport.ring.path
    assert stat.S_IMODE(os.stat(path).st_mode) == 0o600
    assert path.name.startswith(f"hvla_u{os.getuid()}_local_{os.getpid()}_")  # user, graph scope, pid
    transport.close()
    assert not path.exists()


def test_a_reader_follows_a_writer_that_made_a_new_ring_under_the_same_name(monkeypatch):
    """A new ring under a segment name the reader knows (names carry a random part: forced equal here); the
    reader used to stay on the old, unlinked mapping and refuse every frame as a foreign slot."""
    monkeypatch.setattr(shm_segment, "name_token", lambda: "0badc0de")
    reader = SharedMemoryTransport(slots=2)
    first = SharedMemoryTransport(slots=2, name="recycled")
    state = make_state(0)
    assert_same(state, reader.receive(first.send(state)))
    first.close()
    second = SharedMemoryTransport(slots=2, name="recycled")
    try:
        state = make_state(1)
        segment, packed = second.send(state)
        assert segment == reader.readers.last.segment       # the same name, another ring
        assert_same(state, reader.receive((segment, packed)))
    finally:
        second.close()
        reader.close()


def test_shm_ring_back_pressure_when_the_reader_stalls():
    ring = SharedMemoryRing.create("bp", slots=2, slot_capacity=codec.encoded_size(make_state()))
    try:
        ring.write(make_state(0)), ring.write(make_state(1))
        assert ring.free_slots() == 0
        with pytest.raises(TimeoutError, match="no free slot within 0.1 s"):
            ring.write(make_state(2), timeout_s=0.1)
    finally:
        ring.close()


def test_shm_ring_rejects_foreign_and_mismatched_descriptors():
    ring = SharedMemoryRing.create("foreign", slots=2, slot_capacity=codec.encoded_size(make_state()))
    try:
        desc = ring.write(make_state(seq=4))
        foreign = SlotDescriptor(desc.segment, desc.ring_id + 1, desc.slot, desc.epoch, desc.seq, desc.length)
        with pytest.raises(InputError, match="foreign slot"):
            ring.read(foreign)
        stale = SlotDescriptor(desc.segment, desc.ring_id, desc.slot, desc.epoch, 3, desc.length)
        with pytest.raises(InputError, match="holds frame 4 partition 3 .* descriptor says frame 3"):
            ring.read(stale)
        assert ring.read(desc).seq == 4  # the rejected descriptors did not consume the real frame
        with pytest.raises(InputError, match="slot descriptor: magic"):
            SlotDescriptor.unpack(desc.segment, b"\0" * 40)
    finally:
        ring.close()


def test_shm_ring_rejects_a_corrupted_slot_and_frees_it():
    ring = SharedMemoryRing.create("corrupt", slots=1, slot_capacity=codec.encoded_size(make_state()))
    try:
        desc = ring.write(make_state(seq=1))
        payload = 64 + 64  # ring header + slot header
        ring._mm[payload:payload + 4] = b"JUNK"
        with pytest.raises(InputError, match="magic b'JUNK'"):
            ring.read(desc)
        assert ring.free_slots() == 1
        assert ring.read(ring.write(make_state(seq=2))).seq == 2
    finally:
        ring.close()


def test_a_slot_whose_reader_is_gone_is_taken_back_counted_and_a_late_read_is_refused():
    ring = SharedMemoryRing.create("reclaim", slots=2, slot_capacity=codec.encoded_size(make_state()))
    try:
        ring.beat()   # a reader attached (then stopped beating: gone)
        lost = ring.write(make_state(0))
        ring.write(make_state(1))
        with pytest.raises(TimeoutError):  # a live reader that is merely slow keeps its slots ...
            ring.write(make_state(2), timeout_s=0.05, reclaim_after_s=10.0)
        time.sleep(0.06)
        ring.write(make_state(2), timeout_s=1.0, reclaim_after_s=0.05)  # ... a gone one loses them
        assert ring.reclaimed == 1
        with pytest.raises(InputError, match="holds frame 2 .* descriptor says frame 0"):
            ring.read(lost)  # the restarted reader's stale descriptor (had it kept one) finds another frame
        assert ring.read(SlotDescriptor(lost.segment, lost.ring_id, 0, 3, 2, lost.length)).seq == 2
    finally:
        ring.close()


def test_a_read_overlapping_a_take_back_is_refused_and_leaves_the_slot_to_the_writer(monkeypatch):
    ring = SharedMemoryRing.create("overlap", slots=1, slot_capacity=codec.encoded_size(make_state()))
    try:
        ring.beat()   # a reader attached
        desc = ring.write(make_state(5))
        real_decode = codec.decode

        def writer_takes_it_back_meanwhile(*args, **kwargs):
            state = real_decode(*args, **kwargs)
            ring.write(make_state(6), reclaim_after_s=0.0)  # the writer gave up on the reader mid-copy
            return state
        monkeypatch.setattr(codec, "decode", writer_takes_it_back_meanwhile)
        with pytest.raises(InputError, match="taken back by the writer while being read"):
            ring.read(desc)
        monkeypatch.setattr(codec, "decode", real_decode)
        assert ring.free_slots() == 0  # frame 6 is still there for its own descriptor
        assert ring.read(SlotDescriptor(desc.segment, desc.ring_id, 0, 3, 6, desc.length)).seq == 6
    finally:
        ring.close()


def test_a_ring_no_reader_has_attached_yet_keeps_its_slots_through_a_late_first_descriptor():
    """A restarted prefix's first descriptors reached the suffix 3.5 s late (DDS repairs a reliable writer's
    first samples at its next heartbeat); slots taken back after RECLAIM_AFTER_S lost those frames under
    lossless. Before any reader beats, the writer waits FIRST_CONTACT_S; after, RECLAIM_AFTER_S."""
    ring = SharedMemoryRing.create("contact", slots=1, slot_capacity=codec.encoded_size(make_state()))
    try:
        first = ring.write(make_state(0))
        time.sleep(0.1)
        with pytest.raises(TimeoutError):   # no reader yet, silent for 0.1 s > reclaim_after_s: still its slot
            ring.write(make_state(1), timeout_s=0.2, reclaim_after_s=0.05)
        assert ring.reclaimed == 0 and ring.read(first).seq == 0   # the late reader finds its frame
        ring.write(make_state(1))
        time.sleep(0.1)
        ring.write(make_state(2), timeout_s=1.0, reclaim_after_s=0.05)   # attached, then silent: gone
        assert ring.reclaimed == 1
        assert FIRST_CONTACT_S > RECLAIM_AFTER_S
    finally:
        ring.close()


def test_liveness_is_the_owners_lock_not_its_pid(tmp_path):
    """Containers share /dev/shm across PID namespaces: a PID that is alive here may be another process,
    and a live owner's PID may not exist here. Only the lock the owner holds counts."""
    ring = SharedMemoryRing.create("held", slots=1, slot_capacity=codec.encoded_size(make_state()), directory=tmp_path)
    # A segment left by a dead owner in another PID namespace whose PID (1) is alive in ours:
    orphan = tmp_path / f"hvla_u{os.getuid()}_local_1_orphan"
    orphan.write_bytes(b"\0" * 128)
    try:
        assert reclaim_stale_segments(tmp_path) == [orphan.name]
        assert ring.path.exists()  # held by this live owner
    finally:
        ring.close()
    assert not ring.path.exists()


def test_rings_are_named_per_user_and_graph_and_a_reader_opens_only_its_own():
    writer = SharedMemoryTransport(slots=1, scope="d7")
    reader_same, reader_other = SharedMemoryTransport(scope="d7"), SharedMemoryTransport(scope="d8")
    try:
        handle = writer.send(make_state(3))
        assert handle[0].startswith(f"hvla_u{os.getuid()}_d7_")
        with pytest.raises(InputError, match="not one of this user's rings in graph scope 'd8'"):
            reader_other.receive(handle)
        assert reader_same.receive(handle).seq == 3
        other_user = handle[0].replace(f"_u{os.getuid()}_", f"_u{os.getuid() + 1}_")
        with pytest.raises(InputError, match="not one of this user's rings"):
            SharedMemoryRing.attach(other_user, scope="d7")
    finally:
        for t in (writer, reader_same, reader_other):
            t.close()


def test_attach_to_missing_or_foreign_segment_is_refused(tmp_path):
    with pytest.raises(InputError, match="does not exist"):
        SharedMemoryRing.attach("hvla_1_nothing_here")
    with pytest.raises(InputError, match="not a hybrid_vla_ros ring name"):
        SharedMemoryRing.attach("../etc/passwd")


CHILD = textwrap.dedent("""
    import sys, time, torch
    from hybrid_vla_ros.engine.handover.transport import SharedMemoryTransport
    from hybrid_vla_ros.types import BoundaryState
    t = SharedMemoryTransport(slots=2)
    state = BoundaryState(hidden=torch.full((1, 4, 8), 7.0), position_ids=torch.arange(4).view(1, 4),
                          attention_mask=torch.ones(1, 4, dtype=torch.long), partition=2, seq=42)
    segment, packed = t.send(state)
    print(segment, packed.hex(), flush=True)
    if sys.argv[1] == "hang":
        time.sleep(60)
    sys.stdin.readline()  # wait until the parent has read the slot
""")


def spawn_writer(mode):
    return subprocess.Popen([sys.executable, "-c", CHILD, mode], stdout=subprocess.PIPE, stdin=subprocess.PIPE,
                            text=True)


def read_from_child(child):
    segment, packed = child.stdout.readline().split()
    reader = SharedMemoryRing.attach(segment)
    try:
        state = reader.read(SlotDescriptor.unpack(segment, bytes.fromhex(packed)))
    finally:
        reader.close()
    return segment, state


def test_cross_process_handover_and_removal_on_normal_exit():
    child = spawn_writer("exit")
    segment, state = read_from_child(child)
    assert state.seq == 42 and state.partition == 2 and torch.all(state.hidden == 7.0)
    child.communicate("done\n", timeout=30)
    assert child.returncode == 0
    assert not (SHM_DIR / segment).exists()


def test_segments_of_a_killed_writer_are_reclaimed():
    child = spawn_writer("hang")
    segment, state = read_from_child(child)
    assert state.seq == 42
    child.send_signal(signal.SIGKILL)
    child.wait(timeout=30)
    assert (SHM_DIR / segment).exists()  # a SIGKILL leaves it behind ...
    assert segment in reclaim_stale_segments()  # ... and the next ring (or this call) reclaims it
    assert not (SHM_DIR / segment).exists()


def test_in_process_registry_is_bounded_and_counts_evictions():
    transport = InProcessTransport(max_pending=2)
    handles = [transport.send(make_state(seq=i)) for i in range(4)]
    assert transport.pending() == 2 and transport.evicted == 2
    with pytest.raises(InputError, match="unknown or already taken"):
        transport.receive(handles[0])
    assert transport.receive(handles[3]).seq == 3


SLOW_READER = textwrap.dedent("""
    import sys, time
    from hybrid_vla_ros.engine.handover.transport import SharedMemoryTransport
    reader = SharedMemoryTransport()
    for line in sys.stdin:
        segment, packed = line.split()
        state = reader.receive((segment, bytes.fromhex(packed)))   # the state copied out ...
        print("got", state.seq, flush=True)
        time.sleep(float(sys.argv[1]))             # ... then a real-size CPU suffix: seconds per frame
        print("done", state.seq, flush=True)
""")


def test_a_live_reader_slower_than_two_seconds_per_frame_loses_nothing():
    """Measured on main: a READY slot was reclaimed after 1 s whatever its reader did, so a 7B-class suffix
    lost frames even under lossless, each counted twice (ring_slot_reclaimed + invalid_boundary). Now the
    reader's heartbeat keeps its slots; the writer waits (back-pressure)."""
    child = subprocess.Popen([sys.executable, "-c", SLOW_READER, "2.1"], stdin=subprocess.PIPE,
                             stdout=subprocess.PIPE, text=True)
    writer = SharedMemoryTransport(slots=1)

    def send(seq):
        segment, packed = writer.send(make_state(seq))
        child.stdin.write(f"{segment} {packed.hex()}\n")
        child.stdin.flush()
    try:
        send(0)
        assert child.stdout.readline().split() == ["got", "0"]   # the reader is up (its imports took a while)
        t0 = time.monotonic()
        send(1)                                    # in the freed slot at once
        send(2)                                    # waits ~2 s: frame 1 is READY while frame 0 computes
        assert time.monotonic() - t0 > 1.5
        child.stdin.close()
        lines = [line.split() for line in child.stdout]
        assert child.wait(30) == 0
        assert [int(seq) for word, seq in lines if word == "done"] == [0, 1, 2] and writer.reclaimed == 0
    finally:
        child.kill()
        writer.close()


def test_a_slot_the_reader_has_read_past_is_taken_back_at_once():
    """States are served in order: once the reader took frame 5, a READY frame 4 (its descriptor displaced in
    the reader's latest-wins mailbox) will never be read; the writer reuses its slot without waiting."""
    writer = SharedMemoryTransport(slots=2)
    reader = SharedMemoryTransport()
    try:
        writer.send(make_state(4))                 # never read
        reader.receive(writer.send(make_state(5)))
        t0 = time.monotonic()
        writer.send(make_state(6))                 # needs frame 4's slot
        assert time.monotonic() - t0 < 0.5 and writer.reclaimed == 1
    finally:
        reader.close()
        writer.close()
