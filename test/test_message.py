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
