"""The planner's results as terminal text: the per-cut table, the recommendation, the paper comparison and
every assumption (JSON carries the same and more)."""

from __future__ import annotations

GIB = 2 ** 30


def _gib(nbytes: float) -> str:
    return f"{nbytes / GIB:7.2f}"


def _pct(value) -> str:
    return "     -" if value is None else f"{value:+6.0%}"


def cut_table(result: dict, every: int = 1) -> list[str]:
    lines = ["     p  prefix ms  transfer  suffix ms  period ms  latency ms  bound   GPU GiB (weights)   CPU GiB"]
    rows = result["rows"]
    shown = {0, len(rows) - 1, result.get("best_p") or 0, *range(0, len(rows), max(1, every))}
    for r in rows:
        if r["p"] not in shown:
            continue
        mark = "*" if r["p"] == result.get("best_p") else " "
        g, c = r["gpu_bytes"], r["cpu_bytes"]
        lines.append(f"  {mark}{r['p']:3d} {r['prefix_ms']:10.1f} {r['transfer_ms']:9.2f} {r['suffix_ms']:10.1f} "
                     f"{r['period_ms']:10.1f} {r['latency_ms']:11.1f}  {r['bound']:6s} {_gib(g['total'])} "
                     f"({_gib(g['weights']).strip():>6s}) {_gib(c['total'])}")
    n = result["native"]
    lines.append(f"  native GPU-only: {n['period_ms']:.1f} ms per frame, GPU {n['gpu_bytes']['total'] / GIB:.2f} GiB "
                 f"(weights {n['gpu_bytes']['weights'] / GIB:.2f})")
    return lines


def recommendation(result: dict) -> list[str]:
    rec = result.get("recommended")
    if rec is None:
        return [f"  no cut fits: {result.get('why_none')}"]
    native = result["native"]["period_ms"]
    g = rec["gpu_bytes"]
    return [f"  recommended: p = {rec['p']} of {result['workload']['num_blocks']}, dynamic zone {result['zone']}: "
            f"period {rec['period_ms']:.1f} ms ({native / rec['period_ms']:.2f}x native), latency "
            f"{rec['latency_ms']:.1f} ms, {rec['bound']}-bound",
            f"  GPU with the zone resident: {g['total'] / GIB:.2f} GiB (weights {g['weights'] / GIB:.2f}, activations "
            f"{g['activations'] / GIB:.2f}, rings {g['rings'] / GIB:.3f}, context {g['context'] / GIB:.2f}); CPU "
            f"{rec['cpu_bytes']['total'] / GIB:.2f} GiB",
            f"  zone rule: {result.get('zone_rule', '')}"]


def _tokens(tokens: list) -> str:
    lo, hi = min(tokens), max(tokens)
    return f"{lo}" if lo == hi else f"{lo}-{hi}"


def chunk_lines(result: dict) -> list[str]:
    """The chunked prefill's table at the best cut (--chunks), each chunking beside the unchunked pipeline."""
    section = result.get("chunked")
    if not section:
        return []
    lines = [f"  chunked prefill at p = {section['p']}: {section['formula']}",
             "    chunks    k  tokens/chunk  period ms  latency ms  latency vs 1  period vs 1  pays"]
    for r in section["rows"]:
        if "refused" in r:
            lines.append(f"    {r['chunks']:8s}  not predicted: {r['refused']}")
            continue
        lines.append(f"    {r['chunks']:8s} {r['k']:2d}  {_tokens(r['tokens']):>12s} {r['period_ms']:10.2f} "
                     f"{r['latency_ms']:11.2f}  {r['latency_vs_unchunked']:+12.1%} "
                     f"{r['period_vs_unchunked']:+11.1%}  {r['pays']}")
    return lines + [f"    - {a}" for a in section["assumptions"]]


def assumptions(result: dict) -> list[str]:
    return ["  assumptions:"] + [f"    - {a}" for a in result.get("assumptions", [])]


def plan_lines(result: dict, every: int = 1) -> list[str]:
    w, t = result["workload"], result["times"]
    head = [f"plan for {w['name']}: {w['num_blocks']} blocks, {w['tokens']} tokens x {w['passes']} pass(es) "
            f"({result['mode']})",
            f"  per block: prefix {t['block_prefix_ms']:.2f} ms ({t['bound']['prefix_block']}-bound), suffix "
            f"{t['block_suffix_ms']:.2f} ms ({t['bound']['suffix_block']}-bound); front end {t['front_ms']:.1f} ms; "
            f"head {t['head_suffix_ms']:.2f} ms; transfer {t['transfer_ms']:.3f} ms"]
    return head + cut_table(result, every) + recommendation(result) + chunk_lines(result) + decode_lines(result) + \
        assumptions(result)


COMPARISON_ROWS = (("native_ms", "native latency (ms)"), ("hybrid_period_ms", "hybrid period (ms)"),
                   ("hybrid_latency_ms", "hybrid latency, serial (ms)"), ("native_gpu_gib", "GPU native (GiB)"),
                   ("hybrid_gpu_gib", "GPU hybrid at best p (GiB)"), ("period_at_paper_p_ms", "period at the paper's p (ms)"),
                   ("gpu_at_paper_p_gib", "GPU at the paper's p (GiB)"),
                   ("gpu_saving_gib", "GPU saved at that p (GiB)"), ("transfer_ms", "boundary handover (ms)"))


def comparison_lines(key: str, result: dict) -> list[str]:
    c = result["comparison"]
    lines = [f"{result['workload']['name']} on {result['gpu']['name']} ({result['dtypes']['gpu']}) + "
             f"{result['cpu']['name']} ({result['dtypes']['cpu']})",
             f"  {'':30s} {'predicted':>10s} {'paper':>8s} {'off':>7s}"]
    for name, label in COMPARISON_ROWS:
        row = c.get(name)
        if row is None:
            continue
        digits = 2 if name == "transfer_ms" else 1
        paper = "-" if row["paper"] is None else f"{row['paper']:8.{digits}f}"
        lines.append(f"  {label:30s} {row['predicted']:10.{digits}f} {paper:>8s} {_pct(row['off'])}")
    bp = c["best_p"]
    paper_p = "-" if bp["paper"] is None else str(bp["paper"])
    blocks_off = "" if bp["blocks_off"] is None else f"{bp['blocks_off']:+d} blocks"
    lines.append(f"  {'best cut p':30s} {bp['predicted']:10d} {paper_p:>8s} {blocks_off}")
    lines.append(f"  recommended zone {c['zone']}: GPU {c['recommended_zone_gpu_gib']:.2f} GiB with it resident; the "
                 f"paper's GPU saving is, in the planner's memory model, the cut p = {c['p_matching_the_papers_saving']}")
    for s in result.get("sensitivity", []):
        lines.append(f"  if {s['variant']}: CPU {s['cpu_tflops']:.1f} TFLOP/s -> p = {s['best_p']}, period "
                     f"{s['period_ms']:.1f} ms, latency {s['latency_ms']:.1f} ms")
    t, flops = result["times"], result["workload"]["block_flops"]
    lines.append(f"  the planner per side: GPU block {t['block_prefix_ms']:.1f} ms ({flops / t['block_prefix_ms'] / 1e9:.1f} "
                 f"TFLOP/s), front end {t['front_ms']:.0f} ms, CPU block {t['block_suffix_ms']:.1f} ms "
                 f"({flops / t['block_suffix_ms'] / 1e9:.1f} TFLOP/s)")
    for bound, v in (result.get("implied_by_paper") or {}).items():
        lines.append(f"  the paper's own figures, if {bound} at its cut: GPU block {v['gpu_block_ms']:.1f} ms "
                     f"({v['gpu_block_tflops']:.1f} TFLOP/s), front end {v['front_ms']:.0f} ms, CPU block "
                     f"{v['cpu_block_ms']:.1f} ms ({v['cpu_block_tflops']:.1f} TFLOP/s)")
    return lines


def paper_lines(report: dict) -> list[str]:
    lines = [f"planner vs the paper's table ({report['source']})", f"  {report['dtype_reasoning']}", ""]
    for key, result in report["models"].items():
        lines += comparison_lines(key, result) + assumptions(result) + [""]
    return lines


__all__ = ["chunk_lines", "comparison_lines", "cut_table", "paper_lines", "plan_lines", "recommendation"]


def decode_lines(result: dict) -> list[str]:
    section = result.get("decode_heavy")
    if not section:
        return []
    if "refused" in section:
        return [f"  decode-heavy: {section['refused']}"]
    s, g, c = section["shapes"], section["per_call_ms_at_prompt"]["gpu"], section["per_call_ms_at_prompt"]["cpu"]
    pb = section["prefill_block_ms"]
    lines = [f"  decode-heavy ({s['prompt']}-token prefill, n reasoning tokens at batch 1, {section['steps']} Euler "
             f"steps of a {s['expert_layers']}-layer expert over the VLM's KV{', guidance' if section['guidance'] else ''}"
             f"), per call GPU | CPU:",
             f"    prefill block {pb['gpu']:.2f} | {pb['cpu']:.2f} ms; decode step per block {g['decode_block']:.2f} | "
             f"{c['decode_block']:.2f} ms; lm_head {g['lm_head']:.2f} | {c['lm_head']:.2f} ms; sampler "
             f"{g['sampler']:.2f} | {c['sampler']:.2f} ms; expert layer per step {g['expert_layer']:.2f} | "
             f"{c['expert_layer']:.2f} ms" + (f"; native GPU {section['native_gpu_gib']:.1f} GiB"
                                               if section.get("native_gpu_gib") else ""),
             f"        n  decode share  native ms  best p  GPU GiB  split latency  split period  period gain  latency  pays"
             f"  | at p = {section['plan_cut']}: period  gain"]
    for r in section["rows"]:
        sp, fx = r["split"], r["at_plan_cut"] or {}
        gain = r["native"]["period_ms"] / fx["period_ms"] if fx else float("nan")
        gib = "-" if r.get("gpu_gib") is None else f"{r['gpu_gib']:.1f}"
        lines.append(f"    {r['n']:5d} {r['native']['decode_share']:12.0%} {r['native']['period_ms']:10.0f} {sp['p']:7d} "
                     f"{gib:>8s} {sp['latency_ms']:14.0f} {sp['period_ms']:13.0f} {r['period_vs_native']:11.2f}x "
                     f"{r['latency_vs_native']:6.2f}x  {'yes' if r['pays'] else 'no ':3s}  | {fx.get('period_ms', 0):13.0f}"
                     f" {gain:5.2f}x")
    lines += [_stop_line(section["stops_paying"], "at the best cut for each n"),
              _stop_line(section["stops_paying_at_plan_cut"], f"at the prefill plan's cut p = {section['plan_cut']}"),
              _stop_line(section["stops_paying_without_cpu_sampler"], "at the best cut, the CPU's top-p sampler free")]
    worse = [r["latency_vs_native"] for r in section["rows"]]
    lines.append(f"    latency (one frame's chain, best cut) {min(worse):.2f}-{max(worse):.2f}x native's over these lengths")
    return lines + [f"    - {a}" for a in section["assumptions"]]


def _stop_line(stop: dict | None, where: str) -> str:
    if stop is None:
        return f"    {where}: no cut"
    if stop["n"] is not None:
        return f"    {where}: the split's period stops paying at n = {stop['n']} reasoning tokens"
    return (f"    {where}: the split's period pays up to n = {stop['searched_to']} (there {stop['ratio_at_most']:.2f}x "
            f"native, p = {stop['p_at_most']})")
