"""`hybrid-vla bench --preset alpamayo-bench --reasoning-tokens N --flow-steps K`: a decode-heavy model's modes
side by side on the reduced Alpamayo 1.5 of reduced.py (8 blocks of hidden 512, a 256-wide expert, seeded weights),
or on any Alpamayo model the command is given (`--preset tiny-alpamayo-r1` / `tiny-alpamayo-1.5`, `--checkpoint` a
release directory: frame 0 of engine/expert_split/verify.py's synthetic inputs), the same frames (seeds 0, 1, ...)
in each mode, one run:

    native     run_reference, one frame after the other, one thread on the prefix's cores (the GPU stand-in)
    serial     the split (engine/expert_split/frames.py), each side one thread on its own cores, one frame at a time
    serial_one_core  the same with both sides' threads on the prefix's cores (a control: the split's own cost
               without a wake-up on another core between the ~2 x (n + K) tasks of a frame)
    pipelined  the same with `max_in_flight` frames admitted: frame t's prefill on the prefix overlaps frame
               t-1's decode / expert steps on the suffix
    packed     not built: see PACKED_MISSING

Period: the mean gap between completions from the first frame admitted when a slot freed (frame max(warmup,
in flight) on); completions of pipelined frames come in bursts, so a median gap would flatter it. Per side and
phase: the median ms of one call (prefill, one decode step, one Euler step of the expert) and the ms per frame,
from the steady frames (after `warmup`). Without CUDA the two sides are disjoint core sets of this
machine (every report says so); both threads share one Python interpreter (the GIL)."""

from __future__ import annotations

import statistics
import time

import torch

from ...engine.cpu import allowed_cores, pinned, split_cores
from ...engine.expert_split.frames import FrameStream
from ...errors import ConfigError, expect
from ...model.plugins.alpamayo.decode import Sampling
from ...model.plugins.alpamayo.flow import FlowSettings
from ...model.plugins.alpamayo.reference import run_reference
from ...report import percentiles
from . import PRESET
from .phases import native_phases
from .reduced import reduced_inputs, reduced_model

PHASES = ("prefill", "decode", "unguided", "flow_setup", "expert", "trajectory")
PACKED_MISSING = ("packed (several frames' decode steps in one forward, as ActionFlow packs them) is not built for "
                  "Alpamayo: each frame's decode step attends over its own DynamicCache inside transformers' "
                  "Qwen3-VL layers, which take one cache per forward; packing needs a per-frame (varlen) attention "
                  "over a shared KV ring as engine/actionflow has for its own token-head models, plus the expert's "
                  "non-causal span per frame")


def stage_cores() -> tuple:
    """(prefix cores, suffix cores): two disjoint halves of this process's cores; (None, None) on one core."""
    cores = allowed_cores()
    return tuple(split_cores(cores, 2)) if len(cores) >= 2 else (None, None)


def _steady(values: list, warmup: int) -> list:
    return values[warmup:] if len(values) > warmup else values


def _periods(done: list[float]) -> list[float]:
    return [(b - a) * 1e3 for a, b in zip(done, done[1:])]


def run_native(model, frames, sampling, flow, guidance, cores, warmup) -> tuple[dict, list]:
    """run_reference per frame on the prefix's cores (one thread). Per call: the expert step from every steady
    frame's flow time; prefill and decode step from phases.py's native_phases (run_reference's functions one by
    one)."""
    refs, done = [], []
    with pinned(cores, 1):
        for seed, inputs in frames:
            refs.append(run_reference(model, inputs, seed, sampling, flow, guidance))
            done.append(time.perf_counter())
        phases, _ = native_phases(model, frames[-1][1], sampling, flow, guidance, frames[-1][0])
    steady = _steady(refs, warmup)
    per_call = {"prefill": phases["prefill"], "decode": phases["decode"],
                "expert": statistics.median(r.timings["flow_ms"] / flow.steps for r in steady)}
    if guidance:
        per_call["unguided"] = statistics.median(r.timings["unguided_ms"] for r in steady)
    mode = {"period_ms": percentiles(_steady(_periods(done), max(warmup - 1, 0))),
            "latency_ms": percentiles([r.timings["total_ms"] for r in steady]), "exact": True, "frames": len(frames),
            "phases": {"gpu": {k: {"ms_per_call": v} for k, v in per_call.items()}}}
    return mode, refs


def phase_table(spans, seqs: set) -> dict:
    """side -> phase -> calls per frame, median ms per call, ms per frame (the steady frames' spans)."""
    out = {}
    for side in ("prefix", "suffix"):
        out[side] = {}
        for phase in PHASES:
            ms = [s.ms for s in spans if s.side == side and s.phase == phase and s.seq in seqs]
            if ms:
                out[side][phase] = {"calls_per_frame": len(ms) / len(seqs), "ms_per_call": statistics.median(ms),
                                    "ms_per_frame": sum(ms) / len(seqs)}
    return out


def run_split_mode(model, frames, refs, partition, sampling, flow, guidance, in_flight, cores, warmup) -> dict:
    outs, spans = FrameStream(model, partition, sampling, flow, guidance, in_flight, cores).run(frames)
    steady = _steady(outs, warmup)
    seqs = {o.seq for o in steady}
    busy = {side: sum(s.ms for s in spans if s.side == side and s.seq in seqs) / len(seqs)
            for side in ("prefix", "suffix")}
    period = percentiles(steady_gaps(outs, max(warmup, in_flight, 1)))
    exact = all(o.tokens == r.tokens and torch.equal(o.xyz, r.xyz) for o, r in zip(outs, refs))
    origin = min(s.start for s in spans)
    return {"period_ms": period, "latency_ms": percentiles([o.latency_ms for o in steady]), "exact": exact,
            "frames": len(outs), "max_in_flight": in_flight, "busy_ms_per_frame": busy,
            "efficiency": max(busy.values()) / period["mean"] if period["mean"] else None,
            "phases": phase_table(spans, seqs),
            "timeline": [[s.seq, s.side, s.phase, round((s.start - origin) * 1e3, 3), round(s.ms, 3)]
                         for s in spans]}


def steady_gaps(outs, first: int) -> list[float]:
    """ms between consecutive completions from frame `first` on (frames admitted when a slot freed: the first
    `in_flight` start together); too few frames: the whole run's time per frame (conservative)."""
    gaps = [(outs[i].done - outs[i - 1].done) * 1e3 for i in range(first, len(outs))]
    return gaps or [(outs[-1].done - outs[0].admitted) * 1e3 / len(outs)]


def _ratio(modes: dict, a: str, b: str, key: str = "period_ms"):
    x, y = (modes.get(a) or {}).get(key, {}).get("mean"), (modes.get(b) or {}).get(key, {}).get("mean")
    return x / y if x and y else None


def median_run(runs: list[dict]) -> dict:
    """The run of median period (its whole record), with every run's mean period and latency beside it."""
    chosen = sorted(runs, key=lambda m: m["period_ms"]["mean"])[len(runs) // 2]
    return {**chosen, "exact": all(m["exact"] for m in runs),
            "runs": {"period_ms": [m["period_ms"]["mean"] for m in runs],
                     "latency_ms": [m["latency_ms"]["mean"] for m in runs]}}


def bench_model(preset: str | None = None, checkpoint: str | None = None, seed: int = 0) -> tuple:
    """-> (model, one frame's inputs, its name): the reduced 1.5 (preset None or PRESET), else the Alpamayo preset or
    release directory named, with a route span in its prompt where its config has route tokens."""
    if checkpoint is None and preset in (None, PRESET):
        return reduced_model(seed), reduced_inputs(route=True, seed=seed), PRESET
    from ...engine.expert_split.verify import model_name, synthetic_inputs
    from ...model.load import load_vla
    model = load_vla(preset=None if checkpoint else preset, checkpoint=checkpoint)
    return model, synthetic_inputs(model, seed, "route_start" in model.config.special_ids), model_name(model)


def run_decode_heavy(reasoning: int = 32, steps: int = 10, frames: int = 6, warmup: int = 1,
                     partition: int | None = None, max_in_flight: int = 2, guidance: bool = False, seed: int = 0,
                     modes=("native", "serial", "serial_one_core", "pipelined"), progress=None,
                     repeat: int = 1, preset: str | None = None, checkpoint: str | None = None) -> dict:
    """Every mode on the same frames, one run; see the module doc. The report is JSON-ready."""
    progress = progress or (lambda text: None)
    model, inputs, model_label = bench_model(preset, checkpoint, seed)
    expect(not guidance or "route_start" in model.config.special_ids, ConfigError,
           f"--guidance: {model_label} has no route tokens (Alpamayo 1.5's guidance needs a route span)")
    blocks = model.config.vlm.text_config.num_hidden_layers
    partition = blocks // 2 if partition is None else partition
    sampling = Sampling(max_new_tokens=reasoning)
    flow = FlowSettings(steps=steps, guidance_weight=2.0 if guidance else 1.0)
    batch = [(seed + i, inputs) for i in range(frames + warmup)]
    cores = stage_cores()
    plan = {"serial": (1, cores), "serial_one_core": (1, (cores[0], cores[0])), "pipelined": (max_in_flight, cores)}
    runs: dict = {}
    for r in range(repeat):   # the modes interleaved: a competing load that drifts hits every mode alike
        progress(f"[{r + 1}/{repeat}] native: run_reference, {len(batch)} frames on cores {cores[0]}")
        native, refs = run_native(model, batch, sampling, flow, guidance, cores[0], warmup)
        runs.setdefault("native", []).append(native)
        for name, (k, where) in plan.items():
            if name in modes:
                progress(f"[{r + 1}/{repeat}] {name}: p={partition}, {k} frame(s) in flight, prefix cores "
                         f"{where[0]}, suffix {where[1]}")
                runs.setdefault(name, []).append(run_split_mode(model, batch, refs, partition, sampling, flow,
                                                                guidance, k, where, warmup))
    results = {name: median_run(found) for name, found in runs.items()}
    results["packed"] = {"skipped": PACKED_MISSING}
    tokens = [len(r.tokens) for r in refs]
    return {"scenario": "decode-heavy", "preset": model_label, "blocks": blocks,
            "hidden": model.config.vlm.text_config.hidden_size, "expert_hidden": model.expert.config.hidden_size,
            "expert_layers": model.expert.config.num_hidden_layers, "vocab": model.config.vocab_size,
            "prompt_tokens": int(inputs.input_ids.shape[1]), "reasoning_tokens": reasoning,
            "tokens_per_frame": percentiles(tokens), "stopped_frames": sum(r.stopped for r in refs),
            "flow_steps": steps, "guidance": guidance, "partition": partition, "frames": frames, "warmup": warmup,
            "repeat": repeat,
            "cores": {"prefix": cores[0], "suffix": cores[1]}, "torch_threads_per_side": 1,
            "devices": {"stand_in": True, "note": "no GPU: prefix and suffix on disjoint CPU cores of this machine, "
                                                  "one thread each, one process (shared GIL)"},
            "torch": torch.__version__, "exact": all(m.get("exact", True) for m in results.values()),
            "speedup_pipelined_vs_native": _ratio(results, "native", "pipelined"),
            "speedup_pipelined_vs_serial": _ratio(results, "serial", "pipelined"),
            "serial_vs_native_latency": _ratio(results, "serial", "native", "latency_ms"),
            "serial_one_core_vs_native_latency": _ratio(results, "serial_one_core", "native", "latency_ms"),
            "modes": results}


def _cell(phases: dict, phase: str) -> str:
    r = phases.get(phase)
    return f"{r['ms_per_call']:.2f}" if r else "-"


def table(report: dict) -> list[str]:
    lines = [f"{report['preset']}: {report['blocks']} blocks (hidden {report['hidden']}), expert {report['expert_layers']}"
             f" x {report['expert_hidden']}, prompt {report['prompt_tokens']} tokens, up to {report['reasoning_tokens']}"
             f" reasoning tokens (mean {report['tokens_per_frame']['mean']:.1f}), {report['flow_steps']} Euler steps, "
             f"guidance {report['guidance']}, p={report['partition']}; prefix cores {report['cores']['prefix']}, "
             f"suffix {report['cores']['suffix']} (GPU stand-in: CPU cores), {report['frames']} frames after "
             f"{report['warmup']} warm-up; the median of {report['repeat']} interleaved run(s) per mode",
             f"{'mode':<16}{'period':>8}{'latency':>9}{'exact':>6}   per call ms (median), side: prefill / decode "
             f"step / expert step; period, latency: mean ms"]
    for name, m in report["modes"].items():
        if "skipped" in m:
            lines.append(f"{name:<16}  not built (see the report's 'skipped')")
            continue
        sides = m["phases"]
        cells = "; ".join(f"{side} {_cell(ph, 'prefill')} / {_cell(ph, 'decode')} / {_cell(ph, 'expert')}"
                          for side, ph in sides.items())
        lines.append(f"{name:<16}{m['period_ms']['mean']:>8.1f}{m['latency_ms']['mean']:>9.1f}"
                     f"{'yes' if m['exact'] else 'NO':>6}   {cells}")
    f = report
    if report["repeat"] > 1:
        lines.append("period of each run (ms): " + "; ".join(
            f"{name} " + " / ".join(f"{v:.0f}" for v in m["runs"]["period_ms"])
            for name, m in report["modes"].items() if "runs" in m))
    lines.append(f"pipelined vs native {_x(f['speedup_pipelined_vs_native'])}, vs serial "
                 f"{_x(f['speedup_pipelined_vs_serial'])}; latency / native: serial {_x(f['serial_vs_native_latency'])},"
                 f" serial on one core {_x(f['serial_one_core_vs_native_latency'])}")
    return lines


def _x(value) -> str:
    return "-" if value is None else f"{value:.2f}x"


def plot(report: dict, path) -> None:
    """Each split mode's timeline over its first frames (prefix and suffix rows, coloured by phase; odd frames
    outlined) and the modes' period / latency."""
    from ...report import pyplot
    plt = pyplot()
    split = [n for n, m in report["modes"].items() if "timeline" in m]
    fig, axes = plt.subplots(len(split) + 1, 1, figsize=(11, 2.2 * (len(split) + 1) + 1))
    axes = list(axes) if len(split) else [axes]
    colors = {"prefill": "tab:green", "decode": "tab:blue", "expert": "tab:orange", "unguided": "tab:purple",
              "flow_setup": "tab:gray", "trajectory": "tab:gray"}
    for ax, name in zip(axes, split):
        for seq, side, phase, start, ms in report["modes"][name]["timeline"]:
            if seq >= report["warmup"] + 3:     # the warm-up frame and the first three measured
                continue
            ax.broken_barh([(start, ms)], ((1 if side == "prefix" else 0) - 0.4, 0.8), facecolors=colors[phase],
                           edgecolor="black" if seq % 2 else "none", linewidth=0.2)   # odd frames outlined
        ax.set_yticks([0, 1], ["suffix (CPU)", "prefix (GPU stand-in)"])
        m = report["modes"][name]
        ax.set_title(f"{name}: period {m['period_ms']['mean']:.0f} ms, latency {m['latency_ms']['mean']:.0f} ms (means) "
                     f"(green prefill, blue decode, orange expert)", fontsize=9)
        ax.set_xlabel("ms")
    ax, names = axes[-1], [n for n, m in report["modes"].items() if "period_ms" in m]
    xs = range(len(names))
    ax.bar([x - 0.2 for x in xs], [report["modes"][n]["period_ms"]["mean"] for n in names], 0.4, label="period")
    ax.bar([x + 0.2 for x in xs], [report["modes"][n]["latency_ms"]["mean"] for n in names], 0.4, label="latency")
    ax.set_xticks(list(xs), names)
    ax.set_ylabel("ms")
    ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
