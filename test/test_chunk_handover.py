"""Every handover carries chunks (chunked prefill, issue 29 item 3): in-process, shared-memory and inline
handovers take a real chunked frame whose suffix output is bit-equal to the chunks handed over directly;
the message's chunk fields must agree with the state's and are checked; the bare states before HVLM are refused by
name; a ring of max_in_flight x chunks slots takes every chunk of its frames, sized so that a slightly larger chunk
needs no new ring."""

import numpy as np
import pytest
import torch

from hybrid_vla_ros.engine.handover import codec
from hybrid_vla_ros.engine.handover import message as hvlm
from hybrid_vla_ros.engine.handover.endpoints import HandoverDecoder, HandoverEncoder, envelope_stamp, pack_envelope
from hybrid_vla_ros.engine.handover.transport import MAX_RING_SLOTS, SharedMemoryTransport
from hybrid_vla_ros.engine.stages import PrefixStage, SuffixStage
from hybrid_vla_ros.errors import InputError
from hybrid_vla_ros.model.inputs import synthetic_frame
from hybrid_vla_ros.types import BoundaryState, DeepStack

CHUNKS = 4
KINDS = ("inproc", "shm", "inline")
# (preset, partition): tiny; Qwen3-VL below its DeepStack depth (chunks without image tokens: empty additions)
CASES = [("tiny", 2), ("tiny-qwen3vl", 0), ("tiny-qwen3vl", 1)]


def with_chunk(data, **fields) -> bytes:
    """The message with its entry's chunk fields changed (index follows chunk_index)."""
    message = hvlm.decode(bytes(data))
    entry = message.entries[0]
    for name, value in fields.items():
        setattr(entry, name, value)
    entry.index = entry.chunk_index
    return hvlm.encode(message)


def chunk_states(model, partition, seq=0, chunks=CHUNKS):
    return list(PrefixStage(model, partition).run_chunks(synthetic_frame(model.spec, seq), chunks))


def trajectory_of(model, partition, states):
    """The suffix on a frame's chunks, in order -> its trajectory (only the last chunk gives one)."""
    suffix = SuffixStage(model, partition)
    outs = [suffix.run(state) for state in states]
    assert all(out is None for out in outs[:-1]) and outs[-1] is not None
    return outs[-1]


def assert_same_chunk(a: BoundaryState, b: BoundaryState):
    for name in ("hidden", "position_ids", "attention_mask"):
        x, y = getattr(a, name), getattr(b, name)
        assert x.dtype == y.dtype and torch.equal(x, y), name
    assert (a.deepstack is None) == (b.deepstack is None)
    if a.deepstack is not None:
        assert torch.equal(a.deepstack.positions, b.deepstack.positions)
        assert torch.equal(a.deepstack.features, b.deepstack.features)
        assert a.deepstack.first_block == b.deepstack.first_block
    fields = ("partition", "seq", "stamp_ns", "query_index", "chunk_index", "chunk_count", "chunk_start")
    assert [getattr(a, f) for f in fields] == [getattr(b, f) for f in fields]


@pytest.fixture
def decoder():
    d = HandoverDecoder()
    yield d
    d.close()


@pytest.mark.parametrize("kind", KINDS)
@pytest.mark.parametrize("preset, partition", CASES)
def test_each_transport_carries_a_chunked_frame_bit_exact(tiny_models, decoder, kind, preset, partition):
    model = tiny_models[preset]
    reference = trajectory_of(model, partition, chunk_states(model, partition))
    sent = chunk_states(model, partition)
    encoder = HandoverEncoder(kind, ring_slots=CHUNKS, ring_name=f"chunks_{kind}")
    try:
        received = []
        for state in sent:
            data = encoder.encode(state)
            assert envelope_stamp(data) == state.stamp_ns
            entry = hvlm.peek(data).entries[0]
            assert (entry.chunk_index, entry.chunk_count) == (state.chunk_index, CHUNKS)
            out, transport = decoder.decode(data)
            assert transport == kind and (out is state) == (kind == "inproc")
            received.append(out)
    finally:
        encoder.close()
    for a, b in zip(sent, received):
        assert_same_chunk(a, b)
    if preset == "tiny-qwen3vl":   # a chunk without image tokens: DeepStack of 0 positions crossed too
        assert any(s.deepstack.positions.numel() == 0 for s in received)
    assert np.array_equal(trajectory_of(model, partition, received).points, reference.points)


@pytest.mark.parametrize("kind", ["inproc", "shm"])     # inline: the message is the state, nothing to disagree
@pytest.mark.parametrize("field, value, says", [
    ("chunk_index", 2, "message says chunk 2 of 4, the state it carries is chunk 1 of 4"),
    ("chunk_count", 5, "message says chunk 1 of 5, the state it carries is chunk 1 of 4"),
])
def test_a_message_that_disagrees_with_its_state_is_refused_naming_both(tiny_models, decoder, kind, field, value,
                                                                        says):
    state = chunk_states(tiny_models["tiny"], 2)[1]
    encoder = HandoverEncoder(kind, ring_slots=2, ring_name=f"mismatch_{kind}")
    try:
        data = with_chunk(encoder.encode(state), **{field: value})
        with pytest.raises(InputError, match=f"\\({kind}\\): the {says}"):
            decoder.decode(data)
    finally:
        encoder.close()


@pytest.mark.parametrize("index, count, start, says", [
    (0, 0, 0, "chunk count 0, expected 1..64"),
    (0, 65, 0, "chunk count 65"),
    (4, 4, 30, "chunk index 4, expected 0..3"),
    (1, 4, -1, "chunk start must be a token index >= 0"),
    (0, 4, 5, "chunk 0 starts at token 0"),
    (2, 4, 0, "chunk 0 starts at token 0 and every later chunk after it"),
])
def test_chunk_fields_out_of_range_are_refused_with_the_field(tiny_models, decoder, index, count, start, says):
    data = with_chunk(codec.encode(chunk_states(tiny_models["tiny"], 2)[1]), chunk_index=index, chunk_count=count,
                      start=start)
    with pytest.raises(InputError, match=says):
        codec.decode(data)
    with pytest.raises(InputError, match=says):
        decoder.decode(data)
    if start >= 0 and (index == 0) == (start == 0):
        with pytest.raises(InputError, match=says):
            pack_envelope("inline", 1, {}, chunk=(index, count))


def test_a_message_cut_inside_its_entry_is_refused(tiny_models):
    data = codec.encode(chunk_states(tiny_models["tiny"], 2)[0])
    with pytest.raises(InputError, match="truncated in its entry table"):
        codec.decode(data[:hvlm.HEADER.size + 10])


@pytest.mark.parametrize("field, value, says", [("chunk_count", 0, "chunk count 0"),
                                                ("chunk_count", 70000, "chunk count 70000"),
                                                ("chunk_start", -3, "chunk start"),
                                                ("chunk_index", 9, "chunk index 9")])
def test_a_state_with_bad_chunk_fields_is_not_encoded(tiny_models, field, value, says):
    state = chunk_states(tiny_models["tiny"], 2)[1]
    setattr(state, field, value)
    with pytest.raises(InputError, match=says):
        codec.encode(state)
    encoder = HandoverEncoder("inproc", 2, "bad_chunk")
    with pytest.raises(InputError, match=says):
        encoder.encode(state)
    assert encoder.pending() == 0          # refused before a handle was registered
    encoder.close()


@pytest.mark.parametrize("magic, name", [(b"HVLB", "bare boundary state"), (b"HVLE", "waypoint boundary envelope")])
def test_the_states_before_hvlm_are_refused_by_name(tiny_models, decoder, magic, name):
    """A prefix of a release before HVLM: its states are refused with the reason, not read as something else."""
    old = magic + codec.encode(chunk_states(tiny_models["tiny"], 2)[0])[4:]
    for read in (codec.decode, lambda data: decoder.decode(data)):
        with pytest.raises(hvlm.OldMessageError, match=name) as caught:
            read(old)
        assert caught.value.reason == "old_message"


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
@pytest.mark.parametrize("copy", [True, False])
def test_empty_deepstack_additions_round_trip(dtype, copy):
    state = BoundaryState(hidden=torch.randn(1, 5, 8).to(dtype), position_ids=torch.arange(15).view(3, 1, 5),
                          attention_mask=torch.ones(1, 5, dtype=torch.long), partition=1, query_index=19,
                          deepstack=DeepStack(torch.empty(0, dtype=torch.long), torch.empty(2, 0, 8, dtype=dtype), 1),
                          chunk_index=3, chunk_count=4, chunk_start=15)
    decoded = codec.decode(codec.encode(state), copy=copy)
    assert decoded.deepstack.positions.shape == (0,) and decoded.deepstack.positions.dtype == torch.int64
    assert decoded.deepstack.features.shape == (2, 0, 8) and decoded.deepstack.features.dtype == dtype
    assert_same_chunk(state, decoded)


# ---- the shared-memory ring: slots for every chunk in flight, sized for the chunks -----------------------

def test_a_ring_of_in_flight_x_chunks_slots_takes_every_chunk_of_two_frames(tiny_models, decoder):
    model, in_flight = tiny_models["tiny-qwen3vl"], 2
    frames = [chunk_states(model, 1, seq) for seq in range(in_flight)]
    references = [trajectory_of(model, 1, chunk_states(model, 1, seq)) for seq in range(in_flight)]
    encoder = HandoverEncoder("shm", ring_slots=in_flight * CHUNKS, ring_name="in_flight")
    encoder.shm.timeout_s = 0.5          # a full ring raises instead of waiting for the reader
    try:
        envelopes = [encoder.encode(state) for states in frames for state in states]   # nothing read yet
        assert encoder.shm.ring.free_slots() == 0
        with pytest.raises(TimeoutError, match="no free slot"):
            encoder.encode(frames[0][0])   # one more than max_in_flight x chunks: the ring is full
        received = [decoder.decode(data)[0] for data in envelopes]
    finally:
        encoder.close()
    for seq, reference in enumerate(references):
        states = received[seq * CHUNKS:(seq + 1) * CHUNKS]
        assert np.array_equal(trajectory_of(model, 1, states).points, reference.points)


def test_near_equal_chunks_share_one_ring_and_a_much_larger_one_grows_it(tiny_models):
    """tiny's 4-way split is 10, 11, 11, 10 tokens: sized to the first chunk exactly, the second needed a new
    ring; a frame cut per camera (6 then 36 tokens) grows it once, and the old ring's slot is still read."""
    model = tiny_models["tiny"]
    writer, reader = SharedMemoryTransport(slots=CHUNKS, name="sizing"), SharedMemoryTransport()
    try:
        for states in (chunk_states(model, 2, 0), chunk_states(model, 2, 1)):
            for state in states:
                assert_same_chunk(state, reader.receive(writer.send(state)))
        assert writer._retired == [] and writer.ring.slot_capacity >= max(codec.encoded_size(s) for s in states)
        first, last = chunk_states(model, 2, 2, chunks="camera")
        handles = [writer.send(first), writer.send(last)]
        assert len(writer._retired) == 1 and handles[0][0] != handles[1][0]
        assert [reader.receive(h).chunk_index for h in handles] == [0, 1]
    finally:
        reader.close()
        writer.close()


def test_a_whole_frame_ring_keeps_its_exact_size(tiny_models):
    model = tiny_models["tiny"]
    writer = SharedMemoryTransport(slots=2, name="exact")
    try:
        whole = PrefixStage(model, 2).run(synthetic_frame(model.spec, 0))
        writer.send(whole)
        assert writer.ring.slot_capacity == codec.encoded_size(whole)
    finally:
        writer.close()


def test_ring_slot_counts_up_to_64_frames_x_8_chunks_and_beyond_are_checked():
    ring = SharedMemoryTransport(slots=64 * 8, name="many")
    try:
        state = BoundaryState(hidden=torch.zeros(1, 2, 4), position_ids=torch.arange(2).view(1, 2),
                              attention_mask=torch.ones(1, 2, dtype=torch.long), partition=1)
        for seq in range(64 * 8):
            state.seq = seq
            ring.send(state)
        assert ring.ring.slots == 512 and ring.ring.free_slots() == 0
    finally:
        ring.close()
    assert MAX_RING_SLOTS == 64 * 64
    for slots in (0, MAX_RING_SLOTS + 1, True, 2.0):
        with pytest.raises(InputError, match=f"ring of {slots!r} slots: expected 1..4096"):
            SharedMemoryTransport(slots=slots)
