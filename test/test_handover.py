"""The handover in one module: transport choice, the envelope, encoder and decoder, and every malformed
envelope refused with a reason (never a crash of the suffix's worker)."""

import os
import struct

import pytest
import torch

from hybrid_vla_ros.engine.handover.endpoints import (ENVELOPE, HandoverDecoder, HandoverEncoder, choose_transport,
                                            pack_envelope)
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


def test_foreign_process_handles_and_bad_headers_are_refused(decoder):
    data = bytearray(HandoverEncoder("inproc", 2, "x").encode(boundary()))
    data[8:12] = (1).to_bytes(4, "little")  # pretend another process sent it
    with pytest.raises(InputError, match="in-process handle from process 1"):
        decoder.decode(bytes(data))
    with pytest.raises(InputError, match="magic b'NOPE'"):
        decoder.decode(b"NOPE" + bytes(40))
    good = bytearray(HandoverEncoder("inline", 2, "x").encode(boundary()))
    good[4] = 7
    with pytest.raises(InputError, match="envelope version 7"):
        decoder.decode(bytes(good))


GONE = f"hvla_u{os.getuid()}_local_1_gone".encode()  # this user's, this scope, no such segment


@pytest.mark.parametrize("body, reason", [
    (b"", "has no segment name"),                                   # was struct.error in the worker
    (struct.pack("<H", 40) + b"hvla_x", "segment name of 40 bytes"),
    (struct.pack("<H", 6) + b"hvla_x" + bytes(3), "slot descriptor: 3 bytes"),
    (struct.pack("<H", 10) + b"hvla_gone_" + bytes(40), "slot descriptor: magic"),
    (struct.pack("<H", 9) + b"not_ours_" + DESCRIPTOR.pack(DESCRIPTOR_MAGIC, 1, 0, 0, 0, 0), "not a hybrid_vla_ros ring"),
    (struct.pack("<H", 10) + b"hvla_gone_" + DESCRIPTOR.pack(DESCRIPTOR_MAGIC, 1, 0, 0, 0, 0), "not one of this user's rings"),
    (struct.pack("<H", len(GONE)) + GONE + DESCRIPTOR.pack(DESCRIPTOR_MAGIC, 1, 0, 0, 0, 0), "does not exist"),
])
def test_malformed_shared_memory_bodies_are_refused_with_the_reason(decoder, body, reason):
    with pytest.raises(InputError, match=reason):
        decoder.decode(pack_envelope("shm", 1, body))


def test_inproc_body_of_the_wrong_size_is_refused(decoder):
    with pytest.raises(InputError, match="in-process body of 3 bytes"):
        decoder.decode(pack_envelope("inproc", 1, b"abc"))


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
    assert ENVELOPE.size == 44
