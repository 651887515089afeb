"""`hybrid-vla memory`: each stage in a process of its own, its peak RSS beside the weight bytes info reports."""

from __future__ import annotations

from ...report import write_report


def cmd_memory(args) -> int:
    from ...bench.memory import memory_report
    from ...report import key_value_table
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
        rows.append((f"{stage}: peak above the code (weights + loading)",
                     f"{r['peak_weights_rss_bytes'] / mib:.1f} MiB ({r['peak_weights_rss_bytes'] / max(1, r['weight_bytes']):.2f}x, "
                     f"{'within' if r['peak_within_target'] else 'outside'} 15%)"))
        rows.append((f"{stage}: peak above baseline (code + weights)",
                     f"{r['peak_rss_above_baseline_bytes'] / mib:.1f} MiB (imports {r['imports_rss_bytes'] / mib:.1f} MiB)"))
    print(key_value_table(rows + [("full report", args.json or "(--json FILE)")]))
    return 0
