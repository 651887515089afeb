"""`hybrid-vla eval --closed-loop`: its options and its run (cli/learn.py registers them on `eval`)."""

from __future__ import annotations

import sys


def add_args(parser) -> None:
    group = parser.add_argument_group("closed loop (issue 41)")
    group.add_argument("--closed-loop", action="store_true",
                       help="drive held-out scenarios in closed loop under each mode's timing instead of the "
                            "open-loop ADE/FDE (default model: the shipped builtin:drive)")
    group.add_argument("--scenarios", type=int, default=20, help="closed loop: scenarios, seeds --seed .. (default 20)")
    group.add_argument("--timing", default="measured,orion-paper",
                       help="closed loop: comma-separated timing profiles: measured (this machine's stage times of "
                            "the engine), orion-paper (the paper's ORION figures) (default both)")
    group.add_argument("--lights", action="store_true",
                       help="closed loop: a traffic light on every route (the renderer draws no light and the "
                            "shipped model never saw one: it measures red-light counting, not the model)")
    group.add_argument("--oracle", action="store_true",
                       help="closed loop: the drives' ground-truth driver as the policy instead of the model")


def run(args) -> int:
    from ..learn.closed_loop.evaluate import evaluate, plot_paths, table_lines
    from ..learn.closed_loop.policy import ModelPolicy, OraclePolicy
    from ..report import progress_printer, write_report
    if args.oracle:
        policy = OraclePolicy()
    else:
        from .common import model_from_args
        if not args.preset and not args.checkpoint:
            args.checkpoint = "builtin:drive"
        policy = ModelPolicy(model_from_args(args))
    profiles = tuple(p for p in args.timing.split(",") if p)
    report = evaluate(policy, args.scenarios, args.seed, profiles, args.lights, progress_printer("closed loop"))
    write_report(report, args.json)
    if args.plot:
        plot_paths(report, args.plot)
    for profile, st in report["stage_ms"].items():
        print(f"{profile}: native {st['native']:.1f} ms, prefix {st['prefix']:.1f} ms, handover {st['transfer']:.2f} "
              f"ms, suffix {st['suffix']:.1f} ms ({st['source']})")
    print(f"policy {report['policy']}, {report['scenarios']} held-out scenarios (seeds {report['seeds'][0]}.."
          f"{report['seeds'][-1]}), lights {'on' if report['lights'] else 'off'}; {report['note']}")
    print("\n".join(table_lines(report)))
    print(f"full report: {args.json or '(--json FILE)'}" + (f", paths: {args.plot}" if args.plot else ""),
          file=sys.stderr)
    return 0
