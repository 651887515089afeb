"""`hybrid-vla bench --preset alpamayo-bench`: the Alpamayo split measured on the reduced Alpamayo 1.5
(bench/expert_split/). `--scenario decode-heavy` (the preset's default): native vs serial vs pipelined across
frames; `--scenario split-phases`: native vs split-serial per phase, one frame at a time, at each of --cuts;
`--scenario encode-once`: every window's images encoded vs each image once, over a drive of sliding windows.
Any other Alpamayo model (`--preset tiny-alpamayo-r1` / `tiny-alpamayo-1.5`, `--checkpoint` a release directory)
runs decode-heavy on itself."""

from __future__ import annotations

from ...bench.expert_split import PRESET
from ...report import write_report
from ..common import save_report

SCENARIOS = ("decode-heavy", "split-phases", "encode-once")


def add_args(parser) -> None:
    """The reduced Alpamayo's own options on `hybrid-vla bench` (the rest: --partition, --frames, --warmup,
    --max-in-flight, --repeat, --json, --plot)."""
    parser.add_argument("--reasoning-tokens", type=int, default=None,
                        help=f"--preset {PRESET}: reasoning tokens per frame (max_new_tokens; default 32, "
                             f"split-phases 16)")
    parser.add_argument("--flow-steps", type=int, default=None,
                        help=f"--preset {PRESET}: Euler steps of the action expert (default 10)")
    parser.add_argument("--guidance", action="store_true",
                        help=f"--preset {PRESET}: Alpamayo 1.5's classifier-free guidance (a second cache, expert on "
                             f"both)")
    parser.add_argument("--cuts", default="", help="split-phases: comma-separated cuts (default 0, L/2, L)")
    parser.add_argument("--serialise", action="store_true",
                        help="split-phases: every crossing as bytes and back (HVLM: engine/handover/message.py)")


def wants(args) -> bool:
    """The reduced Alpamayo was asked for (its preset, its scenarios or one of its options); other presets refused
    with it."""
    from ...errors import ConfigError
    from ..common import model_kind
    own = model_kind(args) == "alpamayo"   # an Alpamayo preset or release: decode-heavy on itself
    if args.scenario == "encode-once" and not own and args.preset != PRESET and (args.checkpoint or args.preset):
        return False   # a model reading its history on the waypoint path (cli/bench/scenarios.py)
    asked = args.preset == PRESET or args.scenario in SCENARIOS or own
    phases_only = bool(args.cuts) or args.serialise
    options = args.reasoning_tokens is not None or args.flow_steps is not None or args.guidance or phases_only
    if not (asked or options):
        return False
    if own:
        refuse_other_benches(args, phases_only)
    if not own and (args.preset not in (None, PRESET) or args.checkpoint):
        raise ConfigError(f"--reasoning-tokens / --flow-steps / --guidance / --cuts / --serialise / --scenario "
                          f"decode-heavy / split-phases run the reduced Alpamayo (--preset {PRESET}) only; a "
                          f"real-size one does not run here: "
                          f"hybrid-vla plan --preset alpamayo-r1-like --gpu l20 --cpu xeon-8470q --dtype bf16")
    if phases_only and args.scenario != "split-phases":
        raise ConfigError("--cuts / --serialise: --scenario split-phases only")
    return True


def refuse_other_benches(args, phases_only: bool) -> None:
    """An Alpamayo model runs decode-heavy only: any option of another bench is refused, not ignored."""
    from ...errors import ConfigError
    from .scenarios import DEFAULT_MODES
    given = [name for name, asked in (
        (f"--scenario {args.scenario}", args.scenario not in ("modes", "decode-heavy")), ("--cuts / --serialise",
         phases_only), (f"--head {args.head}", args.head != "waypoints"), ("--gil", args.gil),
        (f"--modes {args.modes}", args.modes != DEFAULT_MODES)) if asked]
    if given:
        raise ConfigError(f"{', '.join(given)}: {args.checkpoint or args.preset} is an Alpamayo model, benched by "
                          f"--scenario decode-heavy only (split-phases: the reduced --preset {PRESET})")


def cmd_expert_split(args) -> int:
    if args.scenario == "encode-once":
        return encode_once(args)
    return split_phases(args) if args.scenario == "split-phases" else decode_heavy(args)


def encode_once(args) -> int:
    """Run, print the table, write --json / --plot."""
    from ...bench.expert_split.encode_once import plot, run_encode_once, table
    from ...errors import ConfigError
    reasoning = 8 if args.reasoning_tokens is None else args.reasoning_tokens
    steps = 10 if args.flow_steps is None else args.flow_steps
    windows = args.frames or 6
    if reasoning < 1 or steps < 1 or windows < 3 or args.guidance:
        raise ConfigError("--scenario encode-once: --reasoning-tokens and --flow-steps at least 1, --frames (windows) "
                          "at least 3 (the first two set reuse up), no --guidance")
    report = run_encode_once(windows, args.partition, reasoning, steps)
    save_report(report, args, plot)
    print("\n".join(table(report)))
    print(f"full report: {args.json}" if args.json else "(--json FILE writes the full report)")
    return 0 if report["exact"] else 1


def decode_heavy(args) -> int:
    """Run, print the table, write --json / --plot."""
    from ...bench.expert_split.decode_heavy import plot, run_decode_heavy, table
    from ...errors import ConfigError
    from ...report import progress_printer
    reasoning = 32 if args.reasoning_tokens is None else args.reasoning_tokens
    steps = 10 if args.flow_steps is None else args.flow_steps
    if reasoning < 1 or steps < 1 or (args.frames or 6) < 2:
        raise ConfigError("--reasoning-tokens and --flow-steps: at least 1; --frames: at least 2 (a period)")
    repeat = 1 if args.repeat is None else max(1, args.repeat)
    preset = None if args.checkpoint else args.preset
    report = run_decode_heavy(reasoning, steps, args.frames or 6, args.warmup, args.partition, args.max_in_flight,
                              args.guidance, progress=progress_printer("decode-heavy"), repeat=repeat,
                              preset=preset, checkpoint=args.checkpoint or None)
    save_report(report, args, plot)
    print("\n".join(table(report)))
    print(f"full report: {args.json}" if args.json else "(--json FILE writes the full report)")
    return 0 if report["exact"] else 1


def split_phases(args) -> int:
    """Run, print the table, write --json."""
    from ...bench.expert_split.phases import run_phases, table
    from ...errors import ConfigError
    reasoning = 16 if args.reasoning_tokens is None else args.reasoning_tokens
    steps = 10 if args.flow_steps is None else args.flow_steps
    repeat = 3 if args.repeat is None else args.repeat
    if reasoning < 1 or steps < 1 or repeat < 1:
        raise ConfigError("--reasoning-tokens, --flow-steps and --repeat: at least 1")
    try:
        cuts = [int(c) for c in args.cuts.split(",") if c] or None
    except ValueError as exc:
        raise ConfigError(f"--cuts '{args.cuts}': expected comma-separated integers, e.g. 0,4,8") from exc
    report = run_phases(reasoning, steps, cuts, repeat, args.guidance, args.serialise)
    write_report(report, args.json)
    print("\n".join(table(report)))
    print(f"full report: {args.json}" if args.json else "(--json FILE writes the full report)")
    return 0 if report["exact"] else 1
