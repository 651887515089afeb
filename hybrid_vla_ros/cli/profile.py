"""`hybrid-vla profile`: per-block times of a whole model, or (--roofline) a few real-size blocks against the
GEMM ceiling and memory bandwidth of the same cores, optionally beside torch.compile and OpenVINO."""

from __future__ import annotations

from ..report import key_value_table, progress_printer, write_report
from .common import add_model_args, add_placement_args, model_from_args, placement_from_args


TOKENS_DEFAULT = "64,256,1024,2048"


def cmd_profile(args) -> int:
    if args.roofline:
        return cmd_roofline(args)
    if args.int8_kernels:
        return cmd_int8_kernels(args)
    from ..bench.kernels.profile import profile_report
    model = model_from_args(args, lazy=True)
    report = profile_report(model, placement_from_args(args, model), frames=args.frames,
                            progress=progress_printer("profile"))
    write_report(report, args.json)
    suffix = report["suffix"]
    print(f"profile of {report['preset']} ({report['num_blocks']} blocks, {report['tokens']} tokens)")
    print(key_value_table([
        ("prefix: embed + blocks", f"{report['prefix']['embed_ms']:.1f} + {sum(report['prefix']['block_ms']):.1f} ms"),
        ("suffix fp32 / bf16 blocks", f"{sum(suffix['fp32']['block_ms']):.1f} / {sum(suffix['bf16']['block_ms']):.1f} ms"),
        ("bf16 suffix speed-up", f"{report['suffix_bf16_speedup_vs_fp32']:.2f}x"),
        ("bf16 trajectory max diff", f"{report['bf16_trajectory_max_abs_diff']:.2e}"),
        ("balanced partition", report["balanced_partition"]),
        ("full report", args.json or "(--json FILE)")]))
    return 0


def cmd_int8_kernels(args) -> int:
    from ..bench.kernels.int8_kernels import compare_int8_kernels, int8_kernel_lines
    from ..engine.cpu import core_plan, pinned
    from ..engine.placement import Placement
    model = model_from_args(args, shapes_only=True)
    _, suffix_cores, _ = core_plan(Placement())
    rows = [int(t) for t in args.tokens.split(",")] if args.tokens != TOKENS_DEFAULT else [600, 1]
    with pinned(suffix_cores):
        report = compare_int8_kernels(model.spec.hidden_size, model.spec.intermediate_size, rows)
    report["cores"] = suffix_cores
    write_report(report, args.json)
    print("\n".join(int8_kernel_lines(report)))
    return 0


def roofline_lines(report: dict) -> list[str]:
    lines = [f"roofline of {report['preset']} ({report['family']}), {report['blocks_timed']} of its blocks timed at full width"]
    for side in ("prefix", "suffix"):
        r = report[side]
        lines.append(f"  {side} on cores {r['cores']} ({r['threads']} threads), {r['dtype']}:")
        lines.append("       N   ms/block   GFLOP/s   ceiling   of ceiling   attn ms   mlp ms")
        for row in r["rows"]:
            lines.append(f"  {row['tokens']:6d} {row['block_ms']:10.2f} {row['gflops']:9.1f} {row['ceiling_gflops']:9.1f}"
                         f" {row['of_ceiling']:11.0%} {row.get('self_attn_ms', 0):9.2f} {row.get('mlp_ms', 0):8.2f}")
        d = r["decode"]
        lines.append(f"  decode row (1 token): {d['block_ms']:.2f} ms/block, weights {d['weight_gbs']:.1f} GB/s of "
                     f"{d['bandwidth_gbs']:.1f} GB/s read bandwidth ({d['of_bandwidth']:.0%})")
    for row in report.get("backends", []):
        cells = [f"{name} " + (f"{b['ms']:.1f} ms ({b['gflops']:.0f} GFLOP/s, setup {b['setup_s']:.0f} s, "
                               f"diff {b['max_abs_diff_vs_eager']:.1e})" if "ms" in b else b["error"])
                 for name, b in row["backends"].items()]
        lines.append(f"  backends at N={row['tokens']} ({row['dtype']}, {row['threads']} threads): " + "; ".join(cells))
    return lines


def dtype_lines(report: dict | None) -> list[str]:
    if not report:
        return []
    names = report["dtypes"]
    lines = [f"  suffix block per dtype on cores {report['cores']}:",
             "       N " + "".join(f"{n + ' ms':>11}" for n in names) + "".join(
                 f"{k:>16}" for k in report["rows"][0] if "_vs_" in k)]
    for row in report["rows"]:
        lines.append(f"  {row['tokens']:6d} " + "".join(f"{row[n + '_ms']:11.2f}" for n in names) + "".join(
            f"{v:15.2f}x" for k, v in row.items() if "_vs_" in k))
    return lines


def cmd_roofline(args) -> int:
    from ..bench.kernels.roofline import plot_roofline, roofline_report
    from ..engine.cpu import core_plan, pinned
    model = model_from_args(args, lazy=True)
    placement = placement_from_args(args, model)
    tokens = [int(t) for t in args.tokens.split(",")]
    report = roofline_report(model, placement, tokens, args.blocks)
    if args.backends:
        from ..bench.kernels.backends import compare_backends
        _, suffix_cores, _ = core_plan(placement)
        with pinned(suffix_cores):
            report["backends"] = [compare_backends(model, int(n), placement.suffix_dtype, len(suffix_cores))
                                  for n in args.backends.split(",")]
    if args.compare_dtypes:
        from ..bench.kernels.roofline import suffix_dtypes_report
        report["suffix_dtypes"] = suffix_dtypes_report(model, placement, tokens, args.compare_dtypes.split(","),
                                                       args.blocks)
    write_report(report, args.json)
    if args.plot:
        plot_roofline(report, args.plot)
    print("\n".join(roofline_lines(report) + dtype_lines(report.get("suffix_dtypes"))))
    return 0


def register(sub) -> None:
    p = sub.add_parser("profile", help="per-block times per device, handover cost, bf16 suffix speed and accuracy; "
                                       "--roofline: real-size blocks against the cores' GEMM ceiling")
    add_model_args(p, default_preset="bench"); add_placement_args(p)
    p.add_argument("--frames", type=int, default=3)
    p.add_argument("--roofline", action="store_true", help="time a few blocks (only they are drawn or read) at "
                                                           "each --tokens against the GEMM ceiling and bandwidth")
    p.add_argument("--tokens", default=TOKENS_DEFAULT, help="roofline: token counts N (--int8-kernels: rows, "
                                                            "default 600,1)")
    p.add_argument("--int8-kernels", action="store_true", help="the CPU's int8 linears (engine/int8.py's and the "
                                                               "others this torch offers) vs fp32/bf16 on one "
                                                               "block-sized linear of the model, on the suffix's cores")
    p.add_argument("--blocks", type=int, default=2, help="roofline: consecutive blocks timed")
    p.add_argument("--backends", default="", help="roofline: token counts at which the suffix's block also runs "
                                                  "on torch.compile (inductor, freezing) and OpenVINO, e.g. 256,1024")
    p.add_argument("--compare-dtypes", default="", help="roofline: also time the suffix's block in each of these "
                                                        "dtypes on its cores, e.g. fp32,bf16,int8 (speed-ups as ratios)")
    p.add_argument("--json", default=None)
    p.add_argument("--plot", default=None)
    p.set_defaults(func=cmd_profile)
