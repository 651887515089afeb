"""The packed suffix's KV ring is sized from the slots its steps use, bounded by pack x pack_groups, and shrinks
back (engine/actionflow/suffix_server.py). Found in review: one 1-row step whose header claimed 256 slots grew
the ring for good (bench-act at p = 8: 6.6 MB -> 211 MB; about 15 GB at 7B)."""

from collections import deque

import pytest

from hybrid_vla_ros.engine.actionflow.codec import decode_state, encode_state
from hybrid_vla_ros.engine.actionflow.forward import PackedState, Segment
from hybrid_vla_ros.engine.actionflow.prefix_server import PackedPrefixServer
from hybrid_vla_ros.engine.actionflow.suffix_server import PackedSuffixServer
from hybrid_vla_ros.errors import InputError
from hybrid_vla_ros.model.inputs import synthetic_frame
from hybrid_vla_ros.model.load import load_vla

from greedy_reference import reference_tokens   # packed vs one-frame decoding: different kernels, margins checked


@pytest.fixture(scope="module")
def model():
    return load_vla(preset="tiny-act")


def frames_of(model, count):
    return [synthetic_frame(model.spec, i, stamp_ns=(i + 1) * 100_000_000) for i in range(count)]


def ring_bytes(suffix) -> int:
    ring = suffix.side.ring
    return sum(t.numel() * t.element_size() for t in (*ring.keys.values(), *ring.values.values()))


def serve(prefix, suffix, frames, before_answer=None):
    """One thread plays both sides, each step answered at once; before_answer(payload) runs between a step
    sent and its answer. -> {seq: tokens} completed, every SuffixStep."""
    for frame in frames:
        prefix.submit(frame)
    done, steps = {}, []
    while not prefix.idle:
        index = prefix.next_group(wait_s=0.0)
        sent = prefix.step(index) if index is not None else None
        if sent is None:
            continue
        if before_answer is not None:
            before_answer(sent.payload)
        out = suffix.step(sent.payload)
        steps.append(out)
        done.update({r.seq: r.tokens for r in out.completed})
        prefix.tokens_in(out.tokens_payload)
    return done, steps


def one_row(payload, slots: int, slot: int | None = None, seq: int | None = None) -> bytes:
    """A 1-row step made from a real one: its first row as a decode row, the header claiming `slots` slots."""
    state, header = decode_state(payload)
    seg = state.segments[0]
    row = Segment(seq if seq is not None else seg.seq, seg.slot if slot is None else slot, 0, 0, 1, seg.stamp_ns,
                  seg.arrival_ns)
    one = PackedState(state.hidden[:1], state.positions[..., :1], [row])        # (1, H), (.., 1)
    return encode_state(one, header.partition, header.step + 10_000, slots)


def test_a_one_row_step_claiming_256_slots_allocates_no_ring_beyond_the_slots_it_uses(model):
    prefix = PackedPrefixServer(model, 2, 2, 2, policy="lossless", capacity=4, token_timeout_s=60.0)
    suffix, sent = PackedSuffixServer(model), []
    serve(prefix, suffix, frames_of(model, 2), before_answer=sent.append)
    honest = ring_bytes(suffix)
    suffix.step(one_row(sent[0], slots=256))                    # slot 0: inside the ring, however large the claim
    assert suffix.side.ring.slots <= 4 and ring_bytes(suffix) <= honest, (suffix.side.ring.slots, honest)


def test_a_step_claiming_more_slots_than_pack_x_groups_is_refused_and_the_next_step_is_served(model):
    frames = frames_of(model, 2)
    prefix = PackedPrefixServer(model, 2, 1, 2, policy="lossless", capacity=4, token_timeout_s=60.0)
    suffix, refused = PackedSuffixServer(model, max_slots=2), []

    def hostile(payload):
        before = None if suffix.side is None else ring_bytes(suffix)
        for forged in (one_row(payload, slots=256), one_row(payload, slots=8, slot=5, seq=999)):
            why = r"claims a KV ring of (256|8) slots.* at most 2 \(pack x pack_groups\)"
            with pytest.raises(InputError, match=why):
                suffix.step(forged)
            refused.append(forged)
        assert before is None or ring_bytes(suffix) == before       # nothing allocated, nothing changed

    done, _ = serve(prefix, suffix, frames, before_answer=hostile)
    assert len(refused) > 2 and done == {f.seq: reference_tokens(model, f) for f in frames}
    assert suffix.side.ring.slots <= 2


def test_a_ring_grown_by_a_step_using_a_high_slot_shrinks_back_to_the_slots_in_use(model, monkeypatch):
    """Within the bound (here the largest, 256) a step may use a high slot: the ring grows for it, then
    shrinks back once no step has used that slot for RECENT_STEPS steps (8 here, 64 in service); its frame,
    never seen at a prefill here, is counted lost by this suffix (incomplete), once."""
    from hybrid_vla_ros.engine.actionflow import suffix_server
    monkeypatch.setattr(suffix_server, "RECENT_STEPS", 8)
    frames = frames_of(model, 4)   # about 4 steps a frame at pack 2
    prefix = PackedPrefixServer(model, 2, 1, 2, policy="lossless", capacity=len(frames), token_timeout_s=60.0)
    suffix, forged = PackedSuffixServer(model), deque()

    def once(payload):
        if not forged:
            forged.append(suffix.step(one_row(payload, slots=256, slot=255, seq=999)))
            assert suffix.side.ring.slots > 2                    # grown for the high slot (bound: 256)

    done, steps = serve(prefix, suffix, frames, before_answer=once)
    assert len(steps) > 8 and done == {f.seq: reference_tokens(model, f) for f in frames}
    assert suffix.side.ring.slots <= 2
    assert [i for out in steps for i in out.incomplete] == [(999, frames[0].stamp_ns)]
