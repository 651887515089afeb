"""Streaming KV (issue 53, Deliver 3; engine/kv_stream/): past frames' keys and values kept across windows, per side
of the cut. Opt-in and approximate: what is exact is checked exact (a window with nothing kept is the full
recompute; a window met again, every slot kept, equals it; kept keys turned to a new position equal keys computed
there); what is not is checked to be what it claims (the same plans at every cut, a move of the cut rebuilding,
a lost state recomputed on the suffix, a bad segment table refused)."""

import numpy as np
import pytest
import torch

from hybrid_vla_ros.engine.handover import codec
from hybrid_vla_ros.engine.kv_stream.layout import rerotate
from hybrid_vla_ros.engine.stages import PrefixStage, SuffixStage
from hybrid_vla_ros.errors import ConfigError, InputError
from hybrid_vla_ros.model.inputs import synthetic_frame
from hybrid_vla_ros.model.presets import get_preset
from hybrid_vla_ros.model.vla import build_model

MODEL = build_model(get_preset("drive-history"))
L = MODEL.num_blocks
FRAMES = [synthetic_frame(MODEL.spec, seq) for seq in range(8)]


def full_plan(frame, p=2):
    return SuffixStage(MODEL, p).run(PrefixStage(MODEL, p).run(frame)).points


def streamed(p, frames=FRAMES, **options):
    prefix, suffix = PrefixStage(MODEL, p, kv_stream=True, **options), SuffixStage(MODEL, p)
    return prefix, suffix, [suffix.run(prefix.run(f)).points for f in frames]


@pytest.mark.parametrize("p", range(L + 1))
def test_a_window_with_nothing_kept_is_the_full_recompute_at_every_cut(p):
    for frame in (FRAMES[0], FRAMES[5]):          # a cold start (one frame in every slot) and a full window
        prefix = PrefixStage(MODEL, p, kv_stream=True)
        state = prefix.run(frame)
        assert state.kv_segments[1].tolist() == [0] * 4
        assert np.array_equal(SuffixStage(MODEL, p).run(state).points, full_plan(frame, p))


def test_a_window_met_again_keeps_every_slot_and_equals_the_full_one():
    prefix, suffix = PrefixStage(MODEL, 2, kv_stream=True), SuffixStage(MODEL, 2)
    suffix.run(prefix.run(FRAMES[6]))
    state = prefix.run(FRAMES[6])                  # the same images at the same positions: every segment kept
    assert state.kv_segments[1].tolist() == [1] * 4
    assert np.allclose(suffix.run(state).points, full_plan(FRAMES[6]), atol=1e-5)
    assert suffix.stream.stats()["kept_slots"] == 4 and suffix.stream.stats()["recomputed_slots"] == 0


def test_kept_keys_turned_to_a_new_position_equal_keys_rotated_there():
    from transformers.models.qwen2_vl.modeling_qwen2_vl import apply_rotary_pos_emb
    decoder, torch_gen = MODEL.decoder, torch.Generator().manual_seed(0)
    key = torch.randn(1, 2, 16, 32, generator=torch_gen)                              # (1, kv_heads, n, D)
    at = torch.randint(0, 50, (3, 1, 16), generator=torch_gen)                        # M-RoPE: t, h, w apart
    to = at + torch.tensor([7, -3, 12]).view(3, 1, 1)

    def rotated(positions):
        cos, sin = decoder.rotary_emb(key, positions)
        return apply_rotary_pos_emb(key, key, cos, sin)[1]
    assert torch.allclose(rerotate(decoder, rotated(at), at, to), rotated(to), atol=1e-5)
    assert torch.allclose(rerotate(decoder, rotated(at), at, at), rotated(at), atol=1e-6)


def test_a_kept_frame_reaches_block_0_at_its_present_position(monkeypatch):
    """Block 0's keys of an image depend on the image alone (its embedding) and its position: the kept keys block 0
    reads for frame 4, moved from the newest slot (window 4) to the third (window 6), equal the keys a window
    computed whole gives it there."""
    from hybrid_vla_ros.engine.kv_stream import window
    seen = []
    update = window.LayoutCache.update

    def recording(self, key, value, layer_idx, *args, **kwargs):
        out = update(self, key, value, layer_idx, *args, **kwargs)
        if layer_idx == 0:
            seen.append(out[0])
        return out
    monkeypatch.setattr(window.LayoutCache, "update", recording)
    prefix = PrefixStage(MODEL, 2, kv_stream=True)
    prefix.run(FRAMES[4])                                   # window [0, 0, 2, 4]: frame 4 computed in slot 3
    state = prefix.run(FRAMES[6])                           # window [0, 2, 4, 6]: frames 0, 2, 4 kept
    assert state.kv_segments[1].tolist() == [1, 1, 1, 0]
    whole = PrefixStage(MODEL, 2, kv_stream=True)
    whole.run(FRAMES[6])                                    # nothing kept: frame 4 computed in slot 2
    key4 = FRAMES[6].image_keys[2]
    n = 16
    kept_keys = seen[1][..., 2 * n:3 * n, :]                # window 6's kept keys: slots 0, 1, 2 in order
    assert torch.allclose(kept_keys, whole.stream.store.get(key4).kv[0][0], atol=1e-5)
    assert not torch.allclose(kept_keys, prefix.stream.store.get(key4).kv[0][0], atol=1e-3)   # not where it was


def test_the_stores_stay_bounded_and_a_bf16_suffix_streams():
    from hybrid_vla_ros.engine.placement import Placement
    prefix, suffix, plans = streamed(2, [synthetic_frame(MODEL.spec, seq) for seq in range(20)])
    capacity = MODEL.spec.image_slots * 2
    assert len(prefix.stream.store.kept) <= capacity and len(suffix.stream.store.kept) <= capacity
    placement = Placement.create("cpu", "fp32", "bf16")
    prefix, suffix = PrefixStage(MODEL, 2, placement, kv_stream=True), SuffixStage(MODEL, 2, placement)
    bf16 = [suffix.run(prefix.run(f)).points for f in FRAMES]
    assert suffix.stream.stats()["kept_slots"] > 0 and max(np.abs(a - b).max() for a, b in zip(bf16, plans)) < 0.5


def test_past_frames_are_kept_and_each_side_keeps_its_own_blocks_with_the_same_plans_at_every_cut():
    plans = {}
    for p in range(L + 1):
        prefix, suffix, plans[p] = streamed(p)
        assert prefix.stream.stats()["kept_slots"] > 0 and suffix.stream.stats()["recomputed_slots"] == 0
        assert suffix.stream.stats()["kept_slots"] == prefix.stream.stats()["kept_slots"]
        for segment in prefix.stream.store.kept.values():
            assert sorted(segment.kv) == list(range(p)) and segment.rows.shape[1] == 16
        for segment in suffix.stream.store.kept.values():
            assert sorted(segment.kv) == list(range(p, L)) and segment.rows is None
    for p in range(1, L + 1):
        assert all(np.allclose(a, b, atol=1e-5) for a, b in zip(plans[0], plans[p]))
    differs = max(float(np.abs(a - b).max()) for a, b in zip(plans[2], map(full_plan, FRAMES)))
    assert differs > 1e-4          # an approximation: kept frames carry their own older context


def test_a_move_of_the_cut_rebuilds_both_sides_from_a_whole_window():
    prefix, suffix = PrefixStage(MODEL, 2, zone=(1, 3), kv_stream=True), SuffixStage(MODEL, 2, zone=(1, 3))
    for frame in FRAMES[:4]:
        suffix.run(prefix.run(frame))
    prefix.set_partition(3)
    state = prefix.run(FRAMES[4])
    assert state.kv_segments[1].tolist() == [0] * 4 and state.partition == 3
    assert np.array_equal(suffix.run(state).points, full_plan(FRAMES[4], 3))
    assert prefix.stream.store.rebuilds == 1 and suffix.stream.store.rebuilds == 1


def test_a_state_lost_on_the_way_is_recomputed_on_the_suffix():
    prefix, suffix, _ = streamed(2, FRAMES[:5])
    prefix.run(FRAMES[5])                          # never reaches the suffix
    state = prefix.run(FRAMES[7])                  # keeps frame 5's segment, which the suffix never computed
    points = suffix.run(state).points
    assert suffix.stream.stats()["recomputed_slots"] >= 1 and np.isfinite(points).all()
    # exactly: a window whose every slot the prefix kept from a whole one, to a suffix that holds none of them, is
    # computed there from the state's rows as the full recompute computes it
    prefix = PrefixStage(MODEL, 2, kv_stream=True)
    prefix.run(FRAMES[6])
    state = prefix.run(FRAMES[6])
    fresh = SuffixStage(MODEL, 2)
    assert np.allclose(fresh.run(state).points, full_plan(FRAMES[6]), atol=1e-5)
    assert fresh.stream.stats()["recomputed_slots"] == 4


def test_a_window_whose_plan_overflows_keeps_nothing_on_the_suffix():
    prefix, suffix, _ = streamed(2, FRAMES[:3])
    held = (len(prefix.stream.store.kept), len(suffix.stream.store.kept))
    norm, suffix.norm = suffix.norm, lambda rows: rows * float("nan")   # an overflow after the blocks
    with pytest.raises(InputError, match="trajectory of frame 3"):
        suffix.run(prefix.run(FRAMES[3]))
    suffix.norm = norm
    assert len(suffix.stream.store.kept) == held[1]
    assert np.isfinite(suffix.run(prefix.run(FRAMES[5])).points).all()


def test_refreshing_every_window_is_the_full_recompute():
    _, _, plans = streamed(2, kv_refresh_windows=1)
    assert all(np.array_equal(a, full_plan(f)) for a, f in zip(plans, FRAMES))
    with pytest.raises(ConfigError, match="refresh"):
        PrefixStage(MODEL, 2, kv_stream=True, kv_refresh_windows=-1)


def test_a_bad_segment_table_is_refused_with_what_and_the_next_state_is_served():
    prefix, suffix, _ = streamed(2, FRAMES[:3])
    state = prefix.run(FRAMES[3])
    for bad, what in ((state.kv_segments[:, :3], "kv_segments"), (state.kv_segments * 0, "serials"),
                      (state.kv_segments.float(), "int64")):
        with pytest.raises(InputError, match=what):
            suffix.run(codec.decode(codec.encode(type(state)(**{**state.__dict__, "kv_segments": bad}))))
    assert np.isfinite(suffix.run(codec.decode(codec.encode(state))).points).all()
    one_frame = SuffixStage(build_model(get_preset("drive")), 2)     # a model that keeps no past frames
    with pytest.raises(InputError, match="kv_segments"):
        one_frame.run(state)


def test_streaming_is_refused_where_it_cannot_serve():
    with pytest.raises(ConfigError, match="one frame a camera"):
        PrefixStage(build_model(get_preset("drive")), 2, kv_stream=True)
    with pytest.raises(ConfigError, match="chunked prefill"):
        list(PrefixStage(MODEL, 2, kv_stream=True).run_chunks(FRAMES[3], chunks=2))


@pytest.mark.slow
def test_the_graph_streams_over_dds_as_the_stages_do_in_process(domain, tmp_path):
    """The sample drive's camera sets through the three nodes (real DDS on loopback), the prefix streaming, the state
    inline on the topic (kv_segments as bytes): each plan is the in-process streaming stages' on the same windows
    (the full recompute's differ by ~0.1 m: equal plans mean the graph streamed)."""
    from hybrid_vla_ros.ros.bags.drives import START_NS
    from hybrid_vla_ros.ros.demo import drive_graph, write_sample_drive
    from hybrid_vla_ros.ros.launch_support.bringup import graph_params
    from hybrid_vla_ros.types import EgoState
    from test_families_graph import SEED, assert_matches, graph_overrides
    frames, cameras = 10, ["/test/cam0/image"]
    overrides = graph_overrides("drive-history", cameras)
    for node in ("hybrid_vla_prefix", "hybrid_vla_suffix", "hybrid_vla_scheduler"):
        overrides[node].update(dynamic_zone_min=2, dynamic_zone_max=2)   # the cut stays: a move would rebuild
    overrides["hybrid_vla_prefix"].update(kv_stream=True, boundary_transport="inline")
    params = graph_params(overrides=overrides)
    prefix, suffix, expected = PrefixStage(MODEL, 2, kv_stream=True), SuffixStage(MODEL, 2), {}
    for seq in range(frames):
        frame = synthetic_frame(MODEL.spec, seq, seed=SEED)
        frame.stamp_ns, frame.ego = START_NS + int(seq * 1e8), EgoState()
        frame.instruction = params["hybrid_vla_prefix"]["instruction"]
        expected[frame.stamp_ns] = suffix.run(prefix.run(frame)).points[:, :2]
    bag = write_sample_drive(tmp_path / "drive", "drive-history", cameras, frames=frames, compressed=False, seed=SEED)
    summary, trajectories = drive_graph(bag, params, settle_s=20)
    assert summary["trajectories"] == frames, summary
    assert_matches(trajectories, expected, "streaming over DDS")
    assert prefix.stream.stats()["kept_slots"] > 0 and suffix.stream.stats()["recomputed_slots"] == 0


def test_the_shipped_history_model_streams_in_the_closed_loop_keeping_its_past_frames():
    """A streaming policy drives (the shipped drive-history, instant timing: a window every camera tick, so from the
    4th on 3 of its 4 frames were computed by earlier windows), and a new drive forgets the last one's segments."""
    from hybrid_vla_ros.learn.closed_loop.model_policy import ModelPolicy
    from hybrid_vla_ros.model.load import load_vla
    from hybrid_vla_ros.sim.loop import CAMERA_PERIOD_S, Drive
    from hybrid_vla_ros.sim.timing import instant
    from hybrid_vla_ros.sim.world import random_scenario
    policy = ModelPolicy(load_vla(checkpoint="builtin:drive-history"), kv_stream=True)
    rec = Drive(random_scenario(0), policy, instant(CAMERA_PERIOD_S)).run(max_time_s=2.0)
    kept, computed = policy.kv_slots()
    assert rec.frames >= 15 and np.isfinite(np.array(rec.rows)[:, :6]).all()
    assert kept >= 3 * (rec.frames - 8) and policy.suffix.stream.stats()["recomputed_slots"] == 0
    policy.start_drive(instant(CAMERA_PERIOD_S))          # a new drive: its keys may repeat the last one's
    assert not policy.prefix.stream.store.kept and not policy.suffix.stream.store.kept


def test_compare_with_pairs_two_runs_on_the_same_scenarios_and_refuses_others():
    from hybrid_vla_ros.learn.closed_loop.evaluate import compared_with
    routes = lambda scores: {"p/native": [{"driving_score": s} for s in scores]}   # noqa: E731
    run = {"seeds": [0, 1, 2], "lights": False, "routes": routes([50.0, 60.0, 70.0])}
    other = {"seeds": [0, 1, 2], "lights": False, "policy": "full", "routes": routes([40.0, 50.0, 60.0])}
    d = compared_with(run, other, "other.json")["rows"]["p/native"]
    assert d["mean"] == pytest.approx(10.0) and d["verdict"] == "better"
    with pytest.raises(ConfigError, match="same"):
        compared_with(run, {**other, "seeds": [3, 4, 5]}, "other.json")


@pytest.mark.slow
def test_the_nodes_say_per_window_what_was_kept_computed_and_recomputed(domain):
    """Arriving camera sets (real DDS on loopback), the prefix streaming: its frame_info counts each window's kept and
    computed slots (a cold start computes its 4; from frame 6 on 3 of 4 are kept, with stride 2 the 4th new), the
    suffix's trajectory_info the slots it had to recompute (none: it received every state)."""
    from hybrid_vla_ros.model.inputs import synthetic_camera_frame
    from ros_harness import Harness, wait_until
    cut = {"model.preset": "drive-history"}
    harness = Harness(overrides={"hybrid_vla_prefix": {**cut, "camera_topics": ["/test/cam0/image"], "kv_stream": True},
                                 "hybrid_vla_suffix": cut, "hybrid_vla_scheduler": cut},
                      cameras=["/test/cam0/image"])
    try:
        for seq in range(8):
            frame = synthetic_camera_frame(MODEL.spec, seq, stamp_ns=(seq + 1) * 100_000_000)
            before = len(harness.infos)
            harness.publish_images(frame.images, frame.stamp_ns)
            assert wait_until(lambda: len(harness.infos) > before, harness.spin), f"no trajectory for frame {seq}"
        assert wait_until(lambda: len(harness.frame_infos) >= 8, harness.spin)
        counts = [(int(i["kv_slots_kept"]), int(i["kv_slots_computed"])) for i in harness.frame_infos[:8]]
        assert counts[0] == (0, 4) and counts[6:] == [(3, 1)] * 2, counts
        assert {i["kv_slots_recomputed_total"] for i in harness.infos} == {"0"}
    finally:
        harness.close()
