"""An action-token model (ActionFlow) in the real graph over loopback DDS: the prefix node sends packed
steps, the suffix node answers each with the next tokens on /hybrid_vla/action_tokens and publishes every
frame's trajectory once its last token is out. Exact against sequential decoding; faults counted."""

import dataclasses

import numpy as np
import pytest
from diagnostic_msgs.msg import DiagnosticStatus
from std_msgs.msg import UInt8MultiArray

from hybrid_vla_ros.engine.actionflow.codec import encode_tokens
from hybrid_vla_ros.model.load import load_vla
from hybrid_vla_ros.types import EgoState
from hybrid_vla_ros.ros.topics import (ACTION_TOKENS_TOPIC, PARTITION_TOPIC, PREFIX_INFO_TOPIC, PREFIX_STEP_TOPIC,
                                      SUFFIX_STEP_TOPIC, TOKENS_QOS)

from ros_harness import Harness, wait_until
from greedy_reference import reference_tokens   # packed vs sequential: equal tokens, not bit-equal logits (why: its docstring)

pytestmark = pytest.mark.slow

ACT = {"model.preset": "tiny-act"}


def packed_harness(pack=2, groups=2, **scheduler):
    return Harness({"hybrid_vla_prefix": {**ACT, "pack": pack, "pack_groups": groups, "token_timeout_s": 5.0},
                    "hybrid_vla_suffix": {**ACT, "pack": pack, "pack_groups": groups}, "hybrid_vla_scheduler": {**ACT, **scheduler}},
                   activate_scheduler=bool(scheduler))


@pytest.fixture(scope="module")
def model():
    return load_vla(preset="tiny-act")


def expected_points(model, frame):
    """Sequential decoding of the frame as the graph sees it (no kinematic state subscribed: a still ego)."""
    frame = dataclasses.replace(frame, ego=EgoState())
    return model.action_tokenizer.waypoints(reference_tokens(model, frame))


def path_xy(path):
    return np.array([[p.pose.position.x, p.pose.position.y] for p in path.poses])


def send_and_collect(h, seqs, timeout_s=60.0):
    frames = [h.frame(seq) for seq in seqs]
    before = len(h.paths)
    for frame in frames:
        h.publish_images(frame.images, frame.stamp_ns)
        h.spin(0.01)
    assert wait_until(lambda: len(h.paths) >= before + len(frames), h.spin, timeout_s), \
        (len(h.paths) - before, h.prefix.health.rejected, h.prefix.health.drop_reasons, h.suffix.health.drop_reasons)
    return frames, h.paths[before:]


@pytest.mark.parametrize("pack,groups", [(2, 2), (3, 1)])
def test_the_graph_serves_an_action_token_model_with_the_sequential_tokens(domain, model, pack, groups):
    h = packed_harness(pack, groups)
    infos = {PREFIX_STEP_TOPIC: [], SUFFIX_STEP_TOPIC: [], PREFIX_INFO_TOPIC: []}
    for topic, got in infos.items():
        h.node.create_subscription(DiagnosticStatus, topic,
                                   lambda m, got=got: got.append({kv.key: kv.value for kv in m.values}), 100)
    try:
        frames, paths = send_and_collect(h, range(5))
        for frame, path in zip(frames, paths):
            assert path.header.stamp.sec * 10**9 + path.header.stamp.nanosec == frame.stamp_ns
            np.testing.assert_allclose(path_xy(path), expected_points(model, frame)[:, :2], atol=1e-6)
        per_frame = lambda: [i for i in h.infos if "latency_ms" in i]  # noqa: E731 (its own topic: may lag the paths)
        assert wait_until(lambda: [int(i["seq"]) for i in per_frame()] == [0, 1, 2, 3, 4], h.spin, 5), h.infos
        per_frame = per_frame()
        assert {i["transport"] for i in h.infos} == {"packed"} and {i["tokens"] for i in per_frame} == {"8"}
        steps = h.prefix.serving.server.step_no
        assert wait_until(lambda: len(infos[PREFIX_STEP_TOPIC]) == len(infos[SUFFIX_STEP_TOPIC]) == steps, h.spin, 5)
        assert max(int(s["frames"]) for s in infos[PREFIX_STEP_TOPIC]) > 1        # frames packed into one forward
        base = h.prefix.serving.server.run_base
        assert [int(s["step"]) - base for s in infos[SUFFIX_STEP_TOPIC]] == list(range(1, steps + 1))
        assert wait_until(lambda: [int(i["seq"]) for i in infos[PREFIX_INFO_TOPIC]] == [0, 1, 2, 3, 4], h.spin, 5)
        assert not h.prefix.health.rejected and not h.suffix.health.rejected
    finally:
        h.close()


def test_a_qwen3_vl_action_model_cut_below_its_deepstack_depth_is_served_exactly(domain):
    """p = 1 of tiny-qwen3vl-act: each prefill's packed step carries the DeepStack addition still due."""
    qwen3 = {"model.preset": "tiny-qwen3vl-act", "partition_point": 1, "dynamic_zone_min": 0, "dynamic_zone_max": 2}
    h = Harness({"hybrid_vla_prefix": {**qwen3, "pack": 2, "pack_groups": 1, "token_timeout_s": 5.0},
                 "hybrid_vla_suffix": qwen3, "hybrid_vla_scheduler": {"model.preset": "tiny-qwen3vl-act",
                                                                      "initial_partition": 1, "dynamic_zone_min": 0,
                                                                      "dynamic_zone_max": 2}})
    try:
        frames, paths = send_and_collect(h, range(3))
        model = h.suffix.model
        for frame, path in zip(frames, paths):
            np.testing.assert_allclose(path_xy(path), expected_points(model, frame)[:, :2], atol=1e-6)
        assert not h.prefix.health.rejected and not h.suffix.health.rejected
    finally:
        h.close()


def test_a_partition_move_applies_at_a_drain_and_stays_exact(domain, model):
    from std_msgs.msg import Int32
    h = packed_harness(2, 2)
    try:
        send_and_collect(h, range(2))
        pub = h.node.create_publisher(Int32, PARTITION_TOPIC, 1)
        pub.publish(Int32(data=3))
        assert wait_until(lambda: h.prefix.stage.partition == 3, h.spin, 10)
        frames, paths = send_and_collect(h, range(2, 5))
        for frame, path in zip(frames, paths):
            np.testing.assert_allclose(path_xy(path), expected_points(model, frame)[:, :2], atol=1e-6)
        assert wait_until(lambda: [i["partition"] for i in h.infos if "latency_ms" in i][-3:] == ["3", "3", "3"],
                          h.spin, 5), h.infos
        assert not h.suffix.health.drop_reasons     # nothing was cut off mid-decode by the move
    finally:
        h.close()


def test_the_packed_suffix_node_runs_bf16_and_refuses_rows_of_another_named_boundary_dtype(domain, model):
    """dtype bf16 for an action-token model: the suffix's own bf16 copies (one process: the model it shares
    with the fp32 prefix stays fp32) and a bf16 KV ring; every frame is served (closeness to fp32:
    test_packed_bf16.py). boundary_dtype named fp32: a step of bf16 rows is refused, boundary_dtype_mismatch."""
    import torch
    from hybrid_vla_ros.engine.actionflow.codec import encode_state
    from hybrid_vla_ros.engine.actionflow.forward import PackedState, Segment
    h = Harness({"hybrid_vla_prefix": {**ACT, "pack": 2, "pack_groups": 1, "token_timeout_s": 5.0},
                 "hybrid_vla_suffix": {**ACT, "dtype": "bf16", "boundary_dtype": "fp32", "pack": 2, "pack_groups": 1},
                 "hybrid_vla_scheduler": ACT})
    try:
        frames, paths = send_and_collect(h, range(3))
        assert [p.header.stamp.sec * 10**9 + p.header.stamp.nanosec for p in paths] == [f.stamp_ns for f in frames]
        assert all(np.isfinite(path_xy(p)).all() and len(p.poses) == 4 for p in paths)
        side = h.suffix.serving.server.side
        assert side.dtype == torch.bfloat16 and all(k.dtype == torch.bfloat16 for k in side.ring.keys.values())
        assert all(b.self_attn.q_proj.weight.dtype == torch.bfloat16 for b in side.blocks)
        assert all(p.dtype == torch.float32 for p in h.suffix.model.parameters())
        rows = torch.zeros(5, model.spec.hidden_size, dtype=torch.bfloat16)
        bf16_step = PackedState(rows, torch.zeros(3, 1, 5, dtype=torch.long), [Segment(99, 0, 0, 0, 5)])
        h.boundary_pub.publish(UInt8MultiArray(data=encode_state(bf16_step, 2, 10**6, slots=2)))
        assert wait_until(lambda: h.suffix.health.rejected["boundary_dtype_mismatch"] == 1, h.spin, 10)
        # a step claiming more KV slots than the YAML's pack x pack_groups (2 x 1): refused before any allocation
        assert h.suffix.serving.server.max_slots == 2
        greedy = PackedState(rows.float(), torch.zeros(3, 1, 5, dtype=torch.long), [Segment(98, 0, 0, 0, 5)])
        h.boundary_pub.publish(UInt8MultiArray(data=encode_state(greedy, 2, 10**6, slots=3)))
        assert wait_until(lambda: h.suffix.health.rejected["invalid_boundary"] == 1, h.spin, 10)
        assert side.ring.slots <= 2, side.ring.slots
    finally:
        h.close()



def test_the_packed_suffix_node_runs_what_its_dtype_probe_chose_and_reports_why(domain, model):
    """dtype auto for an action-token model: the suffix measures fp32 against bf16 on its cores (engine/dtype_choice.py,
    as for a waypoint head), runs its packed side in what it chose, serves every frame, and its `dtype` check says
    what and why."""
    import torch
    h = Harness({"hybrid_vla_prefix": {**ACT, "pack": 2, "pack_groups": 1, "token_timeout_s": 5.0},
                 "hybrid_vla_suffix": {**ACT, "dtype": "auto", "pack": 2, "pack_groups": 1}, "hybrid_vla_scheduler": ACT})
    try:
        frames, paths = send_and_collect(h, range(2))
        assert [p.header.stamp.sec * 10**9 + p.header.stamp.nanosec for p in paths] == [f.stamp_ns for f in frames]
        choice = h.suffix.dtype_choice
        assert choice.dtype in ("fp32", "bf16") and ("->" in choice.reason or "no native bf16" in choice.reason)
        wanted = torch.bfloat16 if choice.dtype == "bf16" else torch.float32
        side = h.suffix.serving.server.side
        assert side.dtype == wanted and all(b.self_attn.q_proj.weight.dtype == wanted for b in side.blocks)
        checks = {name: values for name, _level, _text, values in h.suffix._extra_checks()}
        assert checks["dtype"] == {"dtype": choice.dtype, "dtype_reason": choice.reason}
    finally:
        h.close()


def test_the_packed_suffix_node_serves_every_frame_in_int8(domain, model):
    """dtype int8 for an action-token model in the graph: the suffix's blocks are int8 copies (the shared model stays
    as it was), every frame is served once with a whole action (closeness to fp32 is the int8 gate's: test_int8.py)."""
    from hybrid_vla_ros.engine.int8 import Int8Linear
    h = Harness({"hybrid_vla_prefix": {**ACT, "pack": 2, "pack_groups": 1, "token_timeout_s": 5.0},
                 "hybrid_vla_suffix": {**ACT, "dtype": "int8", "pack": 2, "pack_groups": 1}, "hybrid_vla_scheduler": ACT})
    try:
        frames, paths = send_and_collect(h, range(3))
        assert [p.header.stamp.sec * 10**9 + p.header.stamp.nanosec for p in paths] == [f.stamp_ns for f in frames]
        assert all(np.isfinite(path_xy(p)).all() and len(p.poses) == 4 for p in paths)
        side = h.suffix.serving.server.side
        assert h.suffix.dtype_choice.dtype == "int8"
        assert all(isinstance(b.mlp.up_proj, Int8Linear) for b in side.blocks)
        assert not any(isinstance(m, Int8Linear) for m in h.suffix.model.modules())
    finally:
        h.close()

def test_bad_tokens_are_rejected_counted_and_the_graph_goes_on(domain, model):
    h = packed_harness(2, 1)
    try:
        pub = h.node.create_publisher(UInt8MultiArray, ACTION_TOKENS_TOPIC, TOKENS_QOS)
        pub.publish(UInt8MultiArray(data=b"HVLM" + bytes(3)))                      # truncated
        pub.publish(UInt8MultiArray(data=b"HVLT" + bytes(3)))                      # the format HVLM replaced
        pub.publish(UInt8MultiArray(data=encode_tokens({12345: 300}, 10**6)))     # a step never sent
        assert wait_until(lambda: h.prefix.health.rejected["invalid_tokens"] == 1
                          and h.prefix.health.rejected["old_message"] == 1
                          and h.prefix.serving.server.stale_tokens == 1, h.spin, 10)
        frames, paths = send_and_collect(h, range(2))
        for frame, path in zip(frames, paths):
            np.testing.assert_allclose(path_xy(path), expected_points(model, frame)[:, :2], atol=1e-6)
        from diagnostic_msgs.msg import DiagnosticArray
        packed = []
        h.node.create_subscription(DiagnosticArray, "/diagnostics", lambda m: packed.extend(
            {kv.key: kv.value for kv in st.values} for st in m.status if st.name == "hybrid_vla_prefix: packed"), 10)
        assert wait_until(lambda: any(d["stale_tokens"] == "1" and d["in_flight"] == "0" and d["waiting"] == "0"
                                      for d in packed), h.spin, 5), packed[-1:]
    finally:
        h.close()


def test_the_scheduler_gets_one_sample_per_packed_step(domain, model):
    h = packed_harness(2, 2, update_period_s=0.05, hysteresis=10.0, policy="simple")
    try:
        send_and_collect(h, range(3))
        scheduler = h.graph.nodes["hybrid_vla_scheduler"]
        steps = h.prefix.serving.server.step_no
        assert wait_until(lambda: len(scheduler.fed) == steps, h.spin, 10), (len(scheduler.fed), steps)
        assert {s.partition for s in scheduler.fed} == {2} and all(s.rows > 0 for s in scheduler.fed)
        assert {s.backlog for s in scheduler.fed} == {0}   # a packed suffix's queue is the alternation
        assert max(s.rows for s in scheduler.fed) > 2 * 8                        # prefill steps carry a prompt
    finally:
        h.close()


def test_a_recorded_drive_gives_the_same_actions_in_one_process_and_in_separate_processes(domain, tmp_path):
    """The prefix and suffix as separate processes share nothing but the packed steps and tokens on DDS. The
    trajectories are recorded back (`hybrid-vla record`'s recorder) and read back, and `hybrid-vla demo --config`
    runs the same drive through the graph that file describes."""
    from ros_harness import recorded_back_and_demo
    from hybrid_vla_ros.ros.launch_support.bringup import graph_params, write_combined_config
    from hybrid_vla_ros.ros.demo import drive_graph, write_sample_drive
    from ros_harness import CAMERAS, TINY_OVERRIDES
    overrides = {k: {**v, **ACT} for k, v in TINY_OVERRIDES.items()}
    topics = [f"{c}/compressed" for c in CAMERAS]
    overrides["hybrid_vla_prefix"].update(image_transport="compressed", camera_topics=topics, pack=2, pack_groups=2)
    bag = write_sample_drive(tmp_path / "drive", "tiny-act", topics, frames=6)
    params = graph_params(overrides=overrides)
    config = write_combined_config(params, tmp_path / "graph.yaml")
    one, traj_one = drive_graph(bag, params, record_to=tmp_path / "recorded", settle_s=30)
    many, traj_many = drive_graph(bag, params, processes=True, config=str(config), settle_s=60)
    assert one["trajectories"] == many["trajectories"] == 6, (one, many)
    assert one["transports"] == many["transports"] == ["packed"]
    assert sorted(traj_one) == sorted(traj_many)
    for stamp in traj_one:
        np.testing.assert_allclose(traj_one[stamp], traj_many[stamp], atol=1e-6)
    recorded_back_and_demo(one, sorted(traj_one), bag, config, tmp_path)
