"""`hybrid-vla bench`: which scenario runs, and the default one: the modes (native, serial, pipelined, graph, ...)
side by side on one model."""

from __future__ import annotations

from ..common import model_from_args, placement_from_args, save_report
from .expert_split import cmd_expert_split, wants
from .scenarios import MODES_FRAMES, WITH_MODEL, bench_actionflow, bench_faults, bench_token_modes


def cmd_bench(args) -> int:
    from ...bench.modes import DEFAULT_MODES, plot_bench, run_bench
    from ...report import modes_table, progress_printer
    from ...engine.chunking import parse_chunks
    from ...errors import ConfigError
    if wants(args):   # a decode-heavy model: the reduced Alpamayo (cli/bench/expert_split.py)
        return cmd_expert_split(args)
    if args.scenario == "faults":
        return bench_faults(args)
    if args.head == "action-tokens":
        return bench_actionflow(args)
    from ..common import model_kind
    if model_kind(args) == "tokens" and args.scenario == "modes":   # an action-token model: native, serial, pipelined
        return bench_token_modes(args)
    model = model_from_args(args, lazy=True)
    if args.scenario in WITH_MODEL:
        return WITH_MODEL[args.scenario](args, model)
    transports = tuple(t for t in args.transports.split(",") if t)
    modes = tuple(m for m in args.modes.split(",") if m)
    unknown = sorted(set(modes) - set(DEFAULT_MODES))
    if unknown:
        raise ConfigError(f"--modes: unknown {unknown}; known: {list(DEFAULT_MODES)}")
    report = run_bench(model, placement_from_args(args, model), num_frames=args.frames or MODES_FRAMES,
                       partition=args.partition, transports=transports, max_in_flight=args.max_in_flight,
                       warmup=args.warmup, modes=modes, progress=progress_printer("bench"), peer=not args.no_peer,
                       chunks=parse_chunks(args.chunks), gil=args.gil)
    save_report(report, args, plot_bench)
    print(f"{report['preset']}: {report['num_blocks']} blocks, partition {report['partition']}, "
          f"{report['frames']} frames; {report['devices']['prefix']} | {report['devices']['suffix']}")
    print(modes_table(report))
    from ...bench.graph import thread_cpu_line
    threads_line = thread_cpu_line(report["modes"])
    if threads_line:
        print(threads_line)
    if args.gil:
        from ...bench.gil import gil_line
        print(gil_line(report["modes"].get("graph", {})))
    print(f"full report: {args.json}" if args.json else "(--json FILE writes the full report)")
    return 0
