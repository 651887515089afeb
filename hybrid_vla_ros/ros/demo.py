"""The main job: the graph on the built-in model, fed by the sample drive, trajectories recorded to a bag,
a summary printed and a PNG report written. Also writes sample drives."""

from __future__ import annotations

import json
import time
from contextlib import nullcontext
from pathlib import Path

from ..engine.cpu import thread_cpu_delta, thread_cpu_seconds
from ..errors import ConfigError, expect
from ..model.inputs import synthetic_camera_frame
from ..model.presets import get_preset
from .. import stop
from ..report import percentiles, pyplot
from .bags.drives import DriveStep, write_drive
from .bags.driver import Driver
from .bags.replay import wait_for_answers
from .launch_support.session import ros_context, spin_ready
from .nodes.scene_memory import has_scene_memory, reset_scene_memory
from .topics import BOUNDARY_TOPIC, TRAJECTORY_INFO_TOPIC as INFO_TOPIC
from .launch_support.bringup import (InProcessGraph, graph_params, spawn_processes, stop_processes,
                                     write_combined_config)

DATA = Path(__file__).resolve().parents[1] / "data"
SAMPLE_DRIVE = DATA / "sample_drive"    # 6 cameras, the shipped config/ files' topics: plumbing (random weights)
ROAD_DRIVE = DATA / "road_drive"        # the demo's drive: a held-out synthetic road (seed ROAD_DRIVE_SEED)
ROAD_DRIVE_SEED, ROAD_DRIVE_FRAMES = 7, 100
FRONT_CAMERA = "/sensing/camera/camera0/image_rect_color/compressed"
# The demo's graph: the shipped config/ defaults with the trained driving model (data/models/drive,
# `hybrid-vla train`) and its one front camera.
_DEMO_MODEL = {"model.preset": "drive", "model.checkpoint": "builtin:drive", "partition_point": 2,
               "dynamic_zone_min": 1, "dynamic_zone_max": 3}
DEMO_OVERRIDES = {
    "hybrid_vla_prefix": {**_DEMO_MODEL, "camera_topics": [FRONT_CAMERA]},
    "hybrid_vla_suffix": {**_DEMO_MODEL, "frame_id": "base_link"},  # the ego frame, as the ground truth is
    "hybrid_vla_scheduler": {"model.preset": "drive", "model.checkpoint": "builtin:drive", "initial_partition": 2,
                             "dynamic_zone_min": 1, "dynamic_zone_max": 3}}


def write_sample_drive(path: str | Path, preset, camera_topics: list[str], frames: int = 40,
                       rate_hz: float = 10.0, storage: str = "mcap", compressed: bool = True, seed: int = 7,
                       receive_delay_ms: tuple[float, float] = (2.0, 12.0)) -> Path:
    """Synthetic camera frames (+ kinematic state) for `preset`'s cameras (a preset name, or a model's spec),
    one frame per time step, recorded as a car records them (ros/bags/drives.py)."""
    spec = get_preset(preset) if isinstance(preset, str) else preset
    expect(len(camera_topics) == spec.num_cameras, ConfigError,
           f"sample drive: {len(camera_topics)} camera topics for a {spec.num_cameras}-camera model")
    steps = (DriveStep(f.images, f.ego.speed_mps, f.ego.yaw_rate_rps, None)
             for f in (synthetic_camera_frame(spec, seq, seed=seed) for seq in range(frames)))
    return write_drive(path, camera_topics, steps, rate_hz, storage, compressed, seed, receive_delay_ms)


def summarise(driver: Driver, published: int, wall_s: float) -> dict:
    sent = {stamp: wall for stamp, wall in driver.replayer.published_frames}
    # one answer per frame: a second info for a stamp is another graph on this DDS domain answering the same
    # drive (the shipped sample drives' stamps are fixed), counted, never taken for a frame of this one
    first: dict[int, dict] = {}
    for info in sorted(driver.infos, key=lambda i: i["received"]):
        first.setdefault(int(info["stamp_ns"]), info)
    infos = list(first.values())
    latencies = [(i["received"] - sent[int(i["stamp_ns"])]) * 1e3 for i in infos if int(i["stamp_ns"]) in sent]
    received = [i["received"] for i in infos]
    periods = [(b - a) * 1e3 for a, b in zip(received, received[1:])]
    return {
        "frames_published": published, "trajectories": len(infos), "dropped": published - len(infos),
        "wall_s": wall_s, "duplicate_infos": len(driver.infos) - len(infos),
        "period_ms": percentiles(periods),
        "latency_ms": percentiles(latencies),
        # (an action-token model's frames span several packed steps: their infos carry latency_ms instead)
        "suffix_compute_ms": percentiles([float(i["suffix_ms"]) for i in infos if "suffix_ms" in i]),
        "suffix_queue_ms": percentiles([float(i["queue_ms"]) for i in infos if "queue_ms" in i]),
        "partition_over_time": [[round(i["received"] - received[0], 3), int(i["partition"])] for i in infos],
        "transports": sorted({i["transport"] for i in infos}),
        "rejected": driver.rejections,
        "dropped_in_graph": driver.graph_drops, "lost_frames": driver.lost,
        "camera_images_unmatched": driver.sync_discarded,
        "presumed_lost_by_replay": driver.replayer.presumed_lost,
        "bag_frames_incomplete": driver.replayer.incomplete_frames,
    }


def drive_graph(bag: str | Path, params: dict, record_to: str | Path | None = None, processes: bool = False,
                rate: float = 0.0, window: int = 2, storage: str = "mcap", config: str | None = None,
                settle_s: float = 30.0, progress=None, graph_running: bool = False, sampler=None) -> tuple[dict, dict]:
    """Run the graph (one process, or separate processes) on a bag. -> (summary, trajectories by stamp).
    graph_running: the graph is already up elsewhere (e.g. its stages on two computers): start nothing,
    drive it. progress(text), when given, hears each step. sampler: a context manager entered around the
    measured replay, whose report() joins the summary (bench/gil.py's GilSampler)."""
    with ros_context() as context:
        return _drive(context, bag, params, record_to, "running" if graph_running else processes, rate, window,
                      storage, config, settle_s, progress or (lambda text: None), sampler or nullcontext())


def _drive(context, bag, params, record_to, processes, rate, window, storage, config, settle_s, progress, sampler):
    """processes: False (one process, here), True (spawned, one per node) or "running" (started by others)."""
    from rclpy.executors import SingleThreadedExecutor
    graph, procs = None, []
    try:
        progress({False: "starting the graph (one process)", True: "starting the graph (one process per node)",
                  "running": "driving the running graph"}[processes])
        if processes:
            procs = spawn_processes(config) if processes is True else []
            executor = SingleThreadedExecutor(context=context)
        else:
            graph = InProcessGraph(params, context=context)
            executor = graph.executor
        driver = Driver(context, bag, record_to, storage, float(params["hybrid_vla_prefix"].get("sync_skew_ms", 20.0)),
                        params["hybrid_vla_suffix"].get("output_type", "auto"))
        executor.add_node(driver.node)

        def spin(timeout_s: float, until=None) -> None:
            stop.check()  # a Ctrl-C ends the drive at the next spin (the CLI exits 0)
            spin_ready(executor, timeout_s, until)
        expect(driver.replayer.wait_for_subscribers(120.0 if processes else 10.0, spin), ConfigError,
               f"nobody subscribes to the bag's topics {sorted(driver.replayer.topics())}")
        connected = lambda: (driver.node.count_subscribers(BOUNDARY_TOPIC) > 0 and  # noqa: E731
                             driver.node.count_publishers(BOUNDARY_TOPIC) > 0 and
                             driver.node.count_publishers(INFO_TOPIC) > 0)
        deadline = time.monotonic() + (120.0 if processes else 10.0)
        while not connected() and time.monotonic() < deadline:
            spin(0.05)
        expect(connected(), ConfigError, "the prefix -> suffix boundary topic never connected")
        attempts = driver.replayer.probe(spin, lambda: len(driver.infos), 120.0 if processes else 30.0)
        expect(attempts > 0, ConfigError, "the graph never answered the readiness probe frame")
        frame_s = driver.replayer.frame_time_s   # every later wait scales with it (a real-size frame: a minute)
        quiet_until = time.monotonic() + max(2.0, attempts * frame_s)  # every probe attempt drains first
        while len(driver.infos) < attempts and time.monotonic() < quiet_until:
            spin(0.02)
        if has_scene_memory(params["hybrid_vla_prefix"]):  # the probe frames must not stay in its memory
            progress(reset_scene_memory(driver.node, spin))
        progress(f"graph answered; replaying {driver.replayer.message_count} messages")
        driver.start_recording()
        first_stamp = driver.replayer.first_stamp()
        answered = driver.count_answers_from(first_stamp)
        with sampler:
            start, cpu_before = time.perf_counter(), thread_cpu_seconds()
            published = driver.replayer.run(spin, answered, rate=rate, window=window)
            wait_for_answers(spin, answered, published, max(3.0, 10 * driver.replayer._period_s(), 3 * frame_s),
                             max(settle_s, 3 * window * frame_s))
            driver.keep_from(first_stamp)
            wall_s, cpu_s = time.perf_counter() - start, thread_cpu_delta(cpu_before, thread_cpu_seconds())
        end = time.monotonic() + 0.5  # late diagnostics
        while time.monotonic() < end:
            spin(0.02)
        summary = {**summarise(driver, published, wall_s), "thread_cpu_s": cpu_s, **getattr(sampler, "report", dict)()}
        executor.remove_node(driver.node)
        executor.shutdown()  # before the driver destroys its entities (session.RELEASE_NOTE); not spun again
        summary["recorded"] = driver.close()
        return summary, driver.trajectories
    finally:
        if graph:
            graph.shutdown()
        stop_processes(procs)


def plot_demo(summary: dict, path: str | Path) -> None:
    plt = pyplot()
    fig, axes = plt.subplots(2, 1, figsize=(9, 5.5), sharex=True)
    series = summary["partition_over_time"]
    t = [s[0] for s in series]
    gaps = [float("nan")] + [(b - a) * 1e3 for a, b in zip(t, t[1:])]  # no interval before the first
    axes[0].plot(t, gaps, ".-")
    axes[0].set_ylabel("interval between\ntrajectories (ms)")
    axes[0].set_title(f"demo: {summary['trajectories']}/{summary['frames_published']} frames, period p50 "
                      f"{summary['period_ms']['p50'] or 0:.1f} ms, latency p50 {summary['latency_ms']['p50'] or 0:.1f} ms, "
                      f"dropped {summary['dropped']}", fontsize=9)
    axes[1].step(t, [s[1] for s in series], where="post")
    axes[1].set_ylabel("partition p")
    axes[1].set_xlabel("s since first trajectory")
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def run_demo(out_dir: str | Path = "out/demo", bag: str | Path | None = None, config: str | None = None,
             rate: float = 0.0, storage: str = "mcap", processes: bool = False, progress=None,
             graph_running: bool = False) -> dict:
    """config None: the trained driving model on the shipped held-out road drive (DEMO_OVERRIDES); a config
    file: that graph, by default on the 6-camera sample drive of the shipped config/ files."""
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    record_to = out / f"trajectories_{time.strftime('%Y%m%d_%H%M%S')}"
    bag = Path(bag or (SAMPLE_DRIVE if config else ROAD_DRIVE))
    params = graph_params(config, overrides=None if config else DEMO_OVERRIDES)
    if rate == 0 and not graph_running:
        # As fast as the graph takes it (closed loop): every frame of the bag is wanted, and each waits behind
        # the one in flight by design, so its age says nothing about staleness. With --rate 1 the shipped
        # `latest` policy and max_output_age_ms apply, as on a car (the newest frame wins).
        params["hybrid_vla_prefix"]["input_policy"] = "lossless"
        params["hybrid_vla_suffix"]["max_output_age_ms"] = 0.0
    if not graph_running:  # the children of --processes read the very parameters used here
        import tempfile
        config = str(write_combined_config(params, Path(tempfile.mkdtemp(prefix="hvla_demo_")) / "graph.param.yaml"))
    summary, trajectories = drive_graph(bag, params, record_to, processes=processes, rate=rate, storage=storage,
                                        config=config, progress=progress, graph_running=graph_running)
    if params["hybrid_vla_suffix"]["frame_id"] != "base_link":
        trajectories = {}  # in the map frame: not comparable with the ego-frame ground truth as they are
    mode = "running graph" if graph_running else "separate processes" if processes else "one process"
    model = params["hybrid_vla_prefix"]["model.checkpoint"] or params["hybrid_vla_prefix"]["model.preset"]
    summary.update(bag=str(bag), trajectory_bag=str(record_to), model=model, mode=mode)
    plot_demo(summary, out / "report.png")
    summary["report_png"] = str(out / "report.png")
    summary["driving"] = draw_drive(bag, trajectories, out / "drive.png", model)
    (out / "summary.json").write_text(json.dumps(summary, indent=2))
    return summary


def draw_drive(bag: Path, trajectories: dict, path: Path, model: str) -> dict:
    """The drive's picture (sim/view.py) and, when the bag records the ground truth, the trajectories' ADE /
    FDE against it and against the constant-velocity baseline. trajectories: stamp -> (N, 2) in base_link."""
    from ..sim.view import constant_velocity, displacement_errors, plot_drive
    from .bags.drives import read_drive_view
    frames = read_drive_view(bag, predictions=trajectories)
    if not frames:
        return {"drive_png": None, "why": "the bag has no odometry (kinematic state) to place the paths"}
    errors = displacement_errors(frames)
    baseline = displacement_errors([constant_velocity(f) for f in frames])
    title = (f"{model} on {bag.name}: {errors['frames']} frames, ADE {errors['ade_m']:.2f} m "
             f"(constant velocity {baseline['ade_m']:.2f} m)" if errors["frames"] else f"{model} on {bag.name}")
    plot_drive(frames, path, title)
    return {"drive_png": str(path), "model": errors, "constant_velocity": baseline}

