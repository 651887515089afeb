"""Alpamayo 1 (R1) and 1.5 split at every cut (engine/expert_split) equal the unsplit reference exactly: the same
sampled reasoning and a trajectory difference of 0.0, with and without 1.5's guidance, for two seeds; the
crossings are the ones the design names, in number and kind, and survive serialisation; bad cuts and non-finite
boundary states are refused with the reason."""

import dataclasses
import json

import pytest
import torch

from published_alpamayo import SPECIAL, release_inputs, write_release
from hybrid_vla_ros.engine.expert_split import AlpamayoSplit, run_split
from hybrid_vla_ros.engine.expert_split.crossings import FORWARD as FORWARD_CROSSINGS
from hybrid_vla_ros.engine.expert_split.crossings import (ActionState, ExpertState, PromptState, TokenChoice,
                                                         TokensState, code_of, crossing_parts, from_entry,
                                                         roundtrip)
from hybrid_vla_ros.engine.handover import message as hvlm
from hybrid_vla_ros.engine.expert_split.runner import BACK, FORWARD
from hybrid_vla_ros.errors import ConfigError, InputError, NonFiniteError
from hybrid_vla_ros.model.plugins import alpamayo
from hybrid_vla_ros.model.plugins.alpamayo.config import parse

SHORT = alpamayo.Sampling(max_new_tokens=6)
SEEDS = (7, 11)
BLOCKS = 4                          # the fixtures' VLM (and expert) layers
STEPS = 10                          # the releases' Euler steps (diffusion_cfg)


@pytest.fixture(scope="module")
def releases(tmp_path_factory):
    root = tmp_path_factory.mktemp("alpamayo_split")
    return {"r1": write_release(root / "r1", "alpamayo_r1"), "1.5": write_release(root / "r15", "alpamayo1_5", seed=3)}


@pytest.fixture(scope="module")
def r1(releases):
    return alpamayo.load_release(releases["r1"])


@pytest.fixture(scope="module")
def r15(releases):
    return alpamayo.load_release(releases["1.5"])


@pytest.fixture(scope="module")
def shallow_expert(releases):
    """An expert with 2 layers under a 4-block VLM (expert_cfg may set fewer layers), seeded weights."""
    raw = json.loads((releases["r1"] / "config.json").read_text())
    raw["expert_cfg"] = {**raw["expert_cfg"], "num_hidden_layers": 2}
    torch.manual_seed(5)
    return alpamayo.build(parse(raw, releases["r1"]), meta=False).eval()


def inputs(**kw):
    return alpamayo.AlpamayoInputs(**release_inputs(**kw))


def assert_exact(split, reference):
    assert split.result.tokens == reference.tokens and split.result.stopped == reference.stopped
    assert torch.equal(split.result.xyz, reference.xyz), float((split.result.xyz - reference.xyz).abs().max())
    assert torch.equal(split.result.rotation, reference.rotation) and torch.equal(split.result.actions,
                                                                                   reference.actions)


def assert_counts(split, steps=STEPS, guidance=False):
    tokens = split.result.tokens
    fed = len(tokens) if split.result.stopped else len(tokens) - 1
    unguided = (2 if fed else 1) if guidance else 0
    assert split.count(FORWARD) == 1 + fed + steps + unguided
    assert split.count(BACK) == len(tokens) + steps
    assert split.count(FORWARD, "PromptState") == 1 + (1 if guidance else 0)
    assert split.count(FORWARD, "ExpertState") == split.count(BACK, "ActionState") == steps
    assert split.count(BACK, "TokenChoice") == len(tokens)
    prefix, suffix = split.timings["prefix"], split.timings["suffix"]
    assert len(prefix["prefill"]) == len(suffix["prefill"]) == 1
    assert len(prefix.get("decode", [])) == len(suffix.get("decode", [])) == fed
    assert len(prefix["expert"]) == len(suffix["expert"]) == steps
    assert len(prefix.get("unguided", [])) == len(suffix.get("unguided", [])) == unguided


@pytest.mark.parametrize("seed", SEEDS)
def test_r1_split_at_every_cut_equals_the_reference_exactly(r1, seed):
    frame = inputs()
    reference = alpamayo.run_reference(r1, frame, seed=seed, sampling=SHORT)
    for p in range(BLOCKS + 1):
        split = run_split(r1, frame, p, seed=seed, sampling=SHORT)
        assert split.partition == p
        assert_exact(split, reference)
        assert_counts(split)


@pytest.mark.parametrize("seed", SEEDS)
@pytest.mark.parametrize("guidance", [False, True])
def test_1_5_split_at_every_cut_equals_the_reference_exactly(r15, seed, guidance):
    frame, flow = inputs(route=True), alpamayo.FlowSettings(guidance_weight=3.0)
    reference = alpamayo.run_reference(r15, frame, seed=seed, sampling=SHORT, flow=flow, guidance=guidance)
    for p in range(BLOCKS + 1):
        split = run_split(r15, frame, p, seed=seed, sampling=SHORT, flow=flow, guidance=guidance)
        assert_exact(split, reference)
        assert_counts(split, guidance=guidance)


def test_every_crossing_survives_serialisation_and_the_result_stays_exact(r15):
    frame, flow = inputs(route=True), alpamayo.FlowSettings(steps=4, guidance_weight=2.0)
    reference = alpamayo.run_reference(r15, frame, seed=3, sampling=SHORT, flow=flow, guidance=True)
    carried = []

    def transport(state):
        carried.append(state)
        return roundtrip(state)

    for p in (0, 2, BLOCKS):
        carried.clear()
        split = run_split(r15, frame, p, seed=3, sampling=SHORT, flow=flow, guidance=True, transport=transport)
        assert_exact(split, reference)
        assert_counts(split, steps=4, guidance=True)
        assert len(carried) == len(split.crossings)
        assert {type(s) for s in carried} == {PromptState, TokensState, TokenChoice, ExpertState, ActionState}
        prompts = [s for s in carried if isinstance(s, PromptState)]
        # DeepStack (after VLM block 0 in the fixture) crosses only with a cut before it
        assert all((s.deepstack is not None) == (p == 0) for s in prompts)
        assert all(s.hidden.shape == (2, 16, 48) for s in carried if isinstance(s, ExpertState))   # both caches


def test_guidance_without_fed_reasoning_crosses_the_route_free_prompt_only(r15):
    one = alpamayo.Sampling(max_new_tokens=1)                   # one token, never fed
    frame, flow = inputs(route=True), alpamayo.FlowSettings(steps=3, guidance_weight=2.0)
    reference = alpamayo.run_reference(r15, frame, seed=4, sampling=one, flow=flow, guidance=True)
    for p in (0, 3):
        split = run_split(r15, frame, p, seed=4, sampling=one, flow=flow, guidance=True)
        assert_exact(split, reference)
        assert_counts(split, steps=3, guidance=True)              # 1 + 0 + 3 + 1 forward, 1 + 3 back


def test_a_shallower_expert_splits_exactly_at_every_cut(shallow_expert):
    frame = inputs()
    reference = alpamayo.run_reference(shallow_expert, frame, seed=1, sampling=SHORT)
    for p in range(BLOCKS + 1):
        assert_exact(run_split(shallow_expert, frame, p, seed=1, sampling=SHORT), reference)


def test_a_stopped_decode_feeds_the_stop_token_and_counts_it(r1, monkeypatch):
    from hybrid_vla_ros.model.plugins.alpamayo import decode
    stop = SPECIAL["traj_future_start"]

    def scripted():
        script = iter([61, 62, stop, 63])
        monkeypatch.setattr(decode, "sample", lambda *a, **k: next(script))

    scripted()
    reference = alpamayo.run_reference(r1, inputs(), seed=0, sampling=SHORT)
    for p in (0, 2, BLOCKS):
        scripted()
        split = run_split(r1, inputs(), p, seed=0, sampling=SHORT)
        assert split.result.tokens == [61, 62, stop] and split.result.stopped
        assert_exact(split, reference)
        assert_counts(split)                                    # 3 fed: 1 + 3 + 10 forward, 3 + 10 back


def test_the_cut_changes_between_frames_and_is_checked(r1):
    runner = AlpamayoSplit(r1, 1)
    reference = alpamayo.run_reference(r1, inputs(), seed=2, sampling=SHORT)
    assert_exact(runner.run(inputs(), seed=2, sampling=SHORT), reference)
    runner.partition = 3
    assert runner.run(inputs(), seed=2, sampling=SHORT).partition == 3
    for bad in (-1, BLOCKS + 1, 1.5, True):
        with pytest.raises(ConfigError, match="partition"):
            runner.partition = bad
    with pytest.raises(ConfigError, match=r"outside 0\.\.4"):
        run_split(r1, inputs(), 5)
    assert runner.partition == 3


def _poison(kind, field="hidden"):
    def transport(state):
        if isinstance(state, kind):
            state = dataclasses.replace(state, **{field: getattr(state, field).clone()})
            getattr(state, field).view(-1)[0] = float("nan")
        return state
    return transport


@pytest.mark.parametrize("kind, field, match", [(PromptState, "hidden", "prompt boundary"),
                                                (TokensState, "hidden", "decode boundary"),
                                                (ExpertState, "hidden", "expert boundary"),
                                                (ActionState, "x", "action state")])
def test_a_non_finite_crossing_is_refused_with_the_reason(r1, kind, field, match):
    with pytest.raises(NonFiniteError, match=match) as caught:
        run_split(r1, inputs(), 2, sampling=SHORT, transport=_poison(kind, field))
    assert caught.value.reason == "nonfinite_boundary"


def test_a_damaged_or_foreign_payload_is_refused():
    state = TokensState(torch.zeros(1, 1, 64), torch.zeros(3, 1, 1, dtype=torch.long), 0)
    entry = hvlm.Entry(3, 5, crossing=code_of(state, FORWARD_CROSSINGS, "test"), parts=crossing_parts(state))
    data = hvlm.encode(hvlm.Message(hvlm.KINDS["alpamayo"], hvlm.FORWARD, [entry]))
    assert torch.equal(from_entry(hvlm.decode(data).entries[0], FORWARD_CROSSINGS, "test").hidden, state.hidden)
    with pytest.raises(InputError, match="trailing"):
        hvlm.decode(data + b"\0")
    with pytest.raises(hvlm.OldMessageError, match="Alpamayo crossing"):   # the format HVLM replaced
        hvlm.decode(b"HVLX" + data[4:])
    with pytest.raises(InputError, match="truncated"):
        hvlm.decode(data[:-3])
    with pytest.raises(InputError, match="cannot cross this way"):          # an answer's kind sent forward
        from_entry(hvlm.Entry(3, 5, crossing=4, parts={}), FORWARD_CROSSINGS, "test")
    with pytest.raises(InputError, match="no field for parts"):
        from_entry(dataclasses.replace(entry, parts={**entry.parts, "token": 1}), FORWARD_CROSSINGS, "test")


def test_timings_are_per_side_and_phase(r15):
    split = run_split(r15, inputs(route=True), 2, sampling=SHORT, guidance=True)
    for side in ("prefix", "suffix"):
        assert all(ms >= 0 for phase in split.timings[side].values() for ms in phase)
    assert set(split.timings["suffix"]) >= {"prefill", "decode", "unguided", "flow_setup", "expert", "trajectory"}
    assert split.result.timings["total_ms"] >= split.phase_ms("prefix", "expert")


def test_the_bench_times_native_and_split_per_phase_and_finds_them_equal(tmp_path, capsys):
    from hybrid_vla_ros.cli import main      # bench/expert_split/phases.py through its command
    path = tmp_path / "phases.json"
    code = main(["bench", "--preset", "alpamayo-bench", "--scenario", "split-phases", "--reasoning-tokens", "2",
                 "--flow-steps", "2", "--cuts", "1,2", "--repeat", "1", "--json", str(path)])   # DeepStack: 2, 1 left
    report = json.loads(path.read_text())
    assert code == 0 and report["exact"] and report["repeats"] == 1 and report["steps"] == 2
    assert set(report["rows"]) == {"native", "split p=1", "split p=2"}
    assert all(row["exact"] for row in report["rows"].values())
    assert all(row["prefill"] > 0 and row["expert"] > 0 for row in report["rows"].values())
    assert "expert/step" in capsys.readouterr().out.splitlines()[1]


def test_a_token_outside_the_vocabulary_is_refused_by_the_prefix(r1):
    def transport(state):
        return dataclasses.replace(state, token=10**6) if isinstance(state, TokenChoice) else state
    with pytest.raises(InputError, match="token back from the suffix"):
        run_split(r1, inputs(), 2, sampling=SHORT, transport=transport)
