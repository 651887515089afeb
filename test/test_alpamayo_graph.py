"""The tiny released-layout Alpamayo 1 and 1.5 checkpoints (test/published_alpamayo.py) served by the prefix and
suffix nodes over real DDS on loopback (issue 39): the prefix builds each frame's inputs from 4 camera topics (the
last 4 frames each) and the odometry (16 poses of ego history), sends the prefill's boundary, each decode feed,
1.5's route-free prompt and each expert step's boundary; the suffix samples, runs the flow's Euler steps and
publishes one trajectory per frame and ~/debug/trajectory_info (the decoded tokens, why the decode ended, expert
steps and each side's time). Every trajectory equals run_reference on the same inputs and seed exactly (fp32),
in separate processes and in one process. The byte servers alone: test_alpamayo_servers.py."""

import json
import os
import subprocess
import sys
from contextlib import contextmanager

import numpy as np
import pytest
import torch

from published_alpamayo import write_release
from ros_harness import EndpointReports, wait_until
from hybrid_vla_ros.engine.cpu import pinned
from hybrid_vla_ros.engine.decode.sampling import step_seed
from hybrid_vla_ros.engine.expert_serve import envelope
from hybrid_vla_ros.engine.expert_serve.frame_inputs import ImageHistory, frame_inputs, still_history
from hybrid_vla_ros.engine.expert_serve.release_prompt import release_prompt
from hybrid_vla_ros.model.plugins import alpamayo

CAMERAS = [f"/test/alpamayo/cam{i}/image" for i in range(4)]
CAMERAS_2_SUPER = [f"/test/alpamayo/cam{i}/image" for i in range(6)]   # its trajectory profile's 6 slots
FRAMES, SEED, STEPS, MAX_TOKENS, GUIDANCE = 4, 7, 4, 6, 2.0
BASE_NS = 3_000_000_000                           # frames at 3.0 s, 3.1 s, ... (odometry from 0 s, every 0.1 s)
PROMPT = {"system": list(range(10, 22)), "user": list(range(50, 60)), "route": [40, 41, 42]}
SAMPLING = alpamayo.Sampling(0.6, 0.98, MAX_TOKENS)
TINY_PIXELS = (1024, 1024)   # the 32 x 32 test images as they are (the releases' budget: test_alpamayo_images)


@pytest.fixture(scope="module")
def releases(tmp_path_factory):
    root = tmp_path_factory.mktemp("alpamayo_graph")
    r15 = write_release(root / "r15", "alpamayo1_5", seed=3, pixels=TINY_PIXELS)
    (r15 / "prompt_ids.json").write_text(json.dumps(PROMPT))     # the chat template's text ids (no tokenizer here)
    return {"r1": write_release(root / "r1", "alpamayo_r1", pixels=TINY_PIXELS), "1.5": r15,
            "2super": alpamayo_2_super(root / "2super")}


def alpamayo_2_super(folder):
    """The tiny Alpamayo 2 Super release as its authors' save_pretrained lays it out (test_authors_alpamayo2.py),
    its pixel budget set to take the test images as they are, the text's ids in prompt_ids.json (no route: its
    route is plain text, without route tokens)."""
    from manifest_checkpoint import load_manifest, write_safetensors_release
    write_safetensors_release(load_manifest("alpamayo2_super_tiny"), folder)
    config = json.loads((folder / "config.json").read_text())
    config["min_pixels"], config["max_pixels"] = TINY_PIXELS
    (folder / "config.json").write_text(json.dumps(config))
    (folder / "prompt_ids.json").write_text(json.dumps({k: PROMPT[k] for k in ("system", "user")}))
    return folder


def camera_sets(n=FRAMES, cameras=CAMERAS):
    rng = np.random.default_rng(0)
    return [[rng.integers(0, 256, (32, 32, 3), dtype=np.uint8) for _ in cameras] for _ in range(n)]


def odometry(stamp_ns, origin_ns=0):
    """The car's odometry at stamp_ns, on the time since origin_ns."""
    from nav_msgs.msg import Odometry
    from hybrid_vla_ros.ros import messages
    t = (stamp_ns - origin_ns) / 1e9
    msg = Odometry()
    msg.header.frame_id = "map"
    messages.ns_to_stamp(stamp_ns, msg.header.stamp)
    yaw = 0.05 * t                                # a gentle left turn at 5 m/s
    msg.pose.pose.position.x, msg.pose.pose.position.y = 5.0 * t * np.cos(yaw), 5.0 * t * np.sin(yaw)
    msg.pose.pose.orientation.z, msg.pose.pose.orientation.w = np.sin(yaw / 2), np.cos(yaw / 2)
    msg.twist.twist.linear.x = 5.0
    return msg


def expected(model, sets, guidance, kinematic=True, stamps=None, origin_ns=0, routes=None, odometry_at=None):
    """run_reference per frame on the inputs the prefix builds (frame_inputs: its own test below); the frames
    stamped BASE_NS, BASE_NS + 0.1 s, ... unless `stamps` says, the odometry's time from origin_ns. routes: each
    frame's route text (a release with a tokenizer; False: none, the frame unguided), else the fixed route ids
    with guidance. odometry_at: the drive's odometry (default: `odometry`)."""
    from hybrid_vla_ros.ros import messages
    text, history, out = release_prompt(model), ImageHistory(), []   # the prefix's choice (tokenizer, else ids)
    flow = alpamayo.FlowSettings(STEPS, GUIDANCE if guidance else 1.0)
    for k, cameras in enumerate(sets):
        stamp = BASE_NS + k * 100_000_000 if stamps is None else stamps[k]
        poses = np.array([[p.x, p.y, p.yaw] for p in (
            messages.odometry_to_pose((odometry_at or odometry)(stamp - j * 100_000_000, origin_ns))
            for j in range(15, -1, -1))]) if kinematic else still_history()
        route = guidance if routes is None else routes[k]
        inputs = frame_inputs(model, history.add(cameras)[0], poses, text, route=route)
        seed, guided = step_seed(SEED, stamp, 0), guidance and route is not False
        with pinned(None, 1):   # the nodes' thread count (graph_params)
            out.append(alpamayo.run_reference(model, inputs, seed, SAMPLING, flow, guided))
    return out


def graph_params(checkpoint, guidance, cameras=CAMERAS):
    from hybrid_vla_ros.ros.launch_support.bringup import graph_params as params
    # one torch thread per side, as the reference runs (expected): fp32 sums in another order with more threads,
    # and a test process's thread count depends on the tests before it (seen: last-bit differences in a suite run)
    model = {"model.checkpoint": str(checkpoint), "partition_point": 2, "dynamic_zone_min": -1,
             "dynamic_zone_max": -1, "diagnostics_period_s": 0.5, "threads": 1}
    decode = {"decode.sample": True, "decode.temperature": 0.6, "decode.top_p": 0.98, "decode.seed": SEED,
              "decode.max_tokens": MAX_TOKENS}
    return params(overrides={
        "hybrid_vla_prefix": {**model, **decode, "camera_topics": cameras, "image_transport": "raw",
                              "input_policy": "lossless", "use_kinematic_state": True, "token_timeout_s": 30.0,
                              "flow.steps": STEPS, "flow.guidance_weight": GUIDANCE if guidance else 1.0},
        "hybrid_vla_suffix": {**model, **decode, "frame_id": "base_link", "output_type": "path", "dtype": "fp32",
                              "output_retime": False, "max_output_age_ms": 0.0},
        "hybrid_vla_scheduler": {"autostart": False}})


class Driver:
    """Cameras and odometry out, trajectories and their infos in, on this test's domain."""

    def __init__(self, context, executor=None, spin=None, cameras=CAMERAS):
        from diagnostic_msgs.msg import DiagnosticStatus
        from nav_msgs.msg import Odometry, Path
        from rclpy.executors import SingleThreadedExecutor
        from rclpy.node import Node
        from sensor_msgs.msg import Image
        from hybrid_vla_ros.ros.topics import KINEMATIC_TOPIC, TRAJECTORY_INFO_TOPIC, TRAJECTORY_TOPIC
        self.node = Node("alpamayo_driver", context=context)
        self.cameras = cameras
        self.cams = [self.node.create_publisher(Image, t, 10) for t in cameras]
        self.odom = self.node.create_publisher(Odometry, KINEMATIC_TOPIC, 200)
        self.paths, self.infos = [], []
        self.node.create_subscription(Path, TRAJECTORY_TOPIC, self.paths.append, 50)
        self.node.create_subscription(DiagnosticStatus, TRAJECTORY_INFO_TOPIC,
                                      lambda m: self.infos.append({kv.key: kv.value for kv in m.values}), 50)
        self.reports = EndpointReports(self.node)
        self.own, self.odometry = executor is None, odometry   # odometry: stamp_ns -> Odometry (drive)
        self.executor = SingleThreadedExecutor(context=context) if self.own else executor
        self.executor.add_node(self.node)
        self.spin = spin or (lambda timeout=0.02: self.executor.spin_once(timeout_sec=timeout))

    def ready(self, timeout_s):
        """Both stages up, their camera readers and trajectory writers matched with this node."""
        from hybrid_vla_ros.ros.topics import TRAJECTORY_INFO_TOPIC, TRAJECTORY_TOPIC
        assert wait_until(lambda: all(p.get_subscription_count() for p in self.cams + [self.odom]), self.spin,
                          timeout_s), "the prefix did not come up"
        # the nodes' own counts (seen lost: a best-effort image sent before the prefix's reader matched this
        # writer; a trajectory published before the suffix's writer matched this reader)
        assert wait_until(lambda: self.reports.matched("hybrid_vla_prefix", "subscription", *self.cameras) and
                          self.reports.matched("hybrid_vla_suffix", "publisher", TRAJECTORY_TOPIC,
                                               TRAJECTORY_INFO_TOPIC), self.spin, timeout_s), self.reports.values

    def send(self, cameras, stamp_ns):
        from sensor_msgs.msg import Image
        from hybrid_vla_ros.ros import messages
        for pub, image in zip(self.cams, cameras):
            msg = messages.array_to_image(image, Image())
            messages.ns_to_stamp(stamp_ns, msg.header.stamp)
            pub.publish(msg)

    def drive(self, sets, timeout_s):
        """Odometry up to the last frame, then each frame's images; one trajectory awaited per frame."""
        self.ready(timeout_s)
        for stamp in range(0, BASE_NS + len(sets) * 100_000_000, 100_000_000):
            self.odom.publish(self.odometry(stamp))   # reliable: delivered once this writer matched the reader
        self.spin(0.2)
        for k, cameras in enumerate(sets):
            self.send(cameras, BASE_NS + k * 100_000_000)
            assert wait_until(lambda: len(self.paths) > k and len(self.infos) > k, self.spin, timeout_s), \
                f"no trajectory for frame {k}"
        return self.paths, self.infos

    def close(self):
        self.executor.remove_node(self.node)
        if self.own:
            self.executor.shutdown()
        self.node.destroy_node()


def check(paths, infos, refs):
    for k, (path, info, ref) in enumerate(zip(paths, infos, refs)):
        assert path.header.stamp.sec * 10**9 + path.header.stamp.nanosec == BASE_NS + k * 100_000_000
        xy = np.array([[p.pose.position.x, p.pose.position.y] for p in path.poses])
        assert np.array_equal(xy, ref.xyz[:, :2].double().numpy()), f"frame {k}"      # exact, fp32 -> float64
        assert info["tokens"] == ",".join(map(str, ref.tokens)) and int(info["token_count"]) == len(ref.tokens)
        assert info["decode_end"] == ("stop_token" if ref.stopped else "max_tokens")
        assert int(info["seed"]) == step_seed(SEED, BASE_NS + k * 100_000_000, 0)
        assert int(info["expert_steps"]) == STEPS
        assert float(info["prefix_expert_ms"]) > 0 and float(info["suffix_expert_ms"]) > 0


@pytest.mark.slow
@pytest.mark.parametrize("name, guidance", [("r1", False), ("1.5", True), ("2super", False)])
def test_a_release_is_served_by_the_graph_in_processes_exactly(name, guidance, releases, domain, tmp_path):
    """Alpamayo 2 Super: 6 camera topics x 4 frames, its nested expert keys, no <|cot_start|> at the prompt's end."""
    from hybrid_vla_ros.ros.launch_support.bringup import write_combined_config
    from hybrid_vla_ros.ros.launch_support.supervise import stop_processes
    import rclpy
    cameras = CAMERAS_2_SUPER if name == "2super" else CAMERAS
    config = write_combined_config(graph_params(releases[name], guidance, cameras), tmp_path / "graph.yaml")
    procs = [subprocess.Popen([sys.executable, "-m", "hybrid_vla_ros.ros.launch_support.bringup", "--node", node,
                               "--config", str(config)], env={**os.environ, "OMP_NUM_THREADS": "1"},
                              start_new_session=True) for node in ("hybrid_vla_suffix", "hybrid_vla_prefix")]
    context = rclpy.Context()
    rclpy.init(context=context)
    driver = Driver(context, cameras=cameras)
    try:
        sets = camera_sets(cameras=cameras)
        refs = expected(alpamayo.load_release(releases[name]), sets, guidance)
        paths, infos = driver.drive(sets, timeout_s=60)
        check(paths, infos, refs)
        assert all(p.poll() is None for p in procs)
    finally:
        driver.close()
        rclpy.shutdown(context=context)
        stop_processes(procs)


@contextmanager
def one_process(params):
    """The prefix and the suffix in one process, and a Driver on its executor: -> (graph, driver)."""
    import rclpy
    from hybrid_vla_ros.ros.launch_support.bringup import InProcessGraph
    context = rclpy.Context()
    rclpy.init(context=context)
    graph = InProcessGraph(params, context=context, nodes=("hybrid_vla_prefix", "hybrid_vla_suffix"))
    driver = Driver(context, graph.executor, graph.spin_once)
    try:
        assert not graph.failed, graph.failed
        yield graph, driver
    finally:
        driver.close()
        graph.shutdown()
        rclpy.shutdown(context=context)


@pytest.mark.slow
def test_1_5_is_served_in_one_process_exactly(releases, domain):
    with one_process(graph_params(releases["1.5"], True)) as (graph, driver):
        prefix, suffix = graph.nodes["hybrid_vla_prefix"], graph.nodes["hybrid_vla_suffix"]
        damage(driver, prefix, suffix)
        sets = camera_sets(3)
        paths, infos = driver.drive(sets, timeout_s=60)
        check(paths, infos, expected(suffix.serving.model, sets, True))
        assert dict(prefix.health.rejected) == {"invalid_answer": 1, "old_message": 1}
        assert dict(suffix.health.rejected) == {"invalid_boundary": 1, "old_message": 1}


@pytest.mark.slow
def test_a_release_in_bf16_on_both_sides_is_served_in_one_process_exactly(releases, domain):
    """The `dtype` parameters for a release (issue 51): both nodes read their side in bf16, and the trajectories
    equal the unsplit bf16 model's (the trajectory itself comes out in fp32); the diagnostics say the dtype."""
    params = graph_params(releases["r1"], False)
    params["hybrid_vla_prefix"]["dtype"] = params["hybrid_vla_suffix"]["dtype"] = "bf16"
    with one_process(params) as (graph, driver):
        suffix = graph.nodes["hybrid_vla_suffix"]
        model = suffix.serving.model
        assert {p.dtype for p in model.parameters()} == {torch.bfloat16}
        assert graph.nodes["hybrid_vla_prefix"].serving.model is model   # one process: one model, both sides read
        sets = camera_sets(2)
        paths, infos = driver.drive(sets, timeout_s=60)
        check(paths, infos, expected(model, sets, False))
        assert ("dtype", 0, "bf16") in [check[:3] for check in suffix._extra_checks()]


def damaged_forward(width: int = 8) -> bytes:
    """A decode step's message of frame 9 (run 1, stamp 5) cut short in its tensor: the head still names it."""
    from hybrid_vla_ros.engine.expert_split.crossings import TokensState
    state = TokensState(torch.zeros(1, 1, width), torch.zeros(3, 1, 1, dtype=torch.long), 0)
    return envelope.encode_forward(envelope.Forward(envelope.Tag(1, 9, 5), 1, envelope.CROSSING, state))[:-3]


def damage(driver, prefix, suffix):
    """A damaged message each way: refused, counted with its reason; the frames after it are served."""
    from std_msgs.msg import UInt8MultiArray
    from hybrid_vla_ros.ros.topics import ACTION_TOKENS_TOPIC, BOUNDARY_TOPIC, TOKENS_QOS
    forward = driver.node.create_publisher(UInt8MultiArray, BOUNDARY_TOPIC, TOKENS_QOS)
    back = driver.node.create_publisher(UInt8MultiArray, ACTION_TOKENS_TOPIC, TOKENS_QOS)
    assert wait_until(lambda: forward.get_subscription_count() and back.get_subscription_count(), driver.spin, 10)
    damaged = damaged_forward()
    forward.publish(UInt8MultiArray(data=damaged))                  # names its frame: refused, answered, counted
    forward.publish(UInt8MultiArray(data=b"HVAF" + damaged[4:]))    # the format HVLM replaced: counted as old
    back.publish(UInt8MultiArray(data=b"HVLM" + bytes(3)))
    back.publish(UInt8MultiArray(data=b"HVAB" + bytes(3)))
    assert wait_until(lambda: suffix.health.rejected == {"invalid_boundary": 1, "old_message": 1}
                      and prefix.health.rejected == {"invalid_answer": 1, "old_message": 1}, driver.spin, 10)


def test_the_prefix_parameters_are_checked_against_the_release(releases):
    from hybrid_vla_ros.errors import ConfigError
    from hybrid_vla_ros.ros.nodes.serving.alpamayo.settings import stage_settings
    r1 = alpamayo.load_release(releases["r1"], shapes_only=True)
    shipped = graph_params(releases["r1"], False)["hybrid_vla_prefix"]
    settings = stage_settings({**shipped, "flow.steps": 0, "decode.max_tokens": 0}, r1)
    assert (settings.flow.steps, settings.sampling.max_new_tokens, settings.guidance) == (10, 256, False)
    with pytest.raises(ConfigError, match="decode.sample true"):
        stage_settings({**shipped, "decode.sample": False}, r1)
    bare = json.loads((releases["r1"] / "config.json").read_text())
    bare["add_special_tokens"] = False
    from hybrid_vla_ros.model.plugins.alpamayo.config import parse
    no_route = alpamayo.build(parse(bare, releases["r1"]))
    with pytest.raises(ConfigError, match="route tokens"):
        stage_settings({**shipped, "flow.guidance_weight": 2.0}, no_route)
    from hybrid_vla_ros.ros.nodes.serving.alpamayo.settings import refuse_unserved
    suffix = graph_params(releases["r1"], False)["hybrid_vla_suffix"]
    assert refuse_unserved(shipped, "prefix") is None and refuse_unserved(suffix, "suffix") is None   # shipped values
    for side, params, said in (("prefix", {**shipped, "chunks": 2}, "chunks=2"),
                               ("suffix", {**suffix, "chunks": "camera"}, "chunks='camera'"),
                               ("suffix", {**suffix, "warm_standby": True}, "warm_standby"),
                               ("suffix", {**suffix, "numa_node": 0}, "numa_node=0")):
        with pytest.raises(ConfigError, match=said):   # refused with the reason, not silently ignored
            refuse_unserved(params, side)
