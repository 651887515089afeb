"""ActionFlow (engine/actionflow/packing.py): packed prefill + decode over the KV ring gives, for every frame, exactly
the tokens of plain sequential decoding through transformers' own layers and cache (fp32), unsplit and split
at every p, for the Qwen2-VL (M-RoPE) and LLaVA families."""

import numpy as np
import pytest

from hybrid_vla_ros.engine.actionflow.packing import ActionFlow, run_alternating
from hybrid_vla_ros.engine.actionflow.kv_ring import check_ring
from hybrid_vla_ros.errors import ConfigError, InputError
from hybrid_vla_ros.model.inputs import synthetic_frame
from hybrid_vla_ros.model.load import load_vla

from greedy_reference import reference_tokens   # packed vs sequential: equal tokens, not bit-equal logits (why: its docstring)

FAMILIES = ("tiny-act", "tiny-llava-act", "tiny-qwen3vl-act")


@pytest.fixture(scope="module")
def act_models():
    return {name: load_vla(preset=name) for name in FAMILIES}


@pytest.fixture(scope="module")
def reference(act_models):
    """name -> (frames, seq -> sequential tokens)."""
    out = {}
    for name, model in act_models.items():
        frames = [synthetic_frame(model.spec, i) for i in range(10)]
        out[name] = frames, {f.seq: reference_tokens(model, f) for f in frames}
    return out


def test_action_tokenizer_round_trips_bins_and_refuses_what_is_not_an_action(act_models):
    tokenizer = act_models["tiny-act"].action_tokenizer
    steps = np.array([[1.0, -0.5], [2.0, 0.0], [9.0, -9.0], [0.01, 0.02]])
    ids = tokenizer.encode(steps)
    assert len(ids) == 8 and all(tokenizer.base <= i < tokenizer.base + tokenizer.bins for i in ids)
    back = tokenizer.decode(ids)
    bin_width = 2 * tokenizer.range_m / (tokenizer.bins - 1)
    assert np.abs(back - np.clip(steps, -4, 4)).max() <= bin_width / 2 + 1e-9  # out of range clips to the ends
    assert tokenizer.encode(back) == ids
    points = tokenizer.waypoints(ids)
    assert points.shape == (4, 5) and np.allclose(points[:, :2], back.cumsum(axis=0))
    with pytest.raises(InputError, match="expected 8 ids"):
        tokenizer.decode(ids[:-1])
    with pytest.raises(InputError, match="expected 8 ids"):
        tokenizer.decode([0] * 8)  # prompt ids, not action tokens


@pytest.mark.parametrize("name", FAMILIES)
def test_packed_decoding_gives_sequential_tokens_unsplit_and_split_at_every_p(act_models, reference, name):
    model = act_models[name]
    frames, ref = reference[name]
    assert len({tuple(t) for t in ref.values()}) > 1  # frames decode differently: a mixed-up row would show
    for pack in (1, 3, 8):
        for partition in [None, *range(model.num_blocks + 1)]:
            results = ActionFlow(model, pack, partition=partition).run(frames)
            assert sorted(r.seq for r in results) == [f.seq for f in frames]
            for r in results:
                assert r.tokens == ref[r.seq], (pack, partition, r.seq)
                assert r.stamp_ns == frames[r.seq].stamp_ns and r.trajectory.points.shape == (4, 5)


@pytest.mark.parametrize("name", FAMILIES)
def test_two_groups_alternating_across_the_split_give_sequential_tokens(act_models, reference, name):
    model = act_models[name]
    frames, ref = reference[name]
    for pack in (1, 4):
        results = run_alternating([ActionFlow(model, pack, partition=2), ActionFlow(model, pack, partition=2)], frames)
        assert {r.seq: r.tokens for r in results} == ref


def test_cold_start_emits_nothing_until_a_frame_has_all_its_tokens(act_models):
    model = act_models["tiny-act"]
    flow = ActionFlow(model, 4)
    for i in range(6):
        flow.submit(synthetic_frame(model.spec, i))
    per_step = [len(flow.step()) for _ in range(12)]
    tokens = flow.tokens_per_frame
    assert per_step[:tokens - 1] == [0] * (tokens - 1)  # output lags input by T - 1 steps
    assert per_step[tokens - 1] == 1 and sum(per_step) >= 4


def test_the_ring_wraps_many_times_without_drift(act_models):
    model = act_models["tiny-llava-act"]
    frames = [synthetic_frame(model.spec, i) for i in range(40)]
    flow = ActionFlow(model, 2, partition=1)
    results = flow.run(frames)
    assert flow.prefix.ring.taken == 40 and len(flow.prefix.ring.free) == 2  # 20 times round, all slots back
    for r in results[-3:] + results[:2]:
        assert r.tokens == reference_tokens(model, frames[r.seq])


def test_a_failed_frame_frees_its_slot_and_the_others_go_on(act_models, reference):
    model = act_models["tiny-act"]
    frames, ref = reference["tiny-act"]
    bad = synthetic_frame(model.spec, 99)
    bad.images = bad.images[:1]  # one camera of two: refused when it is embedded
    flow = ActionFlow(model, 3)
    for frame in [frames[0], bad, *frames[1:4]]:
        flow.submit(frame)
    results = []
    for _ in range(3):
        results += flow.step()
    victim = next(iter(flow.flight))
    flow.release(victim, "cancelled mid-decode")  # e.g. its deadline passed: the slot is free at once
    while flow.busy:
        results += flow.step()
    failed = {r.seq: r.error for r in flow.failed}
    assert "2 camera" in failed[99] or "expects 2" in failed[99]
    assert failed[victim] == "cancelled mid-decode"
    done = {r.seq: r.tokens for r in results}
    assert set(done) == {0, 1, 2, 3} - {victim} and all(done[s] == ref[s] for s in done)
    assert len(flow.prefix.ring.free) == 3


def test_pack_and_ring_size_are_validated_with_a_reason(act_models):
    model = act_models["tiny-act"]
    with pytest.raises(ConfigError, match="pack=0"):
        ActionFlow(model, 0)
    with pytest.raises(ConfigError, match="cannot hold 8 frames in flight"):
        ActionFlow(model, 8, ring_tokens=100)
    assert check_ring(4, 50, 200) == 4
    with pytest.raises(ConfigError, match="waypoint head"):
        ActionFlow(load_vla(preset="tiny"), 2)
    with pytest.raises(ConfigError, match="partition"):
        ActionFlow(model, 2, partition=9)


def test_bench_reports_each_pack_unsplit_and_split_with_exactness(act_models, tmp_path):
    from hybrid_vla_ros.bench.action_tokens.packs import plot_actionflow, run_actionflow_bench
    report = run_actionflow_bench(act_models["tiny-act"], [1, 2], frames=4, partition=2, progress=lambda t: None)
    assert report["exact"] is True and report["tokens_per_frame"] == 8
    for side in (report["pack"], report["split"]["pack"], report["split_threads"]["pack"]):
        for k in ("1", "2"):
            assert side[k]["frames_per_s"] > 0 and side[k]["latency_ms"]["p50"] > 0
            assert side[k]["speedup_vs_sequential"] == pytest.approx(side[k]["frames_per_s"] /
                                                                     report["sequential"]["frames_per_s"])
    assert 0 < report["split"]["pack"]["2"]["slower_stage_fraction"] <= 1.0
    plot_actionflow(report, tmp_path / "af.png")
    assert (tmp_path / "af.png").stat().st_size > 1000


def test_bench_cli_refuses_a_bad_pack_list():
    import subprocess
    import sys
    out = subprocess.run([sys.executable, "-m", "hybrid_vla_ros.cli", "bench", "--head", "action-tokens",
                          "--preset", "tiny-act", "--pack", "1,x"], capture_output=True, text=True, timeout=120)
    assert out.returncode == 2 and "--pack '1,x'" in out.stderr, out.stderr


@pytest.mark.slow
def test_bench_graph_entry_serves_every_frame_through_the_nodes_in_processes(act_models):
    from hybrid_vla_ros.bench.action_tokens.packs import run_packed_graph
    report = {"split": {"prefix_cores": [0], "suffix_cores": [1]}}
    entry = run_packed_graph(act_models["tiny-act"], 2, 2, 4, 2, report)
    assert entry["completed"] == 4 and entry["transport"] == "packed" and entry["frames_per_s"] > 0, entry
    assert entry["duplicate_infos"] == 0, entry
