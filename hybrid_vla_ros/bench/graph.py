"""The ROS graph as a benchmark mode: the same synthetic frames as the engine modes, as raw camera images
from a rosbag2 drive, through the three real nodes (one process: `graph`; one process per node:
`graph_processes`) with the same partition, core split and frames-in-flight limit. What the graph costs over
the engine shows up as the ratio of its period to `pipelined`."""

from __future__ import annotations

import tempfile
from pathlib import Path

from ..engine.cpu import ms_per_frame
from ..engine.placement import DTYPE_NAMES, Placement
from ..model.vla import VLAModel
from .gil import GIL_KEYS, GilSampler


def camera_topics(num_cameras: int) -> list[str]:
    return [f"/bench/camera{i}/image_raw" for i in range(num_cameras)]


def graph_overrides(model: VLAModel, placement: Placement, partition: int, prefix_cores, suffix_cores,
                    max_in_flight: int) -> dict:
    source = {"model.preset": model.spec.name, "model.checkpoint": checkpoint_of(model)}
    common = {**source, "partition_point": partition, "dynamic_zone_min": -1, "dynamic_zone_max": -1,
              "diagnostics_period_s": 0.5}
    return {
        "hybrid_vla_prefix": {**common, "camera_topics": camera_topics(model.spec.num_cameras),
                              "image_transport": "raw", "input_policy": "lossless", "use_kinematic_state": False,
                              "max_in_flight": max_in_flight, "cores": list(prefix_cores),
                              "dtype": DTYPE_NAMES[placement.prefix_dtype], "device": str(placement.prefix_device.type)},
        "hybrid_vla_suffix": {**common, "cores": list(suffix_cores), "dtype": placement.suffix_name,
                              "frame_id": "base_link",
                              "boundary_dtype": DTYPE_NAMES[placement.prefix_dtype]},
        "hybrid_vla_scheduler": {"autostart": False, **source, "initial_partition": partition,
                                 "dynamic_zone_min": -1, "dynamic_zone_max": -1},
    }


def run_graph_mode(model: VLAModel, placement: Placement, partition: int, frames: int, prefix_cores, suffix_cores,
                   max_in_flight: int, processes: bool, prefix_extra: dict | None = None, window: int | None = None,
                   suffix_extra: dict | None = None, rate: float = 0.0, gil: bool = False) -> dict:
    """-> the mode's summary: period and latency (p50, p99), frames, drops, transports. prefix_extra,
    suffix_extra: more node parameters (an action-token model's pack, pack_groups); window: frames the replay
    keeps ahead of the answers (default max_in_flight); rate: replay at this multiple of the recorded camera
    rate (0: as fast as the graph answers); gil: one process only, sample each thread's GIL-held share
    (bench/gil.py, py-spy)."""
    if model.spec.name not in _presets() and not checkpoint_of(model):
        return {"skipped": "graph modes run named presets or checkpoint directories (the nodes load the model "
                           "themselves)"}
    context = set(model.spec.context)
    if context & {"pose", "history"}:
        return {"skipped": f"graph modes: the model needs the ego's pose and its history ({sorted(context)}), which "
                           f"the bench drive's readiness probe, stamped before any odometry, cannot have; the graph "
                           f"serves it from a drive with odometry (`hybrid-vla demo`)"}
    if "navigation" in context and not route_messages_available():
        return {"skipped": "graph modes: the model needs navigation, which the bench drive gives as an Autoware "
                           "LaneletRoute; autoware_planning_msgs is not importable here (scripts/setup.sh builds it "
                           "from ../shared/autoware_msgs, or source an Autoware install)"}
    from ..ros.launch_support.bringup import graph_params, write_combined_config
    from ..ros.demo import drive_graph
    work = Path(tempfile.mkdtemp(prefix="hvla_bench_"))
    bag, route = bench_drive(work, model, frames)
    overrides = graph_overrides(model, placement, partition, prefix_cores, suffix_cores, max_in_flight)
    overrides["hybrid_vla_prefix"].update(route)
    overrides["hybrid_vla_prefix"].update(prefix_extra or {})
    if "chunks" in (prefix_extra or {}):   # chunked prefill: the suffix sizes its boundary queue for it
        overrides["hybrid_vla_suffix"]["chunks"] = prefix_extra["chunks"]
    overrides["hybrid_vla_suffix"].update(suffix_extra or {})
    params = graph_params(overrides=overrides)
    config = write_combined_config(params, work / "graph.param.yaml")
    sampler = GilSampler() if gil and not processes else None
    summary, _ = drive_graph(bag, params, processes=processes, config=str(config), window=window or max_in_flight,
                             rate=rate, sampler=sampler)
    return {"partition": partition, "max_in_flight": max_in_flight, "chunks": params["hybrid_vla_prefix"]["chunks"],
            "frames": frames,
            "completed": summary["trajectories"], "dropped": summary["dropped"], "wall_s": summary["wall_s"],
            "duplicate_infos": summary["duplicate_infos"],
            "period_ms": summary["period_ms"], "latency_ms": summary["latency_ms"],
            "suffix_compute_ms": summary["suffix_compute_ms"], "suffix_queue_ms": summary["suffix_queue_ms"],
            "transport": ",".join(summary["transports"]),
            # one process: CPU ms per answered frame of each thread of it (executor, stage workers, output, ...)
            "thread_cpu_ms_per_frame": ms_per_frame(summary.get("thread_cpu_s", {}), summary["trajectories"])
                                       if not processes else {},
            **{key: summary[key] for key in GIL_KEYS if key in summary},
            "note": "raw images over DDS into the prefix node, trajectories out of the suffix node; period from "
                    "the arrival times of the suffix's per-frame info, latency from publish to that arrival"}


def route_messages_available() -> bool:
    """Whether the route's message package (autoware_planning_msgs, LaneletRoute) can be imported here."""
    import importlib.util
    return importlib.util.find_spec("autoware_planning_msgs") is not None


def bench_drive(work: Path, model: VLAModel, frames: int) -> tuple[Path, dict]:
    """-> (the drive bag of the model's synthetic frames, the prefix's route parameters): a model that needs
    navigation drives on our intersection map with a route (ros/bags/drives.py write_route_drive), else the sample
    drive."""
    from ..ros.demo import write_sample_drive
    topics = camera_topics(model.spec.num_cameras)
    if "navigation" not in model.spec.context:
        return write_sample_drive(work / "drive", model.spec, topics, frames, compressed=False), {}
    from ..ros.bags.drives import write_route_drive
    osm = work / "intersection.osm"
    bag = write_route_drive(work / "drive", model.spec, topics, osm, turn="left", frames=frames, compressed=False)
    return bag, {"map_path": str(osm), "route_lookahead_m": 10.0}


def thread_cpu_line(modes: dict) -> str:
    """CPU ms per frame by thread of the one-process graph beside the engine's pipelined mode (same threads)."""
    graph = (modes.get("graph") or {}).get("thread_cpu_ms_per_frame")
    if not graph:
        return ""
    engine = (modes.get("pipelined") or {}).get("thread_cpu_ms_per_frame") or {}
    cells = (f"{name} {ms:.1f}" + (f" (pipelined {engine[name]:.1f})" if name in engine else "")
             for name, ms in sorted(graph.items(), key=lambda kv: -kv[1]) if ms >= 0.5)
    return "graph (one process), CPU ms per frame by thread: " + ", ".join(cells)


def checkpoint_of(model: VLAModel) -> str:
    """The directory a checkpoint model was read from ('' for a preset)."""
    files = getattr(model, "checkpoint_files", None)
    return str(files.directory) if files is not None else ""


def _presets() -> set[str]:
    from ..model.presets import PRESETS
    return set(PRESETS)
