"""ActionFlow's boundary as bytes (engine/actionflow/codec.py): a prefix host and a suffix that share nothing
but bytes decode exactly the sequential tokens; damaged payloads are refused with a reason."""

import os

import pytest
import torch
from hypothesis import HealthCheck, given, settings, strategies as st

from hybrid_vla_ros.engine.actionflow.packing import ActionFlow
from hybrid_vla_ros.engine.actionflow.forward import PackedState, Segment
from hybrid_vla_ros.engine.actionflow.codec import decode_state, decode_tokens, encode_state, encode_tokens
from hybrid_vla_ros.errors import InputError
from hybrid_vla_ros.model.inputs import synthetic_frame
from hybrid_vla_ros.model.load import load_vla

from greedy_reference import reference_tokens   # packed vs sequential: equal tokens, not bit-equal logits (why: its docstring)

FAMILIES = ("tiny-act", "tiny-llava-act", "tiny-qwen3vl-act")


@pytest.fixture(scope="module")
def models():
    return {name: load_vla(preset=name) for name in FAMILIES}


def run_over_bytes(model, frames, pack: int, partition: int, payloads: list | None = None):
    """The prefix host (one ActionFlow) and the suffix (another: its own ring) exchange only bytes."""
    host, suffix = ActionFlow(model, pack, partition=partition), ActionFlow(model, pack, partition=partition)
    for frame in frames:
        host.submit(frame)
    results = []
    while host.busy:
        state = host.prefix_step()
        payload = encode_state(state, partition, host.steps)
        if payloads is not None:
            payloads.append(payload)
        tokens, step = decode_tokens(suffix.suffix_step_payload(payload))
        assert step == host.steps
        results += host.finish(state, tokens)
    return results


@pytest.mark.parametrize("name", FAMILIES)
def test_a_suffix_that_only_sees_bytes_decodes_the_sequential_tokens(models, name):
    model = models[name]
    frames = [synthetic_frame(model.spec, i) for i in range(6)]
    reference = {f.seq: reference_tokens(model, f) for f in frames}
    for pack, partition in ((1, 2), (4, 1), (4, 3)):
        results = run_over_bytes(model, frames, pack, partition)
        assert {r.seq: r.tokens for r in results} == reference, (pack, partition)


def test_state_and_tokens_round_trip_exactly():
    state = PackedState(torch.randn(5, 8), torch.arange(5).reshape(1, 5),
                        [Segment(7, 0, 0, 0, 3, 10**18, 5), Segment(4, 1, 9, 3, 1, 2), Segment(2, 2, 11, 4, 1)])
    back, header = decode_state(encode_state(state, 3, 42, slots=6, deadline_ns=1_700_000_000_123_456_789))
    assert tuple(header) == (3, 42, 6, 1_700_000_000_123_456_789) and back.segments == state.segments
    assert torch.equal(back.hidden, state.hidden) and torch.equal(back.positions, state.positions)
    assert decode_tokens(encode_tokens({7: 300, 4: 301}, 9)) == ({7: 300, 4: 301}, 9)


def test_layouts_that_do_not_fit_are_refused_with_a_reason(models):
    model = models["tiny-act"]
    hidden, positions = torch.randn(4, model.spec.hidden_size), torch.zeros(3, 1, 4, dtype=torch.long)
    bad = {
        "does not continue the rows": [Segment(1, 0, 0, 1, 3)],
        "cover 3 rows": [Segment(1, 0, 0, 0, 3)],
        "a frame appears twice": [Segment(1, 0, 0, 0, 2), Segment(1, 1, 0, 2, 2)],
    }
    for reason, segments in bad.items():
        with pytest.raises(InputError, match=reason):
            decode_state(encode_state(PackedState(hidden, positions, segments), 2, 0))
    suffix = ActionFlow(model, 2, partition=2)
    far = encode_state(PackedState(hidden, positions, [Segment(1, 5, 0, 0, 4)]), 2, 0)      # slot 5 of 2
    with pytest.raises(InputError, match="does not fit a KV ring of 2 slots"):
        suffix.suffix_step_payload(far)
    with pytest.raises(InputError, match="cut at p=3"):
        suffix.suffix_step_payload(encode_state(PackedState(hidden, positions, [Segment(1, 0, 0, 0, 4)]), 3, 0))
    with pytest.raises(InputError, match="hidden rows of 4 torch.float16"):
        suffix.suffix_step_payload(encode_state(PackedState(torch.randn(4, 4).half(), positions,
                                                            [Segment(1, 0, 0, 0, 4)]), 2, 0))
    with pytest.raises(InputError, match="positions"):
        decode_state(encode_state(PackedState(hidden, torch.zeros(2, 4, dtype=torch.long),
                                              [Segment(1, 0, 0, 0, 4)]), 2, 0))


@pytest.fixture(scope="module")
def valid_payloads(models):
    payloads: list = []
    model = models["tiny-act"]
    run_over_bytes(model, [synthetic_frame(model.spec, i) for i in range(3)], 2, 2, payloads)
    return payloads


@settings(max_examples=int(os.environ.get("HVLA_FUZZ_EXAMPLES", "300")), deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(data=st.data())
def test_damaged_packed_payloads_are_an_input_error_or_a_consistent_step(models, valid_payloads, data):
    payload = bytearray(data.draw(st.sampled_from(valid_payloads)))
    for _ in range(data.draw(st.integers(1, 6))):
        at = data.draw(st.integers(0, len(payload) - 1))
        payload[at] = data.draw(st.integers(0, 255))
    if data.draw(st.booleans()):
        payload = payload[:data.draw(st.integers(0, len(payload)))]
    suffix = ActionFlow(models["tiny-act"], 2, partition=2)
    try:
        tokens, _ = decode_tokens(suffix.suffix_step_payload(bytes(payload)))
    except InputError:
        return
    base = suffix.model.action_tokenizer.base
    assert all(base <= t < base + suffix.model.action_tokenizer.bins for t in tokens.values())
