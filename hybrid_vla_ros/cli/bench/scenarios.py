"""`hybrid-vla bench --scenario ...` on one model: load-step, chunk-curve, preprocess, suffix-dtypes; and
`--head action-tokens` (ActionFlow packed decoding) and `--scenario faults` (kills and a soak)."""

from __future__ import annotations

from ...report import write_report
from ..common import model_from_args, placement_from_args, save_report

MODES_FRAMES, LOAD_STEP_FRAMES = 24, 80
DEFAULT_MODES = "native,native_all_cores,serial,pipelined,serial_chunked,pipelined_chunked,graph,graph_processes"


def bench_suffix_dtypes(args, model) -> int:
    from ...bench.dtypes import run_suffix_dtypes, suffix_dtypes_lines
    from ...report import progress_printer
    names = tuple(n for n in args.suffix_dtypes.split(",") if n)
    report = run_suffix_dtypes(model, args.prefix_device, args.dtype, names, args.frames or MODES_FRAMES,
                               args.warmup, progress_printer("bench"))
    write_report(report, args.json)
    print("\n".join(suffix_dtypes_lines(report)))
    return 0


def bench_load_step(args, model) -> int:
    from ...bench.scenario import plot_load_step, run_load_step
    from ...report import fmt, key_value_table, progress_printer
    zone = tuple(int(x) for x in args.zone.split(",")) if args.zone else None
    budget = int(args.prefix_budget_mb * 2**20) if args.prefix_budget_mb else None
    report = run_load_step(model, placement_from_args(args, model), frames=args.frames or LOAD_STEP_FRAMES, step_on=args.step_on,
                           progress=progress_printer("load-step"),
                           step_off=args.step_off if args.step_off > 0 else None, zone=zone, budget_bytes=budget,
                           sweep_frames=args.sweep_frames)
    save_report(report, args, plot_load_step)
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
    from ...bench.chunk_curve import curve_table, plot_chunk_curve, run_chunk_curve
    from ...engine.cpu import core_plan
    from ...model.inputs import synthetic_frame
    from ...report import progress_printer
    placement = placement_from_args(args, model)
    prefix_cores, suffix_cores, _ = core_plan(placement)
    partition = args.partition if args.partition is not None else model.num_blocks // 2
    frames = [synthetic_frame(model.spec, seq) for seq in range((args.frames or MODES_FRAMES) + args.warmup)]
    chunkings = [c for c in args.chunks.split(",") if c] if "," in args.chunks else CURVE_DEFAULT
    report = run_chunk_curve(model, placement, partition, chunkings, frames, (prefix_cores, suffix_cores),
                             args.warmup, args.max_in_flight, progress_printer("chunk-curve"))
    save_report(report, args, plot_chunk_curve)
    print(f"chunk-curve on {report['preset']} p={partition}, {report['sequence_length']} tokens, "
          f"{report['frames']} frames per point")
    print(curve_table(report))
    return 0


CURVE_DEFAULT = ("1", "2", "3", "4", "6", "8", "12", "16", "camera")


def bench_preprocess(args, model) -> int:
    from ...bench.preprocess import plot_preprocess, run_preprocess_bench
    from ...errors import ConfigError
    from ...report import key_value_table
    try:
        width, height = (int(v) for v in args.camera.lower().split("x"))
    except ValueError as exc:
        raise ConfigError(f"--camera '{args.camera}': expected WIDTHxHEIGHT, e.g. 1920x1080") from exc
    report = run_preprocess_bench(model, placement_from_args(args, model), width, height, args.frames or 10)
    save_report(report, args, plot_preprocess)
    print(f"{report['preset']}: {report['cameras']} cameras x {report['camera']} -> {report['input']} on "
          f"{report['prefix_device']}, cores {report['cores']}")
    print(key_value_table([(k, f"{v['p50']:.1f} ms (p99 {v['p99']:.1f})") for k, v in report.items()
                           if k.endswith("_ms")]))
    return 0


def bench_token_modes(args) -> int:
    """An action-token model with the default bench: native, serial and pipelined (bench/action_tokens/modes.py), at the
    largest --pack."""
    from ...bench.action_tokens.modes import plot_token_modes, run_token_modes, token_modes_lines
    from ...report import progress_printer
    from ..common import refuse_placement_for_tokens
    refuse_placement_for_tokens(args, "benched")
    report = run_token_modes(model_from_args(args), frames=args.frames or MODES_FRAMES, pack=max(packs_of(args)),
                             partition=args.partition, progress=progress_printer("bench"))
    save_report(report, args, plot_token_modes)
    print("\n".join(token_modes_lines(report)))
    print(f"full report: {args.json}" if args.json else "(--json FILE writes the full report)")
    return 0 if report["exact"] else 1


def packs_of(args) -> list[int]:
    from ...errors import ConfigError
    try:
        packs = [int(k) for k in args.pack.split(",") if k]
    except ValueError as exc:
        raise ConfigError(f"--pack '{args.pack}': expected comma-separated integers, e.g. 1,2,4,8") from exc
    if not packs or min(packs) < 1:
        raise ConfigError(f"--pack '{args.pack}': expected one or more frame counts of at least 1, e.g. 1,2,4,8")
    return packs


def bench_actionflow(args) -> int:
    from ...bench.action_tokens.packs import plot_actionflow, run_actionflow_bench
    from ...errors import ConfigError
    from ...report import key_value_table, progress_printer
    if not (args.preset or args.checkpoint):
        args.preset = "bench-act"
    model = model_from_args(args)   # whole: the sequential reference decodes with HF's own forward
    packs = packs_of(args)
    repeat = 1 if args.repeat is None else args.repeat
    if repeat < 1:
        raise ConfigError(f"--repeat {repeat}: expected at least 1 run per configuration")
    report = run_actionflow_bench(model, packs, frames=args.frames or 24, partition=args.partition,
                                  progress=progress_printer("actionflow"), graph=args.graph, repeat=repeat)
    save_report(report, args, plot_actionflow)
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
    from ...bench.faults import plot_faults, run_faults
    from ...report import key_value_table, progress_printer
    report = run_faults(preset=args.preset or "tiny", soak_frames=args.soak_frames,
                        progress=progress_printer("faults"))
    save_report(report, args, plot_faults)
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


def bench_encode_once_windows(args, model) -> int:
    """encode-once for a model reading its history (bench/windows.py): full vs each image once."""
    from ...bench.windows import plot, run_windows, table
    report = run_windows(model, args.frames or 24, args.partition)
    save_report(report, args, plot)
    print("\n".join(table(report)))
    print(f"full report: {args.json}" if args.json else "(--json FILE writes the full report)")
    return 0 if report["exact"] else 1


WITH_MODEL = {"load-step": bench_load_step, "preprocess": bench_preprocess, "chunk-curve": bench_chunk_curve,
              "suffix-dtypes": bench_suffix_dtypes, "encode-once": bench_encode_once_windows}
