"""Measurement commands: bench (modes side by side, or the load-step scenario) and memory (profile: cli/profile.py)."""

from __future__ import annotations

from ..report import write_report
from .common import add_model_args, add_placement_args, model_from_args, placement_from_args


MODES_FRAMES, LOAD_STEP_FRAMES = 24, 80


def cmd_bench(args) -> int:
    from ..bench.modes import DEFAULT_MODES, plot_bench, run_bench
    from ..report import modes_table, progress_printer
    from ..engine.chunking import parse_chunks
    from ..engine.expert_split import frames_bench
    from ..errors import ConfigError
    if frames_bench.wants(args):   # a decode-heavy model: the reduced Alpamayo (engine/expert_split/frames_bench.py)
        return frames_bench.cli(args)
    if args.scenario == "faults":
        return bench_faults(args)
    if args.head == "action-tokens":
        return bench_actionflow(args)
    model = model_from_args(args, lazy=True)
    if args.scenario == "load-step":
        return bench_load_step(args, model)
    if args.scenario == "preprocess":
        return bench_preprocess(args, model)
    if args.scenario == "chunk-curve":
        return bench_chunk_curve(args, model)
    if args.scenario == "suffix-dtypes":
        return bench_suffix_dtypes(args, model)
    transports = tuple(t for t in args.transports.split(",") if t)
    modes = tuple(m for m in args.modes.split(",") if m)
    unknown = sorted(set(modes) - set(DEFAULT_MODES))
    if unknown:
        raise ConfigError(f"--modes: unknown {unknown}; known: {list(DEFAULT_MODES)}")
    report = run_bench(model, placement_from_args(args, model), num_frames=args.frames or MODES_FRAMES,
                       partition=args.partition, transports=transports, max_in_flight=args.max_in_flight,
                       warmup=args.warmup, modes=modes, progress=progress_printer("bench"), peer=not args.no_peer,
                       chunks=parse_chunks(args.chunks), gil=args.gil)
    write_report(report, args.json)
    if args.plot:
        plot_bench(report, args.plot)
    print(f"{report['preset']}: {report['num_blocks']} blocks, partition {report['partition']}, "
          f"{report['frames']} frames; {report['devices']['prefix']} | {report['devices']['suffix']}")
    print(modes_table(report))
    from ..bench.graph import thread_cpu_line
    threads_line = thread_cpu_line(report["modes"])
    if threads_line:
        print(threads_line)
    if args.gil:
        from ..bench.gil import gil_line
        print(gil_line(report["modes"].get("graph", {})))
    print(f"full report: {args.json}" if args.json else "(--json FILE writes the full report)")
    return 0


def bench_suffix_dtypes(args, model) -> int:
    from ..bench.dtypes import run_suffix_dtypes, suffix_dtypes_lines
    from ..report import progress_printer
    names = tuple(n for n in args.suffix_dtypes.split(",") if n)
    report = run_suffix_dtypes(model, args.prefix_device, args.dtype, names, args.frames or MODES_FRAMES,
                               args.warmup, progress_printer("bench"))
    write_report(report, args.json)
    print("\n".join(suffix_dtypes_lines(report)))
    return 0


def bench_load_step(args, model) -> int:
    from ..bench.scenario import plot_load_step, run_load_step
    from ..report import fmt, key_value_table, progress_printer
    zone = tuple(int(x) for x in args.zone.split(",")) if args.zone else None
    budget = int(args.prefix_budget_mb * 2**20) if args.prefix_budget_mb else None
    report = run_load_step(model, placement_from_args(args, model), frames=args.frames or LOAD_STEP_FRAMES, step_on=args.step_on,
                           progress=progress_printer("load-step"),
                           step_off=args.step_off if args.step_off > 0 else None, zone=zone, budget_bytes=budget,
                           sweep_frames=args.sweep_frames)
    write_report(report, args.json)
    if args.plot:
        plot_load_step(report, args.plot)
    ratio, sched, prior = report["scheduler_vs_best_static"], report["scheduler_period_ms"], report["prior"]
    print(f"load-step on {report['preset']} (zone {report['zone']}, load on frames {report['step_on_frame']}.."
          f"{report['step_off_frame']}, {report['sweep_frames_per_partition']} frames per static p)")
    print(key_value_table([
        ("scheduler period idle / loaded", f"{fmt(sched['idle'])} / {fmt(sched['loaded'])} ms"),
        ("vs best static idle / loaded", f"{fmt(ratio['idle'], '.3f')} / {fmt(ratio['loaded'], '.3f')}"),
        ("best static p idle / loaded", f"{report['best_static']['idle']} / {report['best_static']['loaded']}"),
        ("frames to recover / settle", f"{report['frames_to_recover']} / {report['frames_to_settle']}"),
        ("moves (frame, from, to)", report["moves"]),
        ("planner's prior vs best static idle", f"p = {prior['partition']} ({prior['blocks_off']:+d} blocks), predicted "
                                                f"{prior['predicted_period_ms']:.1f} ms vs measured "
                                                f"{prior['measured_best_period_ms']:.1f} ms ({prior['period_off']:+.0%})"),
        ("planner timed across the sweep", _across(report["plan_across_sweep"])),
        ("full report", args.json or "(--json FILE)")]))
    return 0


def _across(check: dict) -> str:
    passes = ", ".join(f"p {plan['best_p']} {plan['period_ms']:.1f} ms" for plan in check["plans"])
    return (f"p = {check['partition']} ({check['blocks_off']:+d} blocks), predicted {check['predicted_period_ms']:.1f} "
            f"ms ({check['period_off']:+.0%}); per pass: {passes}")


def bench_chunk_curve(args, model) -> int:
    from ..bench.chunk_curve import curve_table, plot_chunk_curve, run_chunk_curve
    from ..engine.cpu import core_plan
    from ..model.inputs import synthetic_frame
    from ..report import progress_printer
    placement = placement_from_args(args, model)
    prefix_cores, suffix_cores, _ = core_plan(placement)
    partition = args.partition if args.partition is not None else model.num_blocks // 2
    frames = [synthetic_frame(model.spec, seq) for seq in range((args.frames or MODES_FRAMES) + args.warmup)]
    chunkings = [c for c in args.chunks.split(",") if c] if "," in args.chunks else CURVE_DEFAULT
    report = run_chunk_curve(model, placement, partition, chunkings, frames, (prefix_cores, suffix_cores),
                             args.warmup, args.max_in_flight, progress_printer("chunk-curve"))
    write_report(report, args.json)
    if args.plot:
        plot_chunk_curve(report, args.plot)
    print(f"chunk-curve on {report['preset']} p={partition}, {report['sequence_length']} tokens, "
          f"{report['frames']} frames per point")
    print(curve_table(report))
    return 0


CURVE_DEFAULT = ("1", "2", "3", "4", "6", "8", "12", "16", "camera")


def bench_preprocess(args, model) -> int:
    from ..bench.preprocess import plot_preprocess, run_preprocess_bench
    from ..errors import ConfigError
    from ..report import key_value_table
    try:
        width, height = (int(v) for v in args.camera.lower().split("x"))
    except ValueError as exc:
        raise ConfigError(f"--camera '{args.camera}': expected WIDTHxHEIGHT, e.g. 1920x1080") from exc
    report = run_preprocess_bench(model, placement_from_args(args, model), width, height, args.frames or 10)
    write_report(report, args.json)
    if args.plot:
        plot_preprocess(report, args.plot)
    print(f"{report['preset']}: {report['cameras']} cameras x {report['camera']} -> {report['input']} on "
          f"{report['prefix_device']}, cores {report['cores']}")
    print(key_value_table([(k, f"{v['p50']:.1f} ms (p99 {v['p99']:.1f})") for k, v in report.items()
                           if k.endswith("_ms")]))
    return 0


def cmd_memory(args) -> int:
    from ..bench.memory import memory_report
    from ..report import key_value_table
    preset = None if args.checkpoint else (args.preset or "bench")
    zone = tuple(int(x) for x in args.zone.split(",")) if args.zone else None
    report = memory_report(args.checkpoint, preset, args.partition, zone, args.dtype, args.prefix_device)
    write_report(report, args.json)
    mib = 1024 ** 2
    rows = [("baseline (python + torch)", f"{report['stages']['prefix']['baseline_rss_bytes'] / mib:.0f} MiB")]
    for stage, r in report["stages"].items():
        rows.append((f"{stage}: weights (info) / resident",
                     f"{r['weight_bytes'] / mib:.1f} / {r['weights_rss_bytes'] / mib:.1f} MiB "
                     f"({r['weights_rss_over_weight_bytes']:.2f}x, {'within' if r['within_target'] else 'outside'} 15%)"))
        rows.append((f"{stage}: peak above baseline (code + weights)",
                     f"{r['peak_rss_above_baseline_bytes'] / mib:.1f} MiB (imports {r['imports_rss_bytes'] / mib:.1f} MiB)"))
    print(key_value_table(rows + [("full report", args.json or "(--json FILE)")]))
    return 0


def bench_actionflow(args) -> int:
    from ..bench.actionflow import plot_actionflow, run_actionflow_bench
    from ..errors import ConfigError
    from ..report import key_value_table, progress_printer
    if not (args.preset or args.checkpoint):
        args.preset = "bench-act"
    model = model_from_args(args)   # whole: the sequential reference decodes with HF's own forward
    try:
        packs = [int(k) for k in args.pack.split(",") if k]
    except ValueError as exc:
        raise ConfigError(f"--pack '{args.pack}': expected comma-separated integers, e.g. 1,2,4,8") from exc
    if args.repeat < 1:
        raise ConfigError(f"--repeat {args.repeat}: expected at least 1 run per configuration")
    report = run_actionflow_bench(model, packs, frames=args.frames or 24, partition=args.partition,
                                  progress=progress_printer("actionflow"), graph=args.graph, repeat=args.repeat)
    write_report(report, args.json)
    if args.plot:
        plot_actionflow(report, args.plot)
    rows = [("sequential (HF cache)", f"{report['sequential']['frames_per_s']:.2f} frames/s")]
    for k, e in report["pack"].items():
        split = report["split"]["pack"][k]
        rows.append((f"K={k}", f"unsplit {e['frames_per_s']:.2f} frames/s ({e['speedup_vs_sequential']:.2f}x), "
                               f"split {split['frames_per_s']:.2f} frames/s ({split['speedup_vs_sequential']:.2f}x, "
                               f"{split['slower_stage_fraction']:.0%} of the slower side; suffix in a thread "
                               f"{report['split_threads']['pack'][k]['frames_per_s']:.2f})"))
    for groups, e in report.get("graph", {}).get("pack_groups", {}).items():
        rows.append((f"graph K={report['graph']['pack']}, {groups} group(s)",
                     f"{e.get('frames_per_s', 0):.2f} frames/s, {e.get('completed')} of {e.get('frames')} frames, "
                     f"latency p50 {e.get('latency_ms', {}).get('p50') or 0:.0f} ms"))
    print(key_value_table(rows + [("exact", report["exact"]), ("full report", args.json or "(--json FILE)")]))
    return 0 if report["exact"] else 1


def bench_faults(args) -> int:
    from ..bench.faults import plot_faults, run_faults
    from ..report import key_value_table, progress_printer
    report = run_faults(preset=args.preset or "tiny", soak_frames=args.soak_frames,
                        progress=progress_printer("faults"))
    write_report(report, args.json)
    if args.plot:
        plot_faults(report, args.plot)
    rows = [(k["node"], f"recovered {k['recovered']}, first trajectory after {k['seconds_to_first_trajectory']} s, "
                        f"lost {k['lost_in_killed_process']}, dropped {k['dropped_counted']}, unaccounted "
                        f"{k['frames_unaccounted']}") for k in report["kills"]]
    sb = report["standby"]
    rows.append(("suffix with warm standby", f"first trajectory after {sb['seconds_to_first_trajectory']} s, lost "
                                            f"{sb['lost_in_killed_process']}, dropped {sb['dropped_counted']}, "
                                            f"unaccounted {sb['frames_unaccounted']}, published twice "
                                            f"{sb['published_twice']}"))
    rows += [(f"soak {m}", f"{s['frames']} frames, RSS {s['rss_growth_fraction']:+.2%}, fds {s['fds_at_base']}->"
                           f"{s['fds_at_end']}, burst {s['burst']['delivered']}/{s['burst']['frames']} delivered, "
                           f"unaccounted {s['frames_unaccounted']}") for m, s in report["soak"]["modes"].items()]
    print(key_value_table(rows + [("full report", args.json or "(--json FILE)")]))
    unaccounted = sum(k["frames_unaccounted"] for k in report["kills"] + [sb]) + report["soak"]["frames_unaccounted"]
    return 0 if all(k["recovered"] for k in report["kills"] + [sb]) and not unaccounted and not sb["published_twice"] \
        else 1


def register(sub) -> None:
    from ..engine.expert_split import frames_bench
    p = sub.add_parser("bench", help="native vs serial vs pipelined (each transport), one run, JSON + plot")
    add_model_args(p, default_preset="bench"); add_placement_args(p)
    p.add_argument("--partition", type=int, default=None, help="default: the planner's best cut for this machine "
                                                               "(hybrid-vla plan)")
    p.add_argument("--frames", type=int, default=None,
                   help=f"frames measured (default {MODES_FRAMES} for modes, {LOAD_STEP_FRAMES} for load-step)")
    p.add_argument("--warmup", type=int, default=3)
    p.add_argument("--max-in-flight", type=int, default=2)
    p.add_argument("--transports", default="inproc,shm,inline", help="handovers of the pipelined modes")
    p.add_argument("--modes", default="native,native_all_cores,serial,pipelined,serial_chunked,pipelined_chunked,graph,"
                   "graph_processes",
                   help="modes to run side by side (graph: the three ROS nodes in one process; graph_processes: "
                        "one process per node)")
    p.add_argument("--chunks", default="4", help="chunked prefill of the *_chunked modes: a count 2..64 or 'camera' "
                   "(one chunk per camera); chunk-curve: a comma list (default 1,2,3,4,6,8,12,16,camera)")
    p.add_argument("--gil", action="store_true", help="the one-process graph mode also samples each thread's "
                   "GIL-held share with py-spy (its sampling costs a little CPU: off by default)")
    p.add_argument("--no-peer", action="store_true", help="with CUDA: skip the accelerate device_map peer")
    p.add_argument("--json", default=None, help="write the full report (with per-frame timelines) here")
    p.add_argument("--plot", default=None, help="write the timeline/period PNG here")
    p.add_argument("--suffix-dtypes", default="fp32,bf16,int8",
                   help="suffix-dtypes: the CPU suffix's dtypes, each at its planned cut")
    p.add_argument("--scenario", default="modes",
                   choices=("modes", "load-step", "preprocess", "faults", "chunk-curve", "suffix-dtypes",
                            "decode-heavy"),
                   help="modes: native/serial/pipelined side by side; load-step: scheduler under a competing load; "
                        "preprocess: decoding and resize/normalise of camera frames of --camera size; faults: "
                        "SIGKILL each node of a supervised graph mid-drive, then a soak (tiny preset unless "
                        "--preset names another); suffix-dtypes: serial and pipelined with the suffix in each "
                        "--suffix-dtypes at its planned cut; decode-heavy (or --preset alpamayo-bench): the "
                        "reduced Alpamayo, native vs split-serial vs pipelined across frames")
    p.add_argument("--head", default="waypoints", choices=("waypoints", "action-tokens"),
                   help="action-tokens: ActionFlow packed decoding vs sequential (default preset bench-act)")
    p.add_argument("--pack", default="1,2,4,8", help="action-tokens: frames in flight K to compare")
    p.add_argument("--repeat", type=int, default=1,
                   help="action-tokens and decode-heavy: run each configuration this many times, interleaved; report "
                        "the median")
    p.add_argument("--graph", action="store_true",
                   help="action-tokens: also the ROS graph (nodes in separate processes) at the largest K, with "
                        "one and two packed groups")
    frames_bench.add_args(p)
    p.add_argument("--soak-frames", type=int, default=1500, help="faults: frames per soak mode (10000: the long one)")
    p.add_argument("--camera", default="1920x1080", help="preprocess: camera size WIDTHxHEIGHT")
    p.add_argument("--step-on", type=int, default=25, help="load-step: frame at which the load starts")
    p.add_argument("--step-off", type=int, default=55, help="load-step: frame at which it stops (0: never)")
    p.add_argument("--zone", default=None, help="load-step: dynamic zone 'lo,hi' (default 0,L)")
    p.add_argument("--prefix-budget-mb", type=float, default=0.0, help="load-step: prefix memory budget (0: none)")
    p.add_argument("--sweep-frames", type=int, default=12, help="load-step: frames per static p in the sweep")
    p.set_defaults(func=cmd_bench)

    p = sub.add_parser("memory", help="each stage in a process of its own: peak RSS vs the weight bytes info reports")
    add_model_args(p, default_preset="bench")
    p.add_argument("--partition", type=int, required=True)
    p.add_argument("--zone", default=None, help="dynamic zone 'lo,hi' (default: as info)")
    p.add_argument("--dtype", default="fp32", help="stage dtype: fp32, bf16, fp16")
    p.add_argument("--prefix-device", default="cpu", help="cpu or cuda (peak_cuda_bytes)")
    p.add_argument("--json", default=None)
    p.set_defaults(func=cmd_memory)

