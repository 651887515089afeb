"""Decode across the cut (engine/decode/ with engine/actionflow/): greedy and seeded top-p sampling, over the action
tokens and over the full vocabulary, with stop ids and a max length, so frames of one packed forward end at
different steps and leave the pack. For fp32 the packed engine, unsplit and cut at every p (its suffix picking
the tokens, its prefix freeing the slots), and the two servers that share only bytes, give exactly the tokens of
the sequential reference (reference.py: HF layers and DynamicCache, one frame at a time, the same policy).

Why exact token equality is sound here (see test/greedy_reference.py for greedy): the two paths' fp32 logits
agree to rounding, within t = LOGIT_ULPS ulps of the step's largest |logit|. CheckedDecoder asserts, at every
step of the reference, that such a perturbation cannot change the pick: greedy, the top-2 gap exceeds 2 t;
sampled, with d = t / temperature (each probability moves by at most a factor e^(2d)), the drawn point and the
top-p cut each lie more than 6 d from the edges of the sorted cumulative distribution (the point's and the
edges' own shifts, and an edge moved by two near-equal probabilities trading places). A frame too close to a
tie fails there, by name, rather than flipping a token on another CPU's kernels.
"""

from dataclasses import replace

import pytest
import torch

from hybrid_vla_ros.engine.actionflow.packing import ActionFlow
from hybrid_vla_ros.engine.actionflow.prefix_server import PackedPrefixServer
from hybrid_vla_ros.engine.actionflow.reference import sequential_results, sequential_tokens
from hybrid_vla_ros.engine.actionflow.suffix_server import PackedSuffixServer
from hybrid_vla_ros.engine.decode.decoder import TokenDecoder
from hybrid_vla_ros.engine.decode.policy import DecodePolicy
from hybrid_vla_ros.engine.decode.sampling import nucleus, step_seed, step_uniform
from hybrid_vla_ros.errors import ConfigError
from hybrid_vla_ros.model.inputs import synthetic_frame
from hybrid_vla_ros.model.load import load_vla

from greedy_reference import LOGIT_ULPS
from test_packed_serve import drive

FAMILIES = ("tiny-act", "tiny-qwen3vl-act")
FRAMES = 6
EPS = torch.finfo(torch.float32).eps
# Sampled steps: 8 ulps (measured packed vs sequential: at most 3, greedy_reference.py) with the 6 d geometry on top.
# A draw's margin is a matter of its seed and of the reference's logits, which another CPU's kernels round
# differently: the seed is searched from SEED on, on this machine (clearing_seed; about one seed in eight clears).
SAMPLED_ULPS = 8
SEED = 5
SEED_TRIES = 64
POLICIES = {
    "greedy-actions": dict(),
    "sampled-actions": dict(sample=True, temperature=0.7, top_p=0.9, seed=SEED),
    "greedy-full": dict(vocabulary="full", max_tokens=10),
    "sampled-full": dict(vocabulary="full", sample=True, temperature=1.0, top_p=1.0, seed=SEED, max_tokens=10),
}


class CheckedDecoder(TokenDecoder):
    """The reference's decoder, asserting at each step that rounding of another kernel cannot change its pick."""

    def choose(self, logits, stamp_ns, index):
        tol = (SAMPLED_ULPS if self.policy.sample else LOGIT_ULPS) * EPS * float(logits.abs().max())
        where = f"frame stamped {stamp_ns}, token {index}"
        if not self.policy.sample:
            best, second = (float(v) for v in logits.topk(2).values)
            assert best - second > 2 * tol, f"{where}: greedy lead {best - second:.2e} within 2 x {tol:.2e}"
        else:
            check_draw(logits, self.policy, step_uniform(self.policy.seed, stamp_ns, index), tol, where)
        return super().choose(logits, stamp_ns, index)


def check_draw(logits, policy, uniform, tol, where):
    margin = 6 * tol / policy.temperature
    order, cumulative = nucleus(logits, policy.temperature, policy.top_p)
    before = torch.cat([cumulative.new_zeros(1), cumulative[:-1]])                   # mass before each kept id
    if order.shape[0] < logits.shape[0]:
        assert float(cumulative[-1]) - policy.top_p > margin, f"{where}: top-p cut within {margin:.1e}"
    assert policy.top_p - float(before[-1]) > margin, f"{where}: top-p cut within {margin:.1e}"
    point = uniform * float(cumulative[-1])
    edges = cumulative[:-1]
    if edges.numel():
        assert float((edges - point).abs().min()) > margin, f"{where}: drawn point within {margin:.1e} of an edge"


def frames_of(model):
    return [synthetic_frame(model.spec, i, stamp_ns=1_700_000_000_000_000_000 + 50_000_000 * i) for i in range(FRAMES)]


def reference(model, frame, policy):
    return sequential_tokens(model, frame, CheckedDecoder(model, policy))


def clearing_seed(model, frames, base):
    """(the policy, each frame's reference tokens) for the first seed from base.seed on whose draws clear the
    rounding margins at every step of `frames` here (greedy: base as it is)."""
    for seed in range(base.seed, base.seed + (SEED_TRIES if base.sample else 1)):
        policy = replace(base, seed=seed)
        try:
            return policy, [reference(model, f, policy) for f in frames]
        except AssertionError:
            if not base.sample:
                raise
    pytest.fail(f"no seed in {base.seed}..{base.seed + SEED_TRIES - 1} clears the rounding margins of these frames")


def truncated(tokens, stops):
    """Tokens up to and including the first stop id."""
    hits = [i for i, t in enumerate(tokens) if t in stops]
    return tokens[:hits[0] + 1] if hits else tokens


def pick_stops(free, max_tokens):
    """One or two stop ids that end the frames at several different steps, leaving at least one frame to run
    to max_tokens; () when no choice does (every frame decodes the same)."""
    seen = sorted({t for tokens in free for t in tokens})
    for stops in [(t,) for t in seen] + [(a, b) for a in seen for b in seen if a < b]:
        lengths = [len(truncated(tokens, stops)) for tokens in free]
        early = {n for n in lengths if n < max_tokens}
        if len(early) >= 2 and max_tokens in lengths:
            return stops
    return ()


@pytest.fixture(scope="module")
def models():
    return {name: load_vla(preset=name) for name in FAMILIES}


@pytest.fixture(scope="module")
def cases(models):
    """(family, policy) -> (frames, the policy with its stop ids, seq -> the reference's tokens), made once."""
    made = {}

    def case(name, kind):
        if (name, kind) not in made:
            model = models[name]
            frames = frames_of(model)
            base, free = clearing_seed(model, frames, DecodePolicy(**POLICIES[kind]))
            policy = replace(base, stop_ids=pick_stops(free, TokenDecoder(model, base).max_tokens))
            expected = {f.seq: reference(model, f, policy) for f in frames}
            assert expected == {f.seq: truncated(t, policy.stop_ids) for f, t in zip(frames, free)}
            made[name, kind] = frames, policy, expected
        return made[name, kind]
    return case


@pytest.mark.parametrize("kind", POLICIES)
@pytest.mark.parametrize("name", FAMILIES)
def test_the_packed_split_decodes_the_reference_tokens_at_every_p(models, cases, name, kind):
    model = models[name]
    frames, policy, expected = cases(name, kind)
    decoder = TokenDecoder(model, policy)
    lengths = [len(t) for t in expected.values()]
    if kind != "greedy-full":   # greedy over the tied embeddings repeats the prompt's last token: nothing to stop
        assert len({n for n in lengths if n < decoder.max_tokens}) >= 2 and decoder.max_tokens in lengths
    for pack in (1, 3):
        for partition in [None, *range(model.num_blocks + 1)] if pack == 3 else [2]:
            results = ActionFlow(model, pack, partition=partition, decode=policy).run(frames)
            assert {r.seq: r.tokens for r in results} == expected, (kind, pack, partition)
            for r in results:
                assert r.token_count == len(expected[r.seq]) and r.ended == decoder.ended(r.tokens)
                whole = policy.vocabulary == "actions" and r.token_count == model.action_tokenizer.tokens_per_frame
                assert (r.trajectory is not None) == whole


def test_sampling_draws_other_tokens_than_greedy_and_depends_on_the_seed_and_stamp(models, cases):
    model = models["tiny-act"]
    _, _, greedy = cases("tiny-act", "greedy-actions")
    frames, _, sampled = cases("tiny-act", "sampled-actions")
    assert sum(greedy[s][0] != sampled[s][0] for s in greedy) >= 3
    policy = DecodePolicy(**POLICIES["sampled-actions"])
    other_seed = sequential_tokens(model, frames[0], replace(policy, seed=SEED + 1))
    moved = replace(frames[0], stamp_ns=frames[0].stamp_ns + 1)
    assert sequential_tokens(model, frames[0], policy) != other_seed
    assert sequential_tokens(model, frames[0], policy) != sequential_tokens(model, moved, policy)
    assert step_uniform(SEED, 7, 3) == step_uniform(SEED, 7, 3) != step_uniform(SEED, 7, 4)
    assert 0 <= step_seed(2 ** 63 - 1, 2 ** 64 + 5, 10 ** 6) < 2 ** 63


def test_a_frame_that_stops_leaves_the_pack_and_its_slot_takes_the_next_prefill(models, cases):
    model = models["tiny-act"]
    frames, policy, expected = cases("tiny-act", "greedy-actions")
    flow = ActionFlow(model, 3, partition=2, decode=policy)
    for frame in frames:
        flow.submit(frame)
    order, freed, sizes = [], False, []
    while flow.busy:
        taken = flow.prefix.ring.taken
        done = flow.step()
        if freed:   # a slot freed by the previous step took the next waiting frame's prefill in this one
            assert flow.prefix.ring.taken == taken + 1
        order += [r.seq for r in done]
        for r in done:
            assert r.seq not in flow.flight and r.tokens == expected[r.seq]
        assert len(flow.flight) + len(flow.prefix.ring.free) == 3      # a finished frame's slot is free at once
        freed, sizes = bool(done and flow.waiting), sizes + [len(flow.flight)]
    assert order != sorted(order)   # a frame that stopped early passed one submitted before it
    assert flow.steps < sum(len(t) for t in expected.values())   # packed: fewer forwards than tokens
    assert flow.prefix.ring.taken == FRAMES and len(flow.prefix.ring.free) == 3


@pytest.mark.parametrize("kind", ["sampled-actions", "sampled-full"])
@pytest.mark.parametrize("name", FAMILIES)
def test_servers_sharing_bytes_decode_the_reference_tokens(models, cases, name, kind):
    model = models[name]
    frames, policy, expected = cases(name, kind)
    for pack, groups, partition in ((2, 2, 1), (3, 1, 3)):
        prefix = PackedPrefixServer(model, pack, groups, partition, policy="lossless", capacity=16, decode=policy)
        done, _ = drive(prefix, PackedSuffixServer(model, decode=policy), frames)
        assert {r.seq: r.tokens for r in done} == expected, (pack, groups, partition)
        assert not prefix.take_lost() and all(len(g.flight) == 0 for g in prefix.groups)


def test_the_reference_results_carry_tokens_count_and_why_they_ended(models, cases):
    model = models["tiny-act"]
    frames, policy, expected = cases("tiny-act", "sampled-full")
    for r in sequential_results(model, frames, policy):
        info = r.diagnostics()
        assert info["tokens"] == len(expected[r.seq]) and info["token_ids"].split() == [str(t) for t in r.tokens]
        assert info["decode_ended"] in ("stop", "max_tokens") and r.trajectory is None


@pytest.mark.parametrize("values,message", [
    (dict(temperature=0), "temperature=0: expected a number in \\(0, 100\\]"),
    (dict(temperature=float("nan")), "temperature=nan"),
    (dict(top_p=0.0), "top_p=0.0: expected a number in \\(0, 1\\]"),
    (dict(top_p=1.5), "top_p=1.5"),
    (dict(max_tokens=-1), "max_tokens=-1: expected an integer in \\[0, 1024\\]"),
    (dict(max_tokens=5000), "max_tokens=5000"),
    (dict(seed=-3), "seed=-3"),
    (dict(vocabulary="text"), "vocabulary='text'"),
    (dict(sample="yes"), "sample='yes'"),
    (dict(stop_ids=(-2,)), "stop_ids"),
])
def test_a_policy_out_of_range_is_refused_with_what_and_why(values, message):
    with pytest.raises(ConfigError, match=message):
        DecodePolicy(**values)


def test_a_policy_that_does_not_fit_the_model_is_refused_when_bound(models):
    model = models["tiny-act"]
    with pytest.raises(ConfigError, match="stop_ids \\[3\\]: outside the action vocabulary \\[264, 520\\)"):
        ActionFlow(model, 2, decode=DecodePolicy(stop_ids=(3,)))
    with pytest.raises(ConfigError, match="outside the full vocabulary \\[0, 520\\)"):
        PackedSuffixServer(model, decode=DecodePolicy(vocabulary="full", stop_ids=(520,)))
    with pytest.raises(ConfigError, match="waypoint head"):
        TokenDecoder(load_vla(preset="tiny"), DecodePolicy())
    flow = ActionFlow(model, 2, decode=DecodePolicy(vocabulary="full", max_tokens=20))
    assert flow.prefix.ring.slot_tokens == model.sequence_length + 19 and flow.tokens_per_frame == 20


def test_one_token_frames_end_at_their_prefill(models, cases):
    model = models["tiny-act"]
    frames, _, greedy = cases("tiny-act", "greedy-actions")
    results = ActionFlow(model, 3, partition=1, decode=DecodePolicy(max_tokens=1)).run(frames)
    assert {r.seq: r.tokens for r in results} == {s: t[:1] for s, t in greedy.items()}
    assert {r.ended for r in results} == {"max_tokens"} and all(r.trajectory is None for r in results)


def test_the_policy_reads_node_parameters():
    params = {"decode.vocabulary": "full", "decode.sample": True, "decode.temperature": 0.8, "decode.top_p": 0.95,
              "decode.seed": 11, "decode.stop_ids": [-1], "decode.max_tokens": 64}
    policy = DecodePolicy.from_params(params)
    assert policy == DecodePolicy("full", True, 0.8, 0.95, 11, (), 64)
    assert DecodePolicy.from_params({**params, "decode.stop_ids": [7, 9]}).stop_ids == (7, 9)


def test_the_shipped_yaml_decodes_greedy_actions_and_a_bad_value_is_refused_by_name(tmp_path):
    import yaml
    from hybrid_vla_ros.ros.launch_support.bringup import config_dir
    from hybrid_vla_ros.ros.params import load_node_params
    for node in ("hybrid_vla_prefix", "hybrid_vla_suffix"):
        shipped = config_dir() / f"{node}.param.yaml"
        assert DecodePolicy.from_params(load_node_params(shipped, node)) == DecodePolicy()
        data = yaml.safe_load(shipped.read_text())
        data["/**"]["ros__parameters"]["decode"]["top_p"] = 0.0
        bad = tmp_path / f"{node}.param.yaml"
        bad.write_text(yaml.safe_dump(data))
        with pytest.raises(ConfigError, match="'decode.top_p'=0.0: below the minimum 0.01"):
            load_node_params(bad, node)


@pytest.mark.slow
def test_the_graph_decodes_sampled_reasoning_tokens_with_stops_as_the_reference(domain, models):
    """Both nodes with the same decode.* parameters: the suffix picks each token (its seeded draw), the prefix
    ends each frame at its stop id or max_tokens; each frame's tokens arrive in ~/debug/trajectory_info."""
    from ros_harness import Harness, wait_until
    from hybrid_vla_ros.types import EgoState
    model = models["tiny-act"]
    graph_frames = [replace(synthetic_frame(model.spec, i, stamp_ns=(i + 1) * 100_000_000), ego=EgoState())
                    for i in range(FRAMES)]   # as the graph sees them (no kinematic state: a still ego)
    base, free = clearing_seed(model, graph_frames, DecodePolicy(**{**POLICIES["sampled-full"], "seed": 1}))
    policy = replace(base, stop_ids=pick_stops(free, base.max_tokens))
    expected = {f.seq: truncated(t, policy.stop_ids) for f, t in zip(graph_frames, free)}
    params = {"decode.vocabulary": "full", "decode.sample": True, "decode.temperature": policy.temperature,
              "decode.top_p": policy.top_p, "decode.seed": policy.seed, "decode.stop_ids": list(policy.stop_ids),
              "decode.max_tokens": policy.max_tokens, "model.preset": "tiny-act", "pack": 3, "pack_groups": 1}
    h = Harness({"hybrid_vla_prefix": {**params, "token_timeout_s": 5.0}, "hybrid_vla_suffix": params,
                 "hybrid_vla_scheduler": {"model.preset": "tiny-act"}})
    try:
        for frame in graph_frames:
            h.publish_images(frame.images, frame.stamp_ns)
            h.spin(0.01)
        def tokens():
            return {int(i["seq"]): [int(t) for t in i["token_ids"].split()] for i in h.infos if "token_ids" in i}
        assert wait_until(lambda: len(tokens()) == FRAMES, h.spin, 60), (h.infos, h.prefix.health.drop_reasons)
        assert tokens() == expected and not h.paths   # reasoning tokens make no trajectory
        assert not h.prefix.health.rejected and not h.suffix.health.rejected
    finally:
        h.close()
