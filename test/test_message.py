"""HVLM, the one message format for what crosses the cut (engine/handover/message.py): every part and entry field
round-trips exactly; the formats it replaced are refused by name (reason old_message); a message cut short
anywhere, or with any byte changed, is either read as written or refused with an InputError, never anything else."""

import struct

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from hybrid_vla_ros.engine.handover import message as hvlm
from hybrid_vla_ros.errors import InputError
from hybrid_vla_ros.types import DeepStack


def packed_message() -> hvlm.Message:
    """Two frames in one message, as a packed step carries them: shared rows, per-frame values, message parts."""
    first = hvlm.Entry(7, 1_000, 2_000, index=0, crossing=1, chunk_index=1, chunk_count=3, slot=2, start=16, row=0,
                       count=5, parts={"stream": 1, "rope_delta": -3, "history_xyz": torch.randn(1, 16, 3)})
    second = hvlm.Entry(6, 900, 1_900, index=4, crossing=2, slot=1, row=5, count=1, parts={"token": 151_000,
                                                                                           "done": 1})
    parts = {"hidden": torch.randn(6, 32, dtype=torch.bfloat16), "positions": torch.arange(18).view(3, 1, 6),
             "times": (1.5, 0.0, 2.25), "temperature": 0.6, "reason": "nonfinite_boundary", "text": "frame 7: NaN ü"}
    return hvlm.Message(hvlm.KINDS["tokens"], hvlm.FORWARD, [first, second], parts, hvlm.ABORT, partition=5,
                        run=2**63 + 11, step=42, deadline_ns=123_456_789, model_id=0xDEADBEEF, domain=77, pid=4321)


def same(a, b) -> bool:
    if isinstance(a, torch.Tensor):
        return isinstance(b, torch.Tensor) and a.dtype == b.dtype and torch.equal(a, b)
    if isinstance(a, dict):
        return a.keys() == b.keys() and all(same(a[k], b[k]) for k in a)
    return a == b


def test_every_field_and_part_round_trips_exactly():
    sent = packed_message()
    got = hvlm.decode(hvlm.encode(sent))
    for name in ("kind", "direction", "flags", "partition", "run", "step", "deadline_ns", "model_id", "domain",
                 "pid"):
        assert getattr(got, name) == getattr(sent, name), name
    assert same(got.parts, sent.parts)
    for a, b in zip(sent.entries, got.entries, strict=True):
        assert same(vars(a), vars(b))
    head = hvlm.peek(hvlm.encode(sent))
    assert [e.seq for e in head.entries] == [7, 6] and head.parts == {} and head.run == sent.run


def test_a_crossing_dataclass_becomes_parts_and_comes_back():
    from hybrid_vla_ros.engine.expert_split.crossings import PromptState, crossing_from_parts, crossing_parts
    state = PromptState(torch.randn(1, 5, 8), torch.arange(15).view(3, 1, 5),
                        DeepStack(torch.arange(2), torch.randn(2, 2, 8), 1), 4, 0, torch.randn(1, 16, 3),
                        torch.randn(1, 16, 3, 3))
    parts = crossing_parts(state)
    assert {"ds_first", "ds_positions", "ds_features"} <= parts.keys() and "deepstack" not in parts
    back = crossing_from_parts(PromptState, parts, "test")
    assert back.deepstack.first_block == 1 and torch.equal(back.deepstack.features, state.deepstack.features)
    assert torch.equal(back.hidden, state.hidden) and back.rope_delta == 4
    without = crossing_from_parts(PromptState, {k: v for k, v in parts.items() if not k.startswith("ds_")}, "t")
    assert without.deepstack is None
    with pytest.raises(InputError, match="needs all of"):
        crossing_from_parts(PromptState, {k: v for k, v in parts.items() if k != "ds_first"}, "test")
    with pytest.raises(InputError, match="without its 'positions'"):
        crossing_from_parts(PromptState, {k: v for k, v in parts.items() if k != "positions"}, "test")


@pytest.mark.parametrize("magic, name", sorted(hvlm.OLD_FORMATS.items()))
def test_each_format_hvlm_replaced_is_refused_by_name(magic, name):
    data = magic + hvlm.encode(packed_message())[4:]
    with pytest.raises(hvlm.OldMessageError, match=name) as caught:
        hvlm.decode(data)
    assert caught.value.reason == "old_message" and "one release" in str(caught.value)
    assert hvlm.peek(data) is None


def test_another_version_kind_or_direction_is_refused_with_both_named():
    data = bytearray(hvlm.encode(packed_message()))
    struct.pack_into("<H", data, 4, 2)
    with pytest.raises(InputError, match="version 2; this node reads version 1"):
        hvlm.decode(bytes(data))
    with pytest.raises(InputError, match="a message of a tokens model; this node serves a alpamayo model"):
        hvlm.decode(hvlm.encode(packed_message()), kind=hvlm.KINDS["alpamayo"])
    with pytest.raises(InputError, match="direction 1, expected 2"):
        hvlm.decode(hvlm.encode(packed_message()), direction=hvlm.BACK)


def test_bad_parts_are_refused_when_written():
    message = packed_message()
    message.parts["no_such_part"] = 1
    with pytest.raises(InputError, match="no part named 'no_such_part'"):
        hvlm.encode(message)
    message = packed_message()
    message.parts["hidden"] = [1.0]
    with pytest.raises(InputError, match="a tensor"):
        hvlm.encode(message)
    with pytest.raises(InputError, match="0 entries"):
        hvlm.encode(hvlm.Message(1, hvlm.FORWARD, []))


def test_a_message_cut_short_anywhere_is_refused():
    data = hvlm.encode(packed_message())
    for end in range(len(data)):
        with pytest.raises(InputError):
            hvlm.decode(data[:end])


@settings(max_examples=300, deadline=None)
@given(st.data())
def test_any_changed_byte_is_read_as_written_or_refused(data):
    """Never another exception, never a crash: a damaged message is an InputError (or, where the change lands in a
    tensor's values or a free field, a message of the same structure)."""
    wire = bytearray(hvlm.encode(packed_message()))
    for _ in range(data.draw(st.integers(1, 4))):
        wire[data.draw(st.integers(0, len(wire) - 1))] = data.draw(st.integers(0, 255))
    try:
        got = hvlm.decode(bytes(wire))
    except InputError:
        return
    assert len(got.entries) == 2 and isinstance(got.parts, dict)


def test_the_codes_are_the_wire_format_and_never_move():
    """Part and crossing codes are what the bytes say: renumbering one silently changes the format."""
    assert {name: code for name, (code, _) in hvlm.PARTS.items()} == {
        "hidden": 1, "positions": 2, "mask": 3, "ds_first": 4, "ds_positions": 5, "ds_features": 6, "rope_delta": 7,
        "stream": 8, "history_xyz": 9, "history_rot": 10, "step": 11, "token": 12, "feed": 13, "done": 14, "x": 15,
        "t": 16, "times": 17, "seed": 18, "temperature": 19, "top_p": 20, "max_new_tokens": 21, "flow_steps": 22,
        "guidance_weight": 23, "guidance": 24, "reason": 25, "text": 26, "query_index": 27, "context": 28,
        "slots": 29, "handle": 30, "shm_segment": 31, "shm_slot": 32, "kv_segments": 33}
    assert hvlm.KINDS == {"waypoints": 1, "tokens": 2, "alpamayo": 3}
    assert (hvlm.FORWARD, hvlm.BACK, hvlm.ABORT, hvlm.REFUSED, hvlm.INPROC, hvlm.SHM) == (1, 2, 1, 2, 4, 8)
    from hybrid_vla_ros.engine.actionflow.codec import ROWS as PACKED_ROWS, TOKEN
    from hybrid_vla_ros.engine.expert_split.crossings import KINDS as ALPAMAYO
    from hybrid_vla_ros.engine.handover.codec import ROWS
    assert (ROWS, PACKED_ROWS, TOKEN) == (1, 1, 2)
    assert [c.__name__ for c in ALPAMAYO] == ["PromptState", "TokensState", "TokenChoice", "ActionState",
                                               "ExpertState"]   # crossing codes 1..5


@pytest.mark.parametrize("name, value, says", [("token", 1.5, "a number, got float"), ("token", "12", "got str"),
                                               ("token", 2**63, "does not fit 64 bits"),
                                               ("shm_slot", 7, "bytes, got int"), ("reason", None, "text, got NoneType"),
                                               ("times", ("a",), "numbers only")])
def test_a_value_of_the_wrong_kind_is_refused_when_written_never_converted(name, value, says):
    with pytest.raises(InputError, match=says):
        hvlm.encode(hvlm.Message(1, hvlm.FORWARD, [hvlm.Entry(1, 2, parts={name: value})]))


def test_version_0_is_damage_not_an_old_release():
    data = bytearray(hvlm.encode(packed_message()))
    struct.pack_into("<H", data, 4, 0)
    with pytest.raises(InputError, match="HVLM version 0") as caught:
        hvlm.decode(bytes(data))
    assert not isinstance(caught.value, hvlm.OldMessageError)


def test_each_kind_refuses_flags_and_parts_that_mean_nothing_to_it():
    from hybrid_vla_ros.engine.actionflow.codec import decode_state, decode_tokens, encode_tokens
    from hybrid_vla_ros.engine.expert_serve import envelope
    from hybrid_vla_ros.engine.expert_split.crossings import TokensState
    tokens = hvlm.decode(encode_tokens({3: 7}, 5))
    for flags in (hvlm.ABORT, hvlm.REFUSED, hvlm.SHM):
        tokens.flags = flags
        with pytest.raises(InputError, match="flags"):
            decode_tokens(hvlm.encode(tokens))
    packed = packed_message()
    packed.flags, packed.parts = hvlm.INPROC, {"slots": 1, "hidden": torch.zeros(6, 4),
                                              "positions": torch.zeros(1, 6, dtype=torch.long)}
    for e in packed.entries:
        e.parts, e.crossing = {}, 1
    with pytest.raises(InputError, match="flags"):
        decode_state(hvlm.encode(packed))
    answer = envelope.encode_back(envelope.Back(envelope.Tag(1, 2, 3), 1, envelope.REFUSED, reason="r", message="m"))
    back = hvlm.decode(answer)
    back.flags = hvlm.REFUSED | hvlm.ABORT
    with pytest.raises(InputError, match="flags"):
        envelope.decode_back(hvlm.encode(back))
    back.flags, back.parts = 0, {"reason": "r"}
    with pytest.raises(InputError, match="no place in an answer"):
        envelope.decode_back(hvlm.encode(back))
    forward = envelope.encode_forward(envelope.Forward(
        envelope.Tag(1, 2, 3), 1, envelope.CROSSING,
        TokensState(torch.zeros(1, 1, 4), torch.zeros(3, 1, 1, dtype=torch.long), 0)))
    later = hvlm.decode(forward)
    later.parts["seed"] = 9                          # a frame's settings travel on its first message only
    with pytest.raises(InputError, match=r"parts \['seed'\] have no place in message 1"):
        envelope.decode_forward(hvlm.encode(later))
