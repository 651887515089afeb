"""The Alpamayo byte servers alone, no ROS (engine/expert_serve: prefix_server.py, suffix_server.py): they share
only bytes and equal run_reference exactly at any cut; a bad crossing refuses its frame with its reason and the
next frame is served; a frame waits for a suffix to be linked, and is refused `suffix_absent` when none comes."""

import dataclasses
import threading
import time

import pytest
import torch

from test_alpamayo_graph import SAMPLING, SEED, camera_sets, damaged_forward, releases  # noqa: F401 (releases: the fixture)
from hybrid_vla_ros.engine.expert_serve import envelope
from hybrid_vla_ros.engine.expert_serve.frame_inputs import PromptText, frame_inputs, still_history
from hybrid_vla_ros.engine.expert_serve.prefix_server import AlpamayoPrefixServer, PrefixJob
from hybrid_vla_ros.engine.expert_serve.suffix_server import AlpamayoSuffixServer
from hybrid_vla_ros.engine.expert_split.crossings import TokensState
from hybrid_vla_ros.engine.handover.message import OldMessageError
from hybrid_vla_ros.model.plugins import alpamayo


def serve(prefix, suffix, job, poison=None, linked=None):
    """One frame through both servers, every message as bytes; -> (prefix outcome, suffix replies)."""
    replies = []

    def send(data):
        message = envelope.decode_forward(data)
        if poison is not None and isinstance(message.state, poison):
            message.state = dataclasses.replace(message.state, hidden=message.state.hidden.clone().fill_(float("nan")))
            data = envelope.encode_forward(message)
        reply = suffix.handle(data)
        replies.append(reply)
        for answer in reply.answers:
            prefix.answer(answer)
    return prefix.serve(job, send, linked), replies


def test_the_servers_share_only_bytes_and_equal_the_reference(releases):
    model = alpamayo.load_release(releases["1.5"])
    text, flow = PromptText.from_release(releases["1.5"]), alpamayo.FlowSettings(3, 2.5)
    inputs = frame_inputs(model, [im for s in camera_sets(4) for im in s], still_history(), text, route=True)
    suffix = AlpamayoSuffixServer(model)
    for p in (0, 2, 4):
        prefix = AlpamayoPrefixServer(model, p, SAMPLING, flow, guidance=True, seed=SEED)
        outcome, replies = serve(prefix, suffix, PrefixJob(inputs, p, 1000 + p))
        done = [r.finished for r in replies if r.finished]
        ref = alpamayo.run_reference(model, inputs, outcome.settings.seed, SAMPLING, flow, True)
        assert outcome.sent and len(done) == 1 and done[0].settings.partition == p
        assert done[0].result.tokens == ref.tokens and torch.equal(done[0].result.xyz, ref.xyz)



def test_two_frames_open_at_once_each_equal_the_reference(releases):
    """The prefix keeps two frames in flight (begin / step), the suffix two open (max_open 2), their crossings
    interleaved one answer at a time: each frame's tokens and trajectory equal run_reference for its seed; nothing
    is replaced or left open."""
    model = alpamayo.load_release(releases["1.5"])
    text, flow = PromptText.from_release(releases["1.5"]), alpamayo.FlowSettings(3, 2.5)
    sets = camera_sets(5)
    inputs = [frame_inputs(model, [im for s in sets[i:i + 4] for im in s], still_history(), text, route=True)
              for i in (0, 1)]
    prefix = AlpamayoPrefixServer(model, 2, SAMPLING, flow, guidance=True, seed=SEED)
    suffix, finished = AlpamayoSuffixServer(model, max_open=2), {}

    def send(data):
        reply = suffix.handle(data)
        assert reply.refused is None, reply.refused
        if reply.finished is not None:
            finished[reply.finished.tag.seq] = reply.finished
        for answer in reply.answers:
            prefix.answer(answer)
    conversations = [prefix.begin(PrefixJob(inputs[i], i, 1000 + 100 * i), send) for i in (0, 1)]
    while any(c.outcome is None for c in conversations):
        waiting = [c for c in conversations if c.outcome is None and c.answers]
        assert waiting, "a frame in flight with no answer to take"
        for c in waiting:   # one answer each in turn: the two frames' messages interleave at the suffix
            prefix.step(c, c.answers.popleft())
    for i, c in enumerate(conversations):
        ref = alpamayo.run_reference(model, inputs[i], c.outcome.settings.seed, SAMPLING, flow, True)
        assert c.outcome.sent and finished[i].result.tokens == ref.tokens
        assert torch.equal(finished[i].result.xyz, ref.xyz)
    assert not prefix.open and not suffix.open and suffix.replaced == 0


def test_the_prefix_starts_frames_oldest_first_up_to_max_open_and_ends_the_rest_at_close(releases):
    """next_event: an open frame's answer first, then a waiting frame while fewer than max_open are in flight; a full
    inbox pushes out its oldest (keep_newest false: turns the newcomer away); a frame past its deadline comes back
    `late` (suffix_timeout once stepped); close hands back what waited, give_up_open ends what was in flight as
    shutdown (once) and tells the suffix to let it go (ABORT)."""
    model = alpamayo.load_release(releases["r1"])
    inputs = frame_inputs(model, [im for s in camera_sets(4) for im in s], still_history(), PromptText())
    prefix = AlpamayoPrefixServer(model, 2, SAMPLING, alpamayo.FlowSettings(2), seed=SEED, max_open=2, capacity=2)
    suffix, sent = AlpamayoSuffixServer(model, max_open=2), []
    jobs = [PrefixJob(inputs, i, 1000 + i) for i in range(5)]
    assert [prefix.submit(j) for j in jobs[:4]] == [(None, ""), (None, ""), (jobs[0], "full"), (jobs[1], "full")]
    started = []
    for expected in jobs[2:4]:
        kind, job, _ = prefix.next_event(0)
        assert (kind, job) == ("frame", expected)
        started.append(prefix.begin(job, sent.append))   # its prompt out; no suffix answers yet
    prefix.submit(jobs[4])
    assert prefix.next_event(0) is None                  # two in flight: the fifth waits
    for answer in suffix.handle(sent[1]).answers:        # the second frame's prompt answered
        prefix.answer(answer)
    kind, conversation, back = prefix.next_event(0)
    assert (kind, conversation) == ("answer", started[1]) and back.index == 0
    assert prefix.close() == [jobs[4]]
    assert prefix.submit(jobs[0]) == (jobs[0], "shutdown")   # after close: handed back, never started
    outcomes = prefix.give_up_open()
    assert [(o.tag.seq, o.reason, o.sent) for o in outcomes] == [(2, "shutdown", False), (3, "shutdown", False)]
    assert [envelope.decode_forward(m).kind for m in sent[-2:]] == [envelope.ABORT, envelope.ABORT]
    assert not prefix.open and prefix.give_up_open() == []
    ended = started[0]   # ended once: the worker's late end of a frame close ended neither replaces its outcome ...
    assert not prefix._end(ended, None) and ended.outcome.reason == "shutdown"
    sent_before = len(sent)
    ended.frame.send(None)                               # ... nor sends its crossings
    assert len(sent) == sent_before
    queue = AlpamayoPrefixServer(model, 2, SAMPLING, alpamayo.FlowSettings(2), capacity=2, keep_newest=False)
    assert [queue.submit(j) for j in jobs[:3]] == [(None, ""), (None, ""), (jobs[2], "full")]   # the newcomer away
    assert list(queue.inbox) == jobs[:2]
    late = AlpamayoPrefixServer(model, 2, SAMPLING, alpamayo.FlowSettings(2), seed=SEED, timeout_s=0.1)
    conversation = late.begin(jobs[0], lambda data: None)
    time.sleep(0.15)
    kind, same, back = late.next_event(0)
    assert (kind, same, back) == ("late", conversation, None)
    late.step(conversation, back)
    assert conversation.outcome.reason == "suffix_timeout" and not late.open

def test_a_bad_crossing_refuses_its_frame_with_the_reason_and_the_next_is_served(releases):
    model = alpamayo.load_release(releases["r1"])
    inputs = frame_inputs(model, [im for s in camera_sets(4) for im in s], still_history(), PromptText())
    prefix, suffix = AlpamayoPrefixServer(model, 2, SAMPLING, alpamayo.FlowSettings(2), seed=SEED, timeout_s=5), \
        AlpamayoSuffixServer(model)
    outcome, replies = serve(prefix, suffix, PrefixJob(inputs, 0, 1000), poison=TokensState)
    refused = [r.refused for r in replies if r.refused]
    assert not outcome.sent and not outcome.counted_here and outcome.reason == "nonfinite_boundary"
    assert [(tag.seq, reason) for tag, reason, _ in refused] == [(0, "nonfinite_boundary")]
    damaged = damaged_forward()
    assert suffix.handle(damaged).refused[:2] == (envelope.Tag(1, 9, 5), "invalid_boundary")   # refused, named
    with pytest.raises(OldMessageError, match="Alpamayo forward message"):     # the format HVLM replaced: no frame
        suffix.handle(b"HVAF" + damaged[4:])
    outcome, replies = serve(prefix, suffix, PrefixJob(inputs, 1, 2000))
    ref = alpamayo.run_reference(model, inputs, outcome.settings.seed, SAMPLING, alpamayo.FlowSettings(2))
    assert outcome.sent and torch.equal(replies[-1].finished.result.xyz, ref.xyz)


def test_a_frame_waits_for_a_linked_suffix_and_is_refused_when_none_comes(releases):
    model = alpamayo.load_release(releases["r1"])
    inputs = frame_inputs(model, [im for s in camera_sets(4) for im in s], still_history(), PromptText())
    prefix, suffix = AlpamayoPrefixServer(model, 2, SAMPLING, alpamayo.FlowSettings(2), seed=SEED, timeout_s=0.3), \
        AlpamayoSuffixServer(model)
    outcome, replies = serve(prefix, suffix, PrefixJob(inputs, 0, 1000), linked=lambda: False)
    assert (outcome.sent, outcome.reason, outcome.counted_here, replies) == (False, "suffix_absent", True, [])
    assert "no suffix linked" in outcome.message
    prefix.timeout_s, linked, linked_at, first_sent = 30.0, threading.Event(), [], []
    handle = suffix.handle
    suffix.handle = lambda data: (first_sent or first_sent.append(time.monotonic()), handle(data))[1]
    threading.Timer(0.2, lambda: (linked_at.append(time.monotonic()), linked.set())).start()   # the suffix comes up
    outcome, replies = serve(prefix, suffix, PrefixJob(inputs, 1, 2000), linked=linked.is_set)
    ref = alpamayo.run_reference(model, inputs, outcome.settings.seed, SAMPLING, alpamayo.FlowSettings(2))
    assert outcome.sent and first_sent[0] >= linked_at[0]   # the frame's first message only once linked
    assert torch.equal(replies[-1].finished.result.xyz, ref.xyz)


def test_each_side_reads_only_its_tensors_and_the_two_halves_equal_the_reference(releases):
    """Issue 51's "own side" for a release: a prefix for the zone [1, 3] never reads lm_head, the final norms,
    action_out_proj or VLM block 3; a suffix never reads the vision tower, the embeddings, action_in_proj or VLM
    block 0; only the zone's blocks are read by both. Served from the two halves, every cut in the zone equals
    the whole model's reference."""
    from hybrid_vla_ros.engine.expert_split.sides import side_reads
    whole = alpamayo.load_release(releases["1.5"])
    halves = {side: alpamayo.load_release(releases["1.5"], reads=side_reads(whole, side, (1, 3)))
              for side in ("prefix", "suffix")}
    read = {side: {n for n, p in m.named_parameters() if not p.is_meta} for side, m in halves.items()}
    names = {n for n, _ in whole.named_parameters()}
    block = "vlm.model.language_model.layers."
    assert read["prefix"] | read["suffix"] == names
    assert {n.split(".")[4] for n in read["prefix"] & read["suffix"] if n.startswith(block)} == {"1", "2"}
    assert not {n for n in read["prefix"] & read["suffix"] if not n.startswith((block, "expert.layers."))}
    assert "vlm.lm_head.weight" not in read["prefix"] and not any(n.startswith(block + "3.") for n in read["prefix"])
    assert not any(n.startswith(("vlm.model.visual.", "action_in_proj.", block + "0.")) for n in read["suffix"])
    text, flow = PromptText.from_release(releases["1.5"]), alpamayo.FlowSettings(3, 2.5)
    inputs = frame_inputs(whole, [im for s in camera_sets(4) for im in s], still_history(), text, route=True)
    suffix = AlpamayoSuffixServer(halves["suffix"])
    for p in (1, 2, 3):
        prefix = AlpamayoPrefixServer(halves["prefix"], p, SAMPLING, flow, guidance=True, seed=SEED)
        outcome, replies = serve(prefix, suffix, PrefixJob(inputs, p, 1000 + p))
        done = [r.finished for r in replies if r.finished]
        ref = alpamayo.run_reference(whole, inputs, outcome.settings.seed, SAMPLING, flow, True)
        assert done[0].result.tokens == ref.tokens and torch.equal(done[0].result.xyz, ref.xyz)


def test_a_side_in_bf16_beside_one_in_fp32_converts_what_arrives_and_finishes_its_frames(releases):
    """Each side reads and runs the release in its own dtype (the nodes' `dtype` parameters): what crosses is
    converted on arrival (VLM and expert rows, DeepStack features; action_in_proj takes any), also where the
    receiving side runs no block of it (p = L; p >= L_e: its norm and head only). Mixed, every cut finishes its
    frame with a finite trajectory (no reference: the reasoning is sampled from logits of another precision);
    both in bf16, the split equals the unsplit bf16 model."""
    from hybrid_vla_ros.engine.expert_split.sides import side_reads
    whole = alpamayo.load_release(releases["1.5"])
    text, flow = PromptText.from_release(releases["1.5"]), alpamayo.FlowSettings(2, 2.5)
    inputs = frame_inputs(whole, [im for s in camera_sets(4) for im in s], still_history(), text, route=True)
    cases = [(p, a, b) for p in range(whole.num_blocks + 1)
             for a, b in ((torch.float32, torch.bfloat16), (torch.bfloat16, torch.float32))]
    for p, prefix_dtype, suffix_dtype in cases + [(2, torch.bfloat16, torch.bfloat16)]:
        halves = [alpamayo.load_release(releases["1.5"], dtype=d, reads=side_reads(whole, side, (p, p)))
                  for side, d in (("prefix", prefix_dtype), ("suffix", suffix_dtype))]
        assert {p.dtype for p in halves[1].parameters()} == {suffix_dtype}
        prefix = AlpamayoPrefixServer(halves[0], p, SAMPLING, flow, guidance=True, seed=SEED)
        outcome, replies = serve(prefix, AlpamayoSuffixServer(halves[1]), PrefixJob(inputs, p, 1000 + p))
        done = [r.finished.result for r in replies if r.finished]
        assert outcome.sent and len(done) == 1 and torch.isfinite(done[0].xyz).all(), (p, outcome.message)
        if prefix_dtype == suffix_dtype:
            bf16 = alpamayo.load_release(releases["1.5"], dtype=torch.bfloat16)
            ref = alpamayo.run_reference(bf16, inputs, outcome.settings.seed, SAMPLING, flow, True)
            assert done[0].tokens == ref.tokens and torch.equal(done[0].xyz, ref.xyz)
