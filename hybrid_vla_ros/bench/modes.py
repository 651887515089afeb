"""Side-by-side benchmark: native, serial and pipelined (over each transport) on the same frames, one run.

Without CUDA the prefix ("GPU") and the suffix ("CPU") get disjoint core sets of this machine, the honest
stand-in for a GPU + CPU pair; every report says which it was.
"""

from __future__ import annotations

from pathlib import Path

import torch

from ..engine.cpu import allowed_cores, core_plan, ms_per_frame, thread_cpu_delta, thread_cpu_seconds
from ..engine.pipeline.cross_frame import FrameResult, Pipeline, PipelineConfig
from ..engine.placement import Placement
from ..engine.stages import PrefixStage, SuffixStage
from ..model.inputs import synthetic_frame
from ..model.vla import VLAModel
from .graph import run_graph_mode
from .handover import handover_microbench
from ..report import fmt, percentiles, pyplot


def summarise(results: list[FrameResult], stats, warmup: int) -> dict:
    steady = [r for r in results if r.ok][warmup:]
    ends = [r.suffix_end for r in steady]
    periods = [(b - a) * 1e3 for a, b in zip(ends, ends[1:])]
    return {
        "frames": len(results), "completed": stats.completed, "failed": stats.failed,
        "dropped": len(stats.dropped), "max_in_flight_seen": stats.max_in_flight_seen,
        "period_ms": percentiles(periods),
        "latency_ms": percentiles([r.latency_ms for r in steady]),
        "handover_ms": percentiles([r.handover_ms for r in steady]),
        "prefix_busy_ms": percentiles([(r.sent - r.prefix_start) * 1e3 for r in steady]),
        "suffix_busy_ms": percentiles([r.suffix_busy_s * 1e3 for r in steady]),
        "prefix_compute_ms": percentiles([(r.prefix_end - r.prefix_start) * 1e3 for r in steady]),
        "suffix_compute_ms": percentiles([(r.suffix_end - r.suffix_start) * 1e3 for r in steady]),
        "timeline": [{"seq": r.seq, "prefix": [r.prefix_start, r.sent], "suffix": [r.recv_start, r.suffix_end]}
                     for r in results],
    }


def run_mode(model: VLAModel, placement: Placement, partition: int, max_in_flight: int, transport: str,
             frames: list, prefix_cores, suffix_cores, warmup: int, prefix_threads: int | None = None,
             chunks=1) -> dict:
    prefix = PrefixStage(model, partition, placement)
    suffix = SuffixStage(model, partition, placement)
    if placement.uses_cuda:  # after the stages placed their weights: the peak is this mode's own
        torch.cuda.empty_cache()
        torch.cuda.reset_peak_memory_stats(placement.prefix_device)
    feed, cpu_before = iter(frames), thread_cpu_seconds()
    pipe = Pipeline(prefix, suffix, PipelineConfig(max_in_flight=max_in_flight, transport=transport,
                                                   prefix_cores=prefix_cores, suffix_cores=suffix_cores,
                                                   prefix_threads=prefix_threads, chunks=chunks),
                    source=lambda: next(feed, None)).start()
    results = pipe.finish()
    summary = summarise(results, pipe.stats, warmup)
    # CPU ms per frame of each thread (warm-up frames included), side by side with the graph modes' figure
    cpu_s = {**thread_cpu_delta(cpu_before, thread_cpu_seconds()),   # the live threads; the workers have ended:
             **{f"hvla-{w.name}": w.cpu_s for w in (pipe.prefix_worker, pipe.suffix_worker)}}
    summary["thread_cpu_ms_per_frame"] = ms_per_frame(cpu_s, len(frames))
    summary.update(partition=partition, max_in_flight=max_in_flight, transport=transport, chunks=chunks,
                   chunk_count=pipe.chunk_count)
    if placement.uses_cuda:
        summary["gpu_peak_bytes"] = torch.cuda.max_memory_allocated(placement.prefix_device)
    return summary


ENGINE_MODES = ("native", "native_all_cores", "serial", "pipelined", "serial_chunked", "pipelined_chunked")
GRAPH_MODES = ("graph", "graph_processes", "graph_chunked", "graph_processes_chunked")
DEFAULT_MODES = ENGINE_MODES + GRAPH_MODES


def mode_plan(modes, transports, L: int, partition: int, max_in_flight: int, cores: tuple, chunks=4) -> dict:
    """mode name -> run_mode arguments (partition, frames in flight, transport, prefix cores, suffix cores,
    prefix threads, chunks). native: the whole model on the prefix's cores (the GPU-only stand-in);
    native_all_cores: the unsplit model with one thread pool over every core (what a user without a GPU runs);
    *_chunked: the same with chunked prefill across the cut (`chunks` per frame)."""
    prefix_cores, suffix_cores, all_cores = cores
    plan = {"native": (L, 1, "inproc", prefix_cores, suffix_cores, None, 1),
            "native_all_cores": (L, 1, "inproc", all_cores, None, len(all_cores), 1),
            "serial": (partition, 1, "inproc", prefix_cores, suffix_cores, None, 1),
            "serial_chunked": (partition, 1, "inproc", prefix_cores, suffix_cores, None, chunks)}
    for base, k in (("pipelined", 1), ("pipelined_chunked", chunks)):
        for t in transports if base in modes else ():
            plan[base if t == "inproc" else f"{base}_{t}"] = (partition, max_in_flight, t, prefix_cores,
                                                              suffix_cores, None, k)
    return {name: args for name, args in plan.items() if name in modes or name.startswith("pipelined")}


def run_bench(model: VLAModel, placement: Placement, num_frames: int = 24, partition: int | None = None,
              transports=("inproc", "shm", "inline"), max_in_flight: int = 2, warmup: int = 3,
              modes=DEFAULT_MODES, progress=None, peer: bool = True, chunks=4, gil: bool = False) -> dict:
    """Every mode on the same frames, one after the other, in one run. progress(text) reports each mode.
    gil: the one-process graph modes also sample each thread's GIL-held share (bench/gil.py)."""
    progress = progress or (lambda text: None)
    prefix_cores, suffix_cores, devices = core_plan(placement)
    prediction = None
    if partition is None:  # the planner's best cut for this machine (plan/run.py: each side timed on its cores)
        progress("planning the cut for this machine (hybrid-vla plan)")
        from ..plan.run import plan_here
        prediction = plan_here(model, placement)
        partition = prediction["best_p"]
    frames = [synthetic_frame(model.spec, seq) for seq in range(num_frames + warmup)]
    L = model.num_blocks
    plan = mode_plan(modes, transports, L, partition, max_in_flight, (prefix_cores, suffix_cores, allowed_cores()),
                     chunks)
    results = {}
    for name, (p, k, t, pc, sc, threads, c) in plan.items():
        progress(f"mode {name} (p={p}, {k} in flight, {t}{f', chunks {c}' if c != 1 else ''})")
        results[name] = run_mode(model, placement, p, k, t, frames, pc, sc, warmup, threads, c)
    for name in (m for m in GRAPH_MODES if m in modes):
        c = chunks if name.endswith("_chunked") else 1
        progress(f"mode {name} (the three ROS nodes, p={partition}{f', chunks {c}' if c != 1 else ''})")
        results[name] = run_graph_mode(model, placement, partition, num_frames + warmup, prefix_cores,
                                       suffix_cores, max_in_flight, processes=name.startswith("graph_processes"),
                                       prefix_extra={"chunks": c} if c != 1 else None, gil=gil)
    if placement.uses_cuda and peer:
        try:
            results["accelerate_device_map"] = run_accelerate_peer(model, partition, frames, warmup)
        except Exception as exc:  # noqa: BLE001 - the peer is informative; never lose our own results to it
            results["accelerate_device_map"] = {"error": f"{type(exc).__name__}: {exc}"}
    report = {"preset": model.spec.name, "num_blocks": L, "partition": partition, "frames": num_frames,
              "warmup": warmup, "devices": devices, "placement": placement.describe(), "torch": torch.__version__,
              "boundary_bytes": boundary_bytes(model, placement), **ratios(results), "modes": results}
    if prediction is not None:
        row = prediction["rows"][partition]
        report["plan"] = {"partition": partition, "predicted_period_ms": row["period_ms"],
                          "predicted_latency_ms": row["latency_ms"], "predicted_native_ms": prediction["native"]["period_ms"],
                          "source": "hybrid-vla plan for this machine (plan/run.py plan_here)"}
    if "pipelined_shm" in results:
        report["shm_handover_ms_p50"] = results["pipelined_shm"]["handover_ms"]["p50"]
    progress("handover micro-benchmark (ORION-sized state)")
    report["handover_microbench_orion_state"] = handover_microbench()
    return report


def _p50(modes: dict, name: str, key: str = "period_ms"):
    return (modes.get(name) or {}).get(key, {}).get("p50") if isinstance(modes.get(name), dict) else None


def ratios(modes: dict) -> dict:
    """Side-by-side ratios of the modes that ran (None where one side did not)."""
    def ratio(a, b, key="period_ms"):
        x, y = _p50(modes, a, key), _p50(modes, b, key)
        return x / y if x and y else None

    out = {"speedup_pipelined_vs_native": ratio("native", "pipelined"),
           "speedup_pipelined_vs_native_all_cores": ratio("native_all_cores", "pipelined"),
           "speedup_pipelined_vs_serial": ratio("serial", "pipelined"),
           "latency_pipelined_vs_serial": ratio("pipelined", "serial", "latency_ms"),
           "graph_period_vs_pipelined": ratio("graph", "pipelined"),
           "graph_processes_period_vs_pipelined": ratio("graph_processes", "pipelined"),
           "latency_pipelined_chunked_vs_serial": ratio("pipelined_chunked", "serial", "latency_ms"),
           "period_pipelined_chunked_vs_pipelined": ratio("pipelined_chunked", "pipelined"),
           "latency_serial_chunked_vs_serial": ratio("serial_chunked", "serial", "latency_ms"),
           "latency_graph_processes_chunked_vs_graph_processes": ratio("graph_processes_chunked", "graph_processes",
                                                                       "latency_ms")}
    piped = modes.get("pipelined")
    if piped and piped["period_ms"]["mean"] and piped["prefix_busy_ms"]["mean"] is not None:  # two frames at least
        slowest = max(piped["prefix_busy_ms"]["mean"], piped["suffix_busy_ms"]["mean"])
        out["pipeline_efficiency"] = slowest / piped["period_ms"]["mean"]
        out["inproc_handover_fraction_of_period"] = piped["handover_ms"]["p50"] / piped["period_ms"]["p50"]
    return out


def boundary_bytes(model: VLAModel, placement: Placement) -> int:
    state = PrefixStage(model, 0, placement).run(synthetic_frame(model.spec, 0))
    return state.nbytes()


def run_accelerate_peer(model: VLAModel, partition: int, frames: list, warmup: int) -> dict:
    """HF accelerate's device_map split, the peer users try first: blocks >= partition mapped to "cpu" are
    offloaded and copied to the GPU for each forward; one device works at a time."""
    import copy
    import time
    try:
        from accelerate import dispatch_model
    except ImportError:
        return {"skipped": "accelerate is not installed"}
    if model.scene_encoder is not None:  # its device map names a VLM's language_model; a plain LLM has none
        return {"skipped": "the accelerate peer covers vision-tower families (not a scene encoder over an LLM)"}
    peer = copy.deepcopy(model).to("cpu", torch.float16)
    names = [n for n, _ in peer.backbone.named_children()]
    device_map = {f"backbone.{n}": 0 for n in names if n != "language_model"}
    device_map.update({"backbone.language_model.embed_tokens": 0, "backbone.language_model.rotary_emb": 0,
                       "backbone.language_model.norm": 0, "action_head": 0})
    for i in range(model.num_blocks):
        device_map[f"backbone.language_model.layers.{i}"] = 0 if i < partition else "cpu"
    torch.cuda.reset_peak_memory_stats()
    peer = dispatch_model(peer, device_map=device_map)
    times = []
    for frame in frames:
        t0 = time.perf_counter()
        reference_forward_on_cuda(peer, frame)
        torch.cuda.synchronize()
        times.append((time.perf_counter() - t0) * 1e3)
    steady = times[warmup:]
    return {"period_ms": percentiles(steady), "latency_ms": percentiles(steady), "frames": len(frames),
            "gpu_peak_bytes": torch.cuda.max_memory_allocated(), "partition": partition,
            "note": "accelerate device_map, blocks >= partition offloaded to cpu (copied to GPU per forward)"}


@torch.inference_mode()
def reference_forward_on_cuda(model: VLAModel, frame) -> None:
    from ..model.inputs import encode_frame
    encoded = encode_frame(frame, model, "cuda")
    kwargs = model.family.reference_kwargs({k: v.cuda() for k, v in encoded.pixels.items()},
                                           encoded.mm_token_type_ids.cuda())
    if "pixel_values" in kwargs:
        kwargs["pixel_values"] = kwargs["pixel_values"].half()
    ids = encoded.input_ids.cuda()
    with model.prompt_embeddings_applied(frame.context):
        out = model.backbone(input_ids=ids, attention_mask=torch.ones_like(ids), **kwargs)
    hidden = out.last_hidden_state
    model.run_head(model.action_head, hidden, hidden.shape[1] - 1, frame.context, frame.stamp_ns)


def plot_bench(report: dict, path: str | Path) -> None:
    plt = pyplot()
    modes = {k: v for k, v in report["modes"].items() if "timeline" in v}
    fig, axes = plt.subplots(len(modes) + 1, 1, figsize=(11, 2.0 * (len(modes) + 1) + 1))
    for ax, (name, mode) in zip(axes, modes.items()):
        timeline = mode["timeline"][report["warmup"]:report["warmup"] + 8]
        if not timeline:
            continue
        origin = timeline[0]["prefix"][0]
        for row, stage, color in ((1, "prefix", "tab:green"), (0, "suffix", "tab:blue")):
            spans = [((t[stage][0] - origin) * 1e3, (t[stage][1] - t[stage][0]) * 1e3) for t in timeline]
            ax.broken_barh(spans, (row - 0.4, 0.8), facecolors=color, edgecolor="black", linewidth=0.5)
            for (start, width), t in zip(spans, timeline):
                ax.text(start + width / 2, row, str(t["seq"]), ha="center", va="center", fontsize=7, color="white")
        ax.set_yticks([0, 1], ["suffix (CPU)", "prefix (GPU)" if not report["devices"]["stand_in"] else "prefix (GPU stand-in)"])
        ax.set_title(f"{name}: period p50 {fmt(mode['period_ms']['p50'])} ms, latency p50 "
                     f"{fmt(mode['latency_ms']['p50'])} ms", fontsize=9)   # '-' where too few frames
        ax.set_xlabel("ms")
    ax = axes[-1]
    names = list(report["modes"])
    ax.bar(names, [report["modes"][n].get("period_ms", {}).get("p50") or 0 for n in names], color="tab:gray")
    ax.set_ylabel("period p50 (ms)")
    ax.set_title(f"{report['preset']} p={report['partition']}: pipelined vs native "
                 f"{report['speedup_pipelined_vs_native'] or float('nan'):.2f}x, efficiency "
                 f"{report.get('pipeline_efficiency') or float('nan'):.2f}", fontsize=9)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
