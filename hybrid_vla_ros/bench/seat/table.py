"""`hybrid-vla seat-report`'s short table and its plot, from timing.analyse's report."""

from __future__ import annotations

from pathlib import Path

from ...report import fmt, key_value_table, pyplot


def _range(stats: dict | None, unit: str = "", spec: str = ".2f") -> str:
    if not stats:
        return "-"
    return f"min {fmt(stats['min'], spec)} / median {fmt(stats['median'], spec)} / max {fmt(stats['max'], spec)}{unit}"


def _deciles(stats: dict | None, unit: str, spec: str = ".1f") -> str:
    if not stats:
        return "-"
    return f"p10 {fmt(stats['p10'], spec)} / median {fmt(stats['median'], spec)} / p90 {fmt(stats['p90'], spec)}{unit}"


def _consumer(consumer: dict | None) -> tuple[str, str]:
    if not consumer:
        return "consumer", "- (fewer than 2 sets)"
    key = f"{consumer['hz']:g} Hz consumer, {consumer['window_s']:g} s"
    return key, (f"newest set held at {consumer['held_ticks_mean']:.0%} of {consumer['ticks']:g} ticks "
                 f"({consumer['held_ticks_min']:.0%} to {consumer['held_ticks_max']:.0%} by tick phase); "
                 f"{consumer['held_time']:.0%} of the time")


def seat_table(report: dict) -> str:
    """The report as a few aligned lines for the terminal."""
    rate, stamp = report["rate_hz"], report["stamp"]
    stamp_text = f"{stamp['convention']} (from {stamp['source']})"
    if stamp.get("frame_age_at_publish_ms"):
        stamp_text += f"; camera frame to publish {_deciles(stamp['frame_age_at_publish_ms'], ' ms', '.0f')}"
    clock = "the bag's /clock, as a use_sim_time node reads it" if report["clock"] == "/clock" else "the recorder's clock"
    rows = [
        ("publish rate", f"{fmt(rate['median'], '.2f')} Hz from the median interval, {fmt(rate['mean'], '.2f')} Hz "
                         f"mean; interval {_deciles(report['interval_s'], ' s', '.3f')}"),
        ("candidates per set", _range(report["candidates_per_set"], "", ".0f")),
        ("points per candidate", _range(report["points"], "", ".0f")),
        ("horizon", _range(report["horizon_s"], " s") + " (the last point's time_from_start)"),
        ("point spacing", _range(report["spacing_s"], " s", ".3f")),
        ("stamp", stamp_text),
        ("age at receipt", _deciles(report["age_at_receipt_ms"], f" ms ({clock})")),
        ("frame's waits, median", ", ".join(f"{key} {fmt(stats['median'])}" for key, stats in
                                            report["frame_waits_ms"].items()) or "- (no trajectory_info)"),
        _consumer(report["consumer"]),
    ]
    head = (f"seat report: {report['topic']} ({report['type']}): {report['sets']} sets, {report['empty_sets']} "
            f"empty, {report['undecodable'].get(report['topic'], 0)} undecodable")
    return "\n".join([head, key_value_table(rows)] + [f"  note: {n}" for n in report["notes"]])


def seat_plot(report: dict, path: str | Path) -> None:
    """Age of the newest set against the consumer's window, and the publish intervals, over the recording."""
    plt = pyplot()
    t, age = report["series"]["t_s"], report["series"]["age_ms"]
    fig, (top, bottom) = plt.subplots(2, 1, figsize=(9, 6), sharex=True)
    for i, start in enumerate(t):   # each set: its age from its receipt until the next one's
        if age[i] is not None:
            end = t[i + 1] if i + 1 < len(t) else start
            top.plot([start, end], [age[i], age[i] + (end - start) * 1e3], color="tab:blue", lw=1)
    if report["consumer"]:
        top.axhline(report["consumer"]["window_s"] * 1e3, color="tab:red", ls="--", label="consumer window")
        top.legend(loc="upper right")
    top.set_ylabel("age of the newest set (ms)")
    top.set_title(f"{report['topic']}: {report['sets']} sets")
    bottom.plot(t[1:], [(b - a) * 1e3 for a, b in zip(t, t[1:])], ".", color="tab:gray")
    bottom.ticklabel_format(axis="y", useOffset=False)
    bottom.set_ylabel("interval (ms)")
    bottom.set_xlabel("time since the first set (s)")
    fig.tight_layout()
    Path(path).parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=100)
    plt.close(fig)
