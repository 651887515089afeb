"""`hybrid-vla`: the engine (verify, info, run, export, profile, bench), the ROS graph (run --graph/--config,
demo) and rosbag2 tools (record, replay, make-sample-drive), plus the parameter schemas (schema)."""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from pathlib import Path

import torch

from .engine.placement import Placement, parse_dtype
from .engine.stages import PrefixStage, SuffixStage, check_partition, partition_report
from .engine.verify import verify_partitions
from .errors import HybridVLAError
from .model.checkpoint import save_checkpoint
from .model.inputs import synthetic_frame
from .model.load import load_vla
from .model.spec import PRESETS


def add_model_args(parser: argparse.ArgumentParser, default_preset: str | None = "tiny") -> None:
    group = parser.add_mutually_exclusive_group()
    group.add_argument("--preset", default=None, help=f"named preset, one of {sorted(PRESETS)} (default {default_preset})")
    group.add_argument("--checkpoint", default=None, help="local checkpoint directory (hybrid_vla.json + model.safetensors)")
    parser.set_defaults(default_preset=default_preset)


def add_placement_args(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--prefix-device", default="auto", help="auto (cuda if available), cuda, or cpu")
    parser.add_argument("--dtype", default="fp32", help="prefix dtype: fp32, bf16, fp16")
    parser.add_argument("--suffix-dtype", default=None, help="CPU suffix dtype (default: same as --dtype)")


def model_from_args(args, shapes_only: bool = False):
    preset = args.preset if args.preset or args.checkpoint else args.default_preset
    return load_vla(preset=preset, checkpoint=args.checkpoint, shapes_only=shapes_only)


def placement_from_args(args) -> Placement:
    return Placement.create(args.prefix_device, args.dtype, args.suffix_dtype or args.dtype)


def emit(result: dict, as_json: bool, text_lines) -> None:
    if as_json:
        print(json.dumps(result, indent=2))
    else:
        for line in text_lines(result):
            print(line)


def cmd_verify(args) -> int:
    model = model_from_args(args)
    result = verify_partitions(model, placement_from_args(args), frames=args.frames)
    emit(result, args.json, lambda r: [f"{r['preset']} ({r['family']}, {r['num_blocks']} blocks, {r['dtype']})"] +
         [f"  p={x['partition']:3d}  max_abs_diff={x['max_abs_diff']:.3e}" for x in r["results"]])
    return 0 if result["max_abs_diff"] <= args.tolerance else 1


def cmd_info(args) -> int:
    model = model_from_args(args, shapes_only=True)
    dtype = parse_dtype(args.dtype or ("fp16" if model.spec.shape_only else "fp32"))
    model = model.to(dtype)
    partition = check_partition(args.partition if args.partition is not None else model.num_blocks // 2,
                                model.num_blocks, "--partition")
    zone = tuple(int(x) for x in args.zone.split(",")) if args.zone else None
    result = partition_report(model, partition, zone)
    gib = 1024 ** 3
    emit(result, args.json, lambda r: [
        f"{r['preset']} ({r['family']}), {r['num_blocks']} blocks, partition {r['partition']}, {r['dtype']}",
        f"  prefix: {r['prefix_blocks']} blocks + vision + embeddings  {r['prefix_params']:,} params  {r['prefix_bytes'] / gib:.3f} GiB",
        f"  suffix: {r['suffix_blocks']} blocks + norm + head          {r['suffix_params']:,} params  {r['suffix_bytes'] / gib:.3f} GiB",
        f"  total:  {r['total_params']:,} params  {r['total_bytes'] / gib:.3f} GiB",
        f"  dynamic zone {r['zone']}: {r['zone_bytes'] / gib:.3f} GiB resident on both sides -> prefix device holds "
        f"{r['prefix_resident_bytes'] / gib:.3f} GiB, CPU {r['suffix_resident_bytes'] / gib:.3f} GiB"])
    return 0


def cmd_run(args) -> int:
    if args.config or args.graph:
        from .ros.bringup import graph_params, run_in_process, run_processes
        if args.processes:
            return run_processes(args.config)
        return run_in_process(graph_params(args.config))
    model = model_from_args(args)
    placement = placement_from_args(args)
    partition = check_partition(args.partition if args.partition is not None else model.num_blocks // 2,
                                model.num_blocks, "--partition")
    prefix, suffix = PrefixStage(model, partition, placement), SuffixStage(model, partition, placement)
    torch.set_num_threads(args.threads) if args.threads else None
    print(f"# {model.spec.name}: {model.num_blocks} blocks, partition {partition}, {placement.describe()}")
    totals = []
    for seq in range(args.frames):
        t0 = time.perf_counter()
        state = prefix.run(synthetic_frame(model.spec, seq))
        traj = suffix.run(state)
        total = (time.perf_counter() - t0) * 1e3
        totals.append(total)
        last = traj.waypoints[-1]
        print(f"frame {seq:4d}  prefix {state.timings['prefix_ms']:8.2f} ms  suffix {state.timings['suffix_ms']:8.2f} ms  "
              f"total {total:8.2f} ms  last waypoint x={last.x:+.3f} y={last.y:+.3f} t={last.time_from_start:.1f}s")
    print(f"# median total {statistics.median(totals):.2f} ms over {len(totals)} frames")
    return 0


def cmd_bench(args) -> int:
    from .engine.bench import headline, plot_bench, run_bench, write_report
    model = model_from_args(args)
    if args.scenario == "load-step":
        return bench_load_step(args, model)
    transports = tuple(t for t in args.transports.split(",") if t)
    report = run_bench(model, placement_from_args(args), num_frames=args.frames, partition=args.partition,
                       transports=transports, max_in_flight=args.max_in_flight, warmup=args.warmup)
    write_report(report, args.json)
    if args.plot:
        plot_bench(report, args.plot)
    print(json.dumps(headline(report), indent=2))
    return 0


def cmd_demo(args) -> int:
    import os
    # A self-contained showcase: keep DDS discovery on this machine unless the user's environment says otherwise.
    os.environ.setdefault("ROS_AUTOMATIC_DISCOVERY_RANGE", "LOCALHOST")
    from .ros.demo import SAMPLE_DRIVE, run_demo
    summary = run_demo(args.out, bag=args.bag or SAMPLE_DRIVE, config=args.config, rate=args.rate,
                       storage=args.storage, processes=args.processes)
    shown = {k: v for k, v in summary.items() if k != "partition_over_time"}
    shown["partition_changes"] = [pt for i, pt in enumerate(summary["partition_over_time"])
                                  if i == 0 or pt[1] != summary["partition_over_time"][i - 1][1]]
    print(json.dumps(shown, indent=2))
    return 0 if summary["trajectories"] > 0 else 1


def _with_node(fn):
    import rclpy
    from rclpy.executors import SingleThreadedExecutor
    from rclpy.node import Node
    rclpy.init()
    node = Node("hybrid_vla_bag")
    executor = SingleThreadedExecutor()
    executor.add_node(node)
    try:
        return fn(node, lambda t: executor.spin_once(timeout_sec=t))
    except KeyboardInterrupt:
        return 0
    finally:
        node.destroy_node()
        rclpy.shutdown()


def cmd_record(args) -> int:
    from .ros.bag import Recorder
    topics = dict(t.split(":", 1) for t in args.topics)

    def record(node, spin):
        recorder = Recorder(node, args.out, topics, args.storage)
        end = time.monotonic() + args.duration
        try:
            while time.monotonic() < end:
                spin(0.05)
        finally:
            print(json.dumps({"bag": args.out, "messages": recorder.close()}))
        return 0
    return _with_node(record)


def cmd_replay(args) -> int:
    from .ros.bag import Replayer

    def replay(node, spin):
        replayer = Replayer(node, args.bag)
        replayer.wait_for_subscribers(5.0, spin)
        # open loop: nothing answers a plain replay, so rate 0 means "publish as fast as possible"
        frames = replayer.run(spin, answered=lambda: 1 << 30, rate=args.rate)
        print(json.dumps({"bag": args.bag, "frames": frames, "topics": replayer.topics()}))
        return 0
    return _with_node(replay)


def cmd_make_sample_drive(args) -> int:
    import yaml
    from .ros.bringup import config_dir
    from .ros.demo import write_sample_drive
    topics = yaml.safe_load((config_dir() / "hybrid_vla_prefix.param.yaml").read_text())["/**"]["ros__parameters"]["camera_topics"]
    spec = PRESETS[args.preset]
    topics = topics if len(topics) == spec.num_cameras else [f"/sensing/camera/camera{i}/image_rect_color/compressed"
                                                            for i in range(spec.num_cameras)]
    path = write_sample_drive(args.out, args.preset, topics, args.frames, args.rate_hz, args.storage)
    print(f"wrote {args.frames} frames x {spec.num_cameras} cameras to {path}")
    return 0


def cmd_schema(args) -> int:
    from .ros.params import NODE_PARAMS, node_schema
    for node in NODE_PARAMS:
        text = json.dumps(node_schema(node), indent=2) + "\n"
        if args.out:
            Path(args.out, f"{node}.schema.json").write_text(text)
        else:
            print(text)
    return 0


def cmd_profile(args) -> int:
    from .engine.profile import profile_report
    report = profile_report(model_from_args(args), placement_from_args(args), frames=args.frames)
    text = json.dumps(report, indent=2)
    if args.json:
        Path(args.json).parent.mkdir(parents=True, exist_ok=True)
        Path(args.json).write_text(text)
    print(text)
    return 0


def bench_load_step(args, model) -> int:
    from .engine.bench import write_report
    from .engine.scenario import plot_load_step, run_load_step
    zone = tuple(int(x) for x in args.zone.split(",")) if args.zone else None
    budget = int(args.prefix_budget_mb * 2**20) if args.prefix_budget_mb else None
    report = run_load_step(model, placement_from_args(args), frames=args.frames, step_on=args.step_on,
                           step_off=args.step_off if args.step_off > 0 else None, zone=zone, budget_bytes=budget,
                           sweep_frames=args.sweep_frames)
    write_report(report, args.json)
    if args.plot:
        plot_load_step(report, args.plot)
    print(json.dumps({k: v for k, v in report.items() if k != "timeline"}, indent=2))
    return 0


def cmd_export(args) -> int:
    model = model_from_args(args)
    path = save_checkpoint(model, args.out)
    print(f"wrote checkpoint of '{model.spec.name}' to {path}")
    return 0


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="hybrid-vla", description=__doc__)
    sub = parser.add_subparsers(dest="command", required=True)

    p = sub.add_parser("verify", help="split vs unsplit output for every partition point")
    add_model_args(p); add_placement_args(p)
    p.add_argument("--frames", type=int, default=2)
    p.add_argument("--tolerance", type=float, default=1e-6, help="exit 1 if any difference exceeds this")
    p.add_argument("--json", action="store_true")
    p.set_defaults(func=cmd_verify)

    p = sub.add_parser("info", help="blocks, parameters and bytes on each side of a partition")
    add_model_args(p)
    p.add_argument("--partition", type=int, default=None)
    p.add_argument("--dtype", default=None, help="dtype to size the weights in (default fp16 for shape-only presets)")
    p.add_argument("--zone", default=None, help="dynamic zone 'lo,hi': report the memory its residency costs")
    p.add_argument("--json", action="store_true")
    p.set_defaults(func=cmd_info)

    p = sub.add_parser("run", help="stream synthetic frames through prefix then suffix (serial)")
    add_model_args(p); add_placement_args(p)
    p.add_argument("--partition", type=int, default=None)
    p.add_argument("--frames", type=int, default=5)
    p.add_argument("--threads", type=int, default=0)
    p.add_argument("--config", default=None, help="start the ROS graph from this params YAML (keys = node names)")
    p.add_argument("--graph", action="store_true", help="start the ROS graph from the package's config/ files")
    p.add_argument("--processes", action="store_true", help="graph as separate processes (suffix pinned)")
    p.set_defaults(func=cmd_run)

    p = sub.add_parser("demo", help="graph + sample drive replay + trajectory bag + summary + PNG report")
    p.add_argument("--out", default="out/demo")
    p.add_argument("--bag", default=None, help="rosbag2 folder to replay (default: the shipped sample drive)")
    p.add_argument("--config", default=None)
    p.add_argument("--rate", type=float, default=0.0, help="0: as fast as the graph takes it; 1: recorded rate")
    p.add_argument("--storage", default="mcap", choices=("mcap", "sqlite3"))
    p.add_argument("--processes", action="store_true")
    p.set_defaults(func=cmd_demo)

    p = sub.add_parser("record", help="record topics to a rosbag2 folder")
    p.add_argument("--out", required=True)
    p.add_argument("--topics", nargs="+", required=True, help="TOPIC:TYPE, e.g. /a:nav_msgs/msg/Path")
    p.add_argument("--duration", type=float, default=10.0)
    p.add_argument("--storage", default="mcap", choices=("mcap", "sqlite3"))
    p.set_defaults(func=cmd_record)

    p = sub.add_parser("replay", help="publish a rosbag2 folder")
    p.add_argument("bag")
    p.add_argument("--rate", type=float, default=1.0, help="1: recorded rate, 2: twice as fast, 0: as fast as possible")
    p.set_defaults(func=cmd_replay)

    p = sub.add_parser("make-sample-drive", help="write a synthetic drive bag for a preset")
    p.add_argument("--preset", default="bench")
    p.add_argument("--out", required=True)
    p.add_argument("--frames", type=int, default=40)
    p.add_argument("--rate-hz", type=float, default=10.0)
    p.add_argument("--storage", default="mcap", choices=("mcap", "sqlite3"))
    p.set_defaults(func=cmd_make_sample_drive)

    p = sub.add_parser("schema", help="write the JSON schema of each node's parameters")
    p.add_argument("--out", default=None, help="directory (default: print)")
    p.set_defaults(func=cmd_schema)

    p = sub.add_parser("bench", help="native vs serial vs pipelined (each transport), one run, JSON + plot")
    add_model_args(p, default_preset="bench"); add_placement_args(p)
    p.add_argument("--partition", type=int, default=None, help="default: balanced from a quick profile")
    p.add_argument("--frames", type=int, default=24)
    p.add_argument("--warmup", type=int, default=3)
    p.add_argument("--max-in-flight", type=int, default=2)
    p.add_argument("--transports", default="inproc,shm,serialized")
    p.add_argument("--json", default=None, help="write the full report (with per-frame timelines) here")
    p.add_argument("--plot", default=None, help="write the timeline/period PNG here")
    p.add_argument("--scenario", default="modes", choices=("modes", "load-step"),
                   help="modes: native/serial/pipelined side by side; load-step: scheduler under a competing load")
    p.add_argument("--step-on", type=int, default=25, help="load-step: frame at which the load starts")
    p.add_argument("--step-off", type=int, default=55, help="load-step: frame at which it stops (0: never)")
    p.add_argument("--zone", default=None, help="load-step: dynamic zone 'lo,hi' (default 0,L)")
    p.add_argument("--prefix-budget-mb", type=float, default=0.0, help="load-step: prefix memory budget (0: none)")
    p.add_argument("--sweep-frames", type=int, default=8, help="load-step: frames per static p in the sweep")
    p.set_defaults(func=cmd_bench)

    p = sub.add_parser("profile", help="per-block times per device, handover cost, bf16 suffix speed and accuracy")
    add_model_args(p, default_preset="bench"); add_placement_args(p)
    p.add_argument("--frames", type=int, default=3)
    p.add_argument("--json", default=None)
    p.set_defaults(func=cmd_profile)

    p = sub.add_parser("export", help="write a preset's weights as a local safetensors checkpoint")
    add_model_args(p)
    p.add_argument("--out", required=True)
    p.set_defaults(func=cmd_export)
    return parser


def main(argv=None) -> int:
    args = build_parser().parse_args(argv)
    try:
        return args.func(args)
    except HybridVLAError as exc:
        print(f"hybrid-vla {args.command}: error: {exc}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
