"""ActionFlow served by a prefix and a suffix that share only bytes (engine/actionflow/prefix_server.py), the engine of the
ROS nodes for action-token models: exact tokens with one or two alternating groups, faults on the way
(a step whose tokens never come back, wrong tokens, a frame that cannot be embedded), a partition change
at a drain, and the input policies."""

import os
import time
from collections import deque

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings, strategies as st

from hybrid_vla_ros.engine.actionflow.codec import decode_tokens, encode_state, encode_tokens
from hybrid_vla_ros.engine.handover import message as hvlm
from hybrid_vla_ros.engine.handover.message import OldMessageError
from hybrid_vla_ros.engine.actionflow.prefix_server import PackedPrefixServer
from hybrid_vla_ros.engine.actionflow.suffix_server import PackedSuffixServer
from hybrid_vla_ros.errors import ConfigError, InputError
from hybrid_vla_ros.model.inputs import synthetic_frame
from hybrid_vla_ros.model.load import load_vla

from greedy_reference import reference_tokens   # packed vs sequential: equal tokens, not bit-equal logits (why: its docstring)

FAMILIES = ("tiny-act", "tiny-llava-act", "tiny-qwen3vl-act")


@pytest.fixture(scope="module")
def models():
    return {name: load_vla(preset=name) for name in FAMILIES}


def frames_of(model, count, first=0):
    return [synthetic_frame(model.spec, i, stamp_ns=(i + 1) * 100_000_000) for i in range(first, first + count)]


def drive(prefix, suffix, frames, answer=None, on_step=None):
    """One thread plays both nodes: the suffix answers each step one step late when two groups alternate
    (the prefix has already sent the other group's step), at once otherwise. -> the suffix's completed
    results and every SuffixStep."""
    for frame in frames:
        prefix.submit(frame)
    pending, done, steps = deque(), [], []
    while not prefix.idle or pending:
        index = prefix.next_group(wait_s=0.0)
        if index is not None:
            sent = prefix.step(index)
            if sent is not None:
                pending.append(sent)
                if on_step:
                    on_step(sent)
        if pending and (index is None or len(pending) >= len(prefix.groups)):
            sent = pending.popleft()
            out = suffix.step(sent.payload)
            steps.append(out)
            done += out.completed
            reply = out.tokens_payload if answer is None else answer(sent, out)
            if reply is not None and not out.expired:   # as the node: a step done past its deadline answers nothing
                prefix.tokens_in(reply)
        elif index is None:
            time.sleep(0.01)
    return done, steps


@pytest.mark.parametrize("name", FAMILIES)
def test_two_servers_sharing_bytes_decode_the_sequential_tokens(models, name):
    model = models[name]
    frames = frames_of(model, 7)
    reference = {f.seq: reference_tokens(model, f) for f in frames}
    for pack, groups, partition in ((1, 1, 2), (3, 2, 1), (2, 2, 3), (4, 1, 0)):
        prefix = PackedPrefixServer(model, pack, groups, partition, policy="lossless", capacity=16)
        done, steps = drive(prefix, PackedSuffixServer(model), frames)
        assert {r.seq: r.tokens for r in done} == reference, (pack, groups, partition)
        assert {r.seq: r.stamp_ns for r in done} == {f.seq: f.stamp_ns for f in frames}
        assert all(r.trajectory.partition == partition for r in done)
        assert max(s.rows for s in steps) > 1 and not prefix.take_lost()


def test_two_groups_keep_a_step_of_each_in_flight(models):
    """With two groups the prefix sends group b's step before group a's tokens are back."""
    model = models["tiny-act"]
    prefix = PackedPrefixServer(model, 2, 2, 2, policy="lossless", capacity=16)
    awaited = []
    drive(prefix, PackedSuffixServer(model), frames_of(model, 6),
          on_step=lambda sent: awaited.append(len(prefix.awaiting)))
    assert max(awaited) == 2 and prefix.step_no == len(awaited)


def test_a_step_whose_tokens_never_come_back_fails_its_frames_and_the_rest_go_on(models):
    model = models["tiny-act"]
    frames = frames_of(model, 5)
    # the shipped auto timeout (at least 2 s, 5 x the longest recent round trip): a fixed 0.2 s also failed the
    # answered steps of a loaded run (the suffix computed them past their deadline)
    prefix = PackedPrefixServer(model, 2, 1, 2, policy="lossless", capacity=16)
    dropped = {3}   # the suffix's answer to step 3 is lost (frames 0 and 1 are mid-decode then)
    done, _ = drive(prefix, PackedSuffixServer(model), frames,
                    answer=lambda sent, out: None if sent.step - prefix.run_base in dropped else out.tokens_payload)
    lost = prefix.take_lost()
    assert {entry.reason for entry in lost} == {"token_feedback_timeout"}
    lost_stamps = {entry.stamp_ns for entry in lost}
    assert lost_stamps == {frames[0].stamp_ns, frames[1].stamp_ns}
    survivors = [f for f in frames if f.stamp_ns not in lost_stamps]
    assert {r.seq: r.tokens for r in done} == {f.seq: reference_tokens(model, f) for f in survivors}
    late = prefix.stale_tokens
    prefix.tokens_in(encode_tokens({0: 300}, prefix.run_base + 3))   # the lost answer after all: ignored, counted
    prefix.next_group(wait_s=0.0)
    assert prefix.stale_tokens == late + 1


def test_a_late_answer_from_an_earlier_run_never_matches_a_step_of_a_new_one(models):
    """Step numbers restarted at 1 on every reconfigure or respawn, so a late answer to step 1 of the old run
    was taken as the answer to step 1 of the new one. Step ids now start at a random base per server."""
    model = models["tiny-act"]
    frames = frames_of(model, 2)
    old = PackedPrefixServer(model, 1, 1, 2, policy="lossless", capacity=4)
    old.submit(frames[0])
    late = PackedSuffixServer(model).step(old.step(old.next_group(wait_s=0.0)).payload)   # never delivered to old
    new = PackedPrefixServer(model, 1, 1, 2, policy="lossless", capacity=4)
    assert new.run_base != old.run_base
    new.submit(frames[1])
    sent = new.step(new.next_group(wait_s=0.0))
    new.tokens_in(late.tokens_payload)                  # frame 0's token for the old run's step 1
    new.next_group(wait_s=0.0)
    assert new.stale_tokens == 1 and sent.step in new.awaiting


def test_tokens_for_other_frames_or_outside_the_vocabulary_fail_the_step(models):
    model = models["tiny-act"]
    frames = frames_of(model, 3)
    prefix = PackedPrefixServer(model, 1, 1, 2, policy="lossless", capacity=16)
    base = model.action_tokenizer.base

    def corrupt(sent, out):
        if sent.step - prefix.run_base == 2:
            return encode_tokens({99: base}, sent.step)
        if sent.step - prefix.run_base == 12:   # frame 2's second step (frame 0 failed at step 2, frame 1 took steps 3..10)
            return encode_tokens({seq: base - 1 for seq in decode_tokens(out.tokens_payload)[0]}, sent.step)
        return out.tokens_payload
    done, _ = drive(prefix, PackedSuffixServer(model), frames, answer=corrupt)
    lost = prefix.take_lost()
    assert [entry.reason for entry in lost] == ["invalid_tokens", "invalid_tokens"]
    assert "the step carried [0]" in lost[0].message and "outside the action vocabulary" in lost[1].message
    assert [e.stamp_ns for e in lost] == [frames[0].stamp_ns, frames[2].stamp_ns]
    assert {r.seq: r.tokens for r in done} == {1: reference_tokens(model, frames[1])}
    with pytest.raises(OldMessageError, match="ActionFlow packed step"):   # the format HVLM replaced, by name
        prefix.tokens_in(b"HVLP" + bytes(20))


def test_a_frame_that_cannot_be_embedded_fails_alone(models):
    model = models["tiny-act"]
    frames = frames_of(model, 4)

    refused = []

    def prepare(frame):
        if frame.seq == 1:
            raise InputError("camera 0: 7 bytes for a 64 x 64 rgb8 image")
        if frame.seq == 2:   # the caller refuses it itself (e.g. out of order) and counts it
            refused.append(frame.seq)
            return False
        return True
    prefix = PackedPrefixServer(model, 2, 2, 2, policy="lossless", capacity=16, prepare=prepare)
    done, _ = drive(prefix, PackedSuffixServer(model), frames)
    lost = prefix.take_lost()
    assert [(e.reason, e.stamp_ns) for e in lost] == [("invalid_input", frames[1].stamp_ns)]
    assert "7 bytes" in lost[0].message and refused == [2]
    assert {r.seq: r.tokens for r in done} == {f.seq: reference_tokens(model, f) for f in frames if f.seq in (0, 3)}


def test_a_partition_change_waits_for_the_drain_and_the_suffix_follows(models):
    model = models["tiny-act"]
    frames = frames_of(model, 6)
    prefix = PackedPrefixServer(model, 2, 2, 2, policy="lossless", capacity=16)
    suffix = PackedSuffixServer(model)
    seen = []

    def on_step(sent):
        seen.append(sent.partition)
        if sent.step - prefix.run_base == 3:
            prefix.request_partition(3)
    done, steps = drive(prefix, suffix, frames, on_step=on_step)
    assert {r.seq: r.tokens for r in done} == {f.seq: reference_tokens(model, f) for f in frames}
    assert seen[0] == 2 and seen[-1] == 3 and seen == sorted(seen)     # one move, never back
    assert {r.trajectory.partition for r in done} == {2, 3} and suffix.partition == 3
    assert not any(s.incomplete for s in steps)                        # nothing was cut off by the move
    with pytest.raises(ConfigError, match="partition"):
        prefix.request_partition(99)


def test_latest_policy_keeps_the_newest_waiting_frame(models):
    model = models["tiny-act"]
    prefix = PackedPrefixServer(model, 1, 1, 2, policy="latest")
    a, b, c = frames_of(model, 3)
    assert prefix.submit(a) == (None, "") and prefix.submit(b) == (a, "full") and prefix.submit(c) == (b, "full")
    prefix.close()
    assert prefix.submit(a) == (a, "shutdown")   # after close: this one, said why (the node counts it shutdown)


def test_parameters_are_validated_with_a_reason(models):
    model = models["tiny-act"]
    with pytest.raises(ConfigError, match="pack_groups=0"):
        PackedPrefixServer(model, 2, 0, 2)
    with pytest.raises(ConfigError, match="pack=0"):
        PackedPrefixServer(model, 0, 1, 2)
    with pytest.raises(ConfigError, match="waypoint head"):
        PackedSuffixServer(load_vla(preset="tiny"))


def test_the_suffix_refuses_payloads_that_do_not_fit_and_keeps_decoding(models):
    model = models["tiny-act"]
    frames = frames_of(model, 2)
    prefix = PackedPrefixServer(model, 2, 1, 2, policy="lossless", capacity=16)
    suffix = PackedSuffixServer(model)
    for frame in frames:
        prefix.submit(frame)
    sent = prefix.step(prefix.next_group(wait_s=1.0))
    no_ring = hvlm.decode(sent.payload)
    no_ring.parts["slots"] = 0                       # a header claiming no KV ring
    for damaged in (sent.payload[:-3], b"HVLP" + sent.payload[4:10], hvlm.encode(no_ring)):
        with pytest.raises(InputError):
            suffix.step(damaged)
    other = load_vla(preset="tiny-llava-act")
    with pytest.raises(InputError):
        PackedSuffixServer(other).step(sent.payload)
    prefix.tokens_in(suffix.step(sent.payload).tokens_payload)
    done, _ = drive(prefix, suffix, [])
    assert {r.seq: r.tokens for r in done} == {f.seq: reference_tokens(model, f) for f in frames}


@pytest.mark.parametrize("name", FAMILIES)
def test_an_action_token_checkpoint_reads_back_and_each_side_reads_only_its_blocks(models, name, tmp_path):
    from hybrid_vla_ros.engine.scheduling.partition import side_modules
    from hybrid_vla_ros.model.checkpoint import load_checkpoint, save_checkpoint
    model = models[name]
    save_checkpoint(model, tmp_path / "act")
    frames = frames_of(model, 3)
    prefix_model = load_checkpoint(tmp_path / "act", keep=lambda m: [])
    suffix_model = load_checkpoint(tmp_path / "act", keep=lambda m: [])
    assert prefix_model.spec.action_head == "tokens" and prefix_model.action_tokenizer.base == \
        model.action_tokenizer.base
    prefix = PackedPrefixServer(prefix_model, 2, 2, 2, policy="lossless", capacity=16, zone=(1, 2))
    suffix = PackedSuffixServer(suffix_model, zone=(1, 2))
    meta = lambda m, modules: {id(p) for mod in modules for p in mod.parameters() if p.device.type == "meta"}
    assert not meta(prefix_model, side_modules(prefix_model, 0, 2)) and meta(prefix_model, [prefix_model.action_head])
    assert not meta(suffix_model, side_modules(suffix_model, 1, 4)) and meta(suffix_model, side_modules(suffix_model, 0, 1))
    done, _ = drive(prefix, suffix, frames)
    assert {r.seq: r.tokens for r in done} == {f.seq: reference_tokens(model, f) for f in frames}


@settings(max_examples=int(os.environ.get("HVLA_FUZZ_EXAMPLES", "200")), deadline=None,
          suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(data=st.data())
def test_a_suffix_server_fed_damaged_steps_refuses_them_and_then_decodes_exactly(models, data):
    """Hostile bytes on the boundary topic: each is an InputError or a consistent step (tokens in the action
    vocabulary); afterwards a clean stream still decodes the sequential tokens (a step that was accepted may
    have rebuilt the ring: the clean stream starts with prefills)."""
    model = models["tiny-act"]
    suffix = PackedSuffixServer(model, zone=(1, 3))
    payload = bytearray(encode_state(*_fresh(data.draw(st.sampled_from(_clean_steps(model))))))
    for _ in range(data.draw(st.integers(1, 6))):
        payload[data.draw(st.integers(0, len(payload) - 1))] = data.draw(st.integers(0, 255))
    if data.draw(st.booleans()):
        payload = payload[:data.draw(st.integers(0, len(payload)))]
    try:
        out = suffix.step(bytes(payload))
    except InputError:
        pass
    else:
        if out.expired:   # a damaged deadline in the past: nothing published (an answer has 1..1024 entries)
            assert out.tokens_payload == b"" and not out.completed
        tokens = decode_tokens(out.tokens_payload)[0] if not out.expired else {}
        base, bins = model.action_tokenizer.base, model.action_tokenizer.bins
        assert all(base <= t < base + bins for t in tokens.values())
        assert all(np.isfinite(r.trajectory.points).all() for r in out.completed)  # never a NaN action
    frames = frames_of(model, 2, first=50)
    done, _ = drive(PackedPrefixServer(model, 2, 1, 2, policy="lossless", capacity=4), suffix, frames)
    assert {r.seq: r.tokens for r in done} == {f.seq: reference_tokens(model, f) for f in frames}


_STEPS: dict = {}


def _fresh(payload: bytes):
    """A recorded step again, with its deadline ahead: (state, partition, step, slots, deadline)."""
    from hybrid_vla_ros.engine.actionflow.codec import decode_state
    state, header = decode_state(payload)
    return state, header.partition, header.step, header.slots, time.time_ns() + 10**9


def _clean_steps(model) -> list[bytes]:
    """The packed steps of three frames (computed once)."""
    if model.spec.name not in _STEPS:
        sent = []
        drive(PackedPrefixServer(model, 2, 1, 2, policy="lossless", capacity=4), PackedSuffixServer(model),
              frames_of(model, 3), on_step=lambda s: sent.append(s.payload))
        _STEPS[model.spec.name] = sent
    return _STEPS[model.spec.name]


def _decode_step(side, hidden_size, long_pos, short_pos):
    """Two decode rows in slots 0 and 1 at positions long_pos and short_pos (1-D positions)."""
    import torch
    from hybrid_vla_ros.engine.actionflow.forward import PackedState, Segment
    torch.manual_seed(1)
    hidden = torch.randn(2, hidden_size)
    segments = [Segment(seq=0, slot=0, start=long_pos, row=0, count=1), Segment(seq=1, slot=1, start=short_pos, row=1, count=1)]
    return side.blocks_forward(PackedState(hidden, torch.tensor([[long_pos, short_pos]]), segments)).hidden


def test_nan_past_a_decode_rows_own_length_never_reaches_it(models):
    """Two decode rows gather keys up to the longer one; positions past the shorter row's own length hold
    whatever its slot had before (a damaged step's NaN). Masked scores still multiply those values: they must
    be zeroed, or the row's logits turn NaN and argmax publishes a wrong action token silently."""
    import torch
    from hybrid_vla_ros.engine.actionflow.forward import PackedSide
    model = models["tiny-llava-act"]
    clean = PackedSide(model, 0, model.num_blocks, slots=2, slot_tokens=16)
    poisoned = PackedSide(model, 0, model.num_blocks, slots=2, slot_tokens=16)
    torch.manual_seed(0)
    for layer in clean.ring.keys:       # the same history in both: positions 0..9 of both slots
        clean.ring.keys[layer][:, :, :10] = torch.randn_like(clean.ring.keys[layer][:, :, :10])
        clean.ring.values[layer][:, :, :10] = torch.randn_like(clean.ring.values[layer][:, :, :10])
        poisoned.ring.keys[layer][:, :, :10] = clean.ring.keys[layer][:, :, :10]
        poisoned.ring.values[layer][:, :, :10] = clean.ring.values[layer][:, :, :10]
        poisoned.ring.keys[layer][1, :, 4:] = float("nan")      # slot 1 past its row's position 3: NaN
        poisoned.ring.values[layer][1, :, 4:] = float("inf")
    expected = _decode_step(clean, model.spec.hidden_size, 9, 3)
    got = _decode_step(poisoned, model.spec.hidden_size, 9, 3)
    assert torch.isfinite(got).all()
    # bit-equal: the same step through the same kernels on the same shapes, on this thread, and the same inputs: the
    # positions past row 1's length are zeroed in the gathered keys and values of both sides before attention
    assert torch.equal(got, expected)


def test_a_released_ring_slot_is_cleared_before_the_next_frame_takes_it():
    import torch
    from hybrid_vla_ros.engine.actionflow.kv_ring import KVRing
    ring = KVRing(range(2), slots=2, slot_tokens=4, kv_heads=1, head_dim=2)
    slot = ring.acquire()
    for layer in range(2):
        ring.keys[layer][slot].fill_(float("nan"))
        ring.values[layer][slot].fill_(float("inf"))
    ring.release(slot)
    ring.acquire()
    again = ring.acquire()
    assert again == slot
    assert all(torch.count_nonzero(store[slot]) == 0 for store in (*ring.keys.values(), *ring.values.values()))


def test_a_packed_step_with_nan_rows_is_refused_as_nonfinite_and_nothing_changes(models):
    from hybrid_vla_ros.engine.actionflow.codec import decode_state, encode_state
    from hybrid_vla_ros.errors import NonFiniteError
    model = models["tiny-act"]
    suffix = PackedSuffixServer(model)
    clean = _clean_steps(model)[0]
    state, header = decode_state(clean)
    state.hidden[0, 0] = float("nan")
    with pytest.raises(NonFiniteError, match="NaN or Inf") as info:
        suffix.step(encode_state(state, header.partition, header.step, header.slots))
    assert info.value.reason == "nonfinite_boundary" and suffix.side is None and not suffix.decoding


class _FailOnce:
    """Wraps a side's blocks_forward: raises on call number `at` (counted from 1), then behaves."""

    def __init__(self, side, at):
        self.side, self.real, self.at, self.calls = side, side.blocks_forward, at, 0
        side.blocks_forward = self

    def __call__(self, state):
        self.calls += 1
        if self.calls == self.at:
            raise RuntimeError("injected fault in the blocks")
        return self.real(state)


def test_a_packed_step_that_raises_fails_its_frames_frees_their_slots_and_the_group_goes_on(models):
    """Before: the frame admitted in the failing step stayed in flight without a token; every later step of the
    group raised IndexError, its slot was never freed and no partition move could happen."""
    model = models["tiny-act"]
    frames = frames_of(model, 5)
    prefix = PackedPrefixServer(model, 2, 1, 2, policy="lossless", capacity=16)
    _FailOnce(prefix.groups[0].prefix, at=2)     # step 2: frame 1's prefill beside frame 0's decode row
    suffix = PackedSuffixServer(model)
    for frame in frames:
        prefix.submit(frame)
    done, failures = [], 0
    while not prefix.idle:
        index = prefix.next_group(wait_s=0.0)
        if index is None:
            continue
        try:
            sent = prefix.step(index)
        except RuntimeError:
            failures += 1
            continue
        if sent is not None:
            out = suffix.step(sent.payload)
            done += out.completed
            prefix.tokens_in(out.tokens_payload)
    lost = prefix.take_lost()
    assert failures == 1 and {entry.reason for entry in lost} == {"step_failed"}
    lost_stamps = {entry.stamp_ns for entry in lost}
    assert lost_stamps == {frames[0].stamp_ns, frames[1].stamp_ns}
    survivors = [f for f in frames if f.stamp_ns not in lost_stamps]
    assert {r.seq: r.tokens for r in done} == {f.seq: reference_tokens(model, f) for f in survivors}
    assert prefix.in_flight == 0 and len(prefix.groups[0].prefix.ring.free) == prefix.slots


def test_one_process_actionflow_fails_only_the_frames_of_a_step_that_raises(models):
    from hybrid_vla_ros.engine.actionflow.packing import ActionFlow
    model = models["tiny-act"]
    frames = frames_of(model, 4)
    flow = ActionFlow(model, pack=2, partition=2)
    _FailOnce(flow.suffix, at=2)
    results = flow.run(frames)
    failed = [r for r in results if r.tokens is None]
    assert len(failed) == 2 and {r.reason for r in failed} == {"step_failed"}
    good = {r.seq: r.tokens for r in results if r.tokens is not None}
    assert good == {f.seq: reference_tokens(model, f) for f in frames if f.seq in good} and len(good) == 2
    assert not flow.flight and len(flow.prefix.ring.free) == flow.prefix.ring.slots


def test_headers_alternating_ring_sizes_do_not_rebuild_the_suffix_ring_each_step(models):
    """Found in review: the suffix rebuilt every layer's KV ring whenever header.slots changed; alternating
    values forced a reallocation per step. The ring now follows the slots the steps use, not the header's
    claim (test_packed_ring_bound.py): one slot here, never reallocated."""
    from hybrid_vla_ros.engine.actionflow.codec import decode_state, encode_state
    model = models["tiny-act"]
    suffix = PackedSuffixServer(model)
    state, header = decode_state(_clean_steps(model)[0])
    stores = []
    for slots in (2, 4, 2, 4, 3, 4):
        suffix.step(encode_state(state, header.partition, header.step, slots))
        stores.append((id(suffix.side), next(iter(suffix.side.ring.keys.values())).data_ptr()))
    assert len(set(stores)) == 1 and suffix.side.ring.slots == 1   # the slots used: slot 0


def test_a_multi_row_segment_that_does_not_start_at_zero_is_refused(models):
    """Several rows continuing a frame (start > 0) used to be attended top-left causal, wrongly aligned."""
    from hybrid_vla_ros.engine.actionflow.codec import decode_state, encode_state
    model = models["tiny-act"]
    state, header = decode_state(_clean_steps(model)[0])
    prefill = next(seg for seg in state.segments if seg.count > 1)
    prefill.start = 3
    with pytest.raises(InputError, match="several rows must be a prefill from position 0"):
        PackedSuffixServer(model).step(encode_state(state, header.partition, header.step, header.slots))


def test_closing_the_packed_prefix_accounts_for_every_frame_waiting_or_in_flight(models):
    model = models["tiny-act"]
    frames = frames_of(model, 4)
    prefix = PackedPrefixServer(model, 2, 1, 2, policy="lossless", capacity=8)
    for frame in frames:
        prefix.submit(frame)
    prefix.step(prefix.next_group(wait_s=0.0))          # frame 0 in flight (its tokens never come back)
    prefix.close()
    lost = prefix.take_lost()
    assert sorted(entry.stamp_ns for entry in lost) == [f.stamp_ns for f in frames]
    assert {entry.reason for entry in lost} == {"shutdown"}


def test_one_authority_per_frame_a_frame_the_prefix_gave_up_is_never_reported_again_by_the_suffix(models):
    """Issue 27, item 9: the suffix reported frames the prefix had timed out as action_incomplete once their slot
    was reused (each loss counted twice). A frame first seen at its prefill is the prefix's to count."""
    model = models["tiny-act"]
    frames = frames_of(model, 5)
    prefix = PackedPrefixServer(model, 2, 1, 2, policy="lossless", capacity=16)   # auto: load-proof (above)
    dropped = {3}
    done, steps = drive(prefix, PackedSuffixServer(model), frames,
                        answer=lambda sent, out: None if sent.step - prefix.run_base in dropped else out.tokens_payload)
    lost = {entry.stamp_ns for entry in prefix.take_lost()}
    assert len(lost) == 2
    assert not [i for out in steps for i in out.incomplete]          # counted once: by the prefix
    assert not lost & {r.stamp_ns for r in done}                      # and never published


def test_a_suffix_done_after_the_deadline_answers_nothing_and_the_prefix_counts_the_frames_once(models):
    """A step computed too slowly: answering it could publish a frame the prefix already reported lost. The
    suffix drops it unanswered (and its frames); the prefix gives them up a grace after the deadline."""
    model = models["tiny-act"]
    prefix = PackedPrefixServer(model, 1, 1, 2, policy="lossless", capacity=4, token_timeout_s=0.05)
    suffix = PackedSuffixServer(model)
    frame = frames_of(model, 1)[0]
    prefix.submit(frame)
    sent = prefix.step(prefix.next_group(wait_s=0.0))
    time.sleep(0.08)                                                  # the suffix is late
    out = suffix.step(sent.payload)
    assert out.expired and not out.completed and out.tokens_payload == b"" and suffix.expired_steps == 1
    assert not suffix.decoding                                         # its frame is gone here
    assert prefix.next_group(wait_s=0.0) is None and not prefix.take_lost()   # still within the grace
    time.sleep(prefix.grace_s)
    prefix.next_group(wait_s=0.0)
    assert [(e.reason, e.stamp_ns) for e in prefix.take_lost()] == [("token_feedback_timeout", frame.stamp_ns)]


def test_a_frame_the_suffix_never_saw_the_prefill_of_is_the_suffix_s_to_count(models):
    """A restarted suffix gets decode rows of frames whose prefill went to its predecessor: the prefix does
    not know they are lost, so the suffix counts each once, when its slot is taken by a new prefill."""
    model = models["tiny-act"]
    frames = frames_of(model, 3)
    prefix = PackedPrefixServer(model, 1, 1, 2, policy="lossless", capacity=8)
    first, second = PackedSuffixServer(model), PackedSuffixServer(model)
    prefix.submit(frames[0])
    sent = prefix.step(prefix.next_group(wait_s=0.0))                 # frame 0's prefill: to the first suffix
    prefix.tokens_in(first.step(sent.payload).tokens_payload)
    for frame in frames[1:]:
        prefix.submit(frame)
    incomplete = []
    while not prefix.idle:                                            # the first suffix is gone; the second serves
        index = prefix.next_group(wait_s=0.05)
        if index is None:
            continue
        out = second.step(prefix.step(index).payload)
        incomplete += out.incomplete
        prefix.tokens_in(out.tokens_payload)
    assert [stamp for _, stamp in incomplete] == [frames[0].stamp_ns]
