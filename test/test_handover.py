"""The handover in one module: transport choice, the boundary message (HVLM) of each carrier, encoder and decoder,
and every malformed message refused with a reason (never a crash of the suffix's worker)."""

import os

import pytest
import torch

from hybrid_vla_ros.engine.handover import message as hvlm
from hybrid_vla_ros.engine.handover.endpoints import HandoverDecoder, HandoverEncoder, choose_transport, pack_envelope
from hybrid_vla_ros.engine.handover.shm_ring import DESCRIPTOR, DESCRIPTOR_MAGIC, SHM_DIR
from hybrid_vla_ros.errors import InputError
from hybrid_vla_ros.types import BoundaryState


def boundary(seq=9, stamp_ns=77):
    return BoundaryState(hidden=torch.randn(1, 6, 4), position_ids=torch.arange(6).view(1, 6),
                         attention_mask=torch.ones(1, 6, dtype=torch.long), partition=2, seq=seq, stamp_ns=stamp_ns)


@pytest.fixture
def decoder():
    d = HandoverDecoder()
    yield d
    d.close()


def test_transport_choice_follows_where_the_peer_runs():
    assert choose_transport(same_process=True, same_host=True) == "inproc"
    assert choose_transport(same_process=False, same_host=True) == "shm"
    assert choose_transport(same_process=False, same_host=False) == "inline"


@pytest.mark.parametrize("kind", ["inproc", "shm", "inline"])
def test_envelope_round_trip_through_each_transport(kind, decoder):
    encoder = HandoverEncoder(kind, ring_slots=2, ring_name="test_round_trip")
    try:
        state = boundary()
        out, transport = decoder.decode(encoder.encode(state))
        assert transport == kind and torch.equal(out.hidden, state.hidden) and out.seq == 9
        assert (out is state) == (kind == "inproc")
    finally:
        encoder.close()


def test_auto_is_in_process_while_a_decoder_lives_here_and_shared_memory_otherwise():
    import gc
    gc.collect()  # decoders other tests dropped without close() stop counting once collected (weak registry)
    encoder = HandoverEncoder("auto", ring_slots=2, ring_name="test_auto")
    decoder = HandoverDecoder()
    assert encoder.kind() == "inproc"
    decoder.close()
    assert encoder.kind() == "shm"
    encoder.close()


def test_a_decoder_dropped_without_close_stops_counting_once_collected():
    import gc
    encoder = HandoverEncoder("auto", ring_slots=2, ring_name="test_dropped")
    HandoverDecoder()  # never closed, no reference kept
    gc.collect()
    assert encoder.kind() == "shm"
    encoder.close()


def test_unknown_transport_name_is_refused():
    with pytest.raises(InputError, match="boundary transport 'serialized' is not one of"):
        HandoverEncoder("serialized", 2, "x")


def rewritten(data, **fields) -> bytes:
    """The message with header fields changed (pid=..., model_id=...)."""
    message = hvlm.decode(bytes(data))
    for name, value in fields.items():
        setattr(message, name, value)
    return hvlm.encode(message)


def test_foreign_process_handles_and_bad_headers_are_refused(decoder):
    data = rewritten(HandoverEncoder("inproc", 2, "x").encode(boundary()), pid=1)  # as if another process sent it
    with pytest.raises(InputError, match="in-process handle from process 1"):
        decoder.decode(data)
    with pytest.raises(InputError, match="magic b'NOPE'"):
        decoder.decode(b"NOPE" + bytes(40))
    good = bytearray(HandoverEncoder("inline", 2, "x").encode(boundary()))
    good[4] = 7
    with pytest.raises(InputError, match="HVLM version 7; this node reads version 1"):
        decoder.decode(bytes(good))
    with pytest.raises(hvlm.OldMessageError, match="waypoint boundary envelope"):   # the format HVLM replaced
        decoder.decode(b"HVLE" + bytes(good[4:]))


GONE = f"hvla_u{os.getuid()}_local_1_gone"  # this user's, this scope, no such segment
RING = DESCRIPTOR.pack(DESCRIPTOR_MAGIC, 1, 0, 0, 0, 0)


@pytest.mark.parametrize("parts, reason", [
    ({}, r"parts \[\], expected \['shm_segment', 'shm_slot'\]"),   # was struct.error in the worker
    ({"shm_segment": "hvla_x", "shm_slot": bytes(3)}, "slot descriptor: 3 bytes"),
    ({"shm_segment": "hvla_gone_", "shm_slot": bytes(40)}, "slot descriptor: magic"),
    ({"shm_segment": "not_ours_", "shm_slot": RING}, "not a hybrid_vla_ros ring"),
    ({"shm_segment": "hvla_gone_", "shm_slot": RING}, "not one of this user's rings"),
    ({"shm_segment": GONE, "shm_slot": RING}, "does not exist"),
    ({"shm_segment": GONE + "\0", "shm_slot": RING}, "is not a file name in /dev/shm"),   # was ValueError
])
def test_malformed_shared_memory_parts_are_refused_with_the_reason(decoder, parts, reason):
    data = pack_envelope("shm", 1, parts)
    decoder.watch(data)                       # the subscription callback's look: never raises
    with pytest.raises(InputError, match=reason):
        decoder.decode(data)


def test_an_in_process_message_without_its_handle_or_with_an_unknown_one_is_refused(decoder):
    with pytest.raises(InputError, match=r"parts \['shm_slot'\], expected \['handle'\]"):
        decoder.decode(pack_envelope("inproc", 1, {"shm_slot": b"abc"}))
    with pytest.raises(InputError, match="in-process handle 987654: unknown or already taken"):
        decoder.decode(pack_envelope("inproc", 1, {"handle": 987654}))
    with pytest.raises(InputError, match="truncated"):
        decoder.decode(pack_envelope("inproc", 1, {"handle": 987654})[:-3])


@pytest.mark.skipif(not SHM_DIR.is_dir(), reason="no /dev/shm on this machine")
def test_a_truncated_segment_is_refused_not_read_past_its_end(decoder):
    encoder = HandoverEncoder("shm", ring_slots=2, ring_name="test_truncated")
    try:
        envelope = encoder.encode(boundary())
        os.truncate(encoder.shm.ring.path, 200)  # someone cut the segment short
        fresh = HandoverDecoder()
        with pytest.raises(InputError, match="truncated"):
            fresh.decode(envelope)
        fresh.close()
    finally:
        encoder.close()
