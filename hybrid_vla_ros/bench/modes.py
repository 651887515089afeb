"""Side-by-side benchmark: native, serial and pipelined (over each transport) on the same frames, one run.

Without CUDA the prefix ("GPU") and the suffix ("CPU") get disjoint core sets of this machine, the honest
stand-in for a GPU + CPU pair; every report says which it was.
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import torch

from ..engine.cpu import core_plan
from ..engine.pipeline import FrameResult, Pipeline, PipelineConfig
from ..engine.placement import Placement
from ..engine.stages import PrefixStage, SuffixStage
from ..model.inputs import synthetic_frame
from ..model.vla import VLAModel
from .profile import seed_cost_model
from .handover import handover_microbench
from .report import headline, percentiles, pyplot, write_report  # noqa: F401 (headline, write_report: re-exported)


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
        "suffix_busy_ms": percentiles([(r.suffix_end - r.recv_start) * 1e3 for r in steady]),
        "prefix_compute_ms": percentiles([(r.prefix_end - r.prefix_start) * 1e3 for r in steady]),
        "suffix_compute_ms": percentiles([(r.suffix_end - r.suffix_start) * 1e3 for r in steady]),
        "timeline": [{"seq": r.seq, "prefix": [r.prefix_start, r.sent], "suffix": [r.recv_start, r.suffix_end]}
                     for r in results],
    }


def run_mode(model: VLAModel, placement: Placement, partition: int, max_in_flight: int, transport: str,
             frames: list, prefix_cores, suffix_cores, warmup: int) -> dict:
    prefix = PrefixStage(model, partition, placement)
    suffix = SuffixStage(model, partition, placement)
    if placement.uses_cuda:  # after the stages placed their weights: the peak is this mode's own
        torch.cuda.empty_cache()
        torch.cuda.reset_peak_memory_stats(placement.prefix_device)
    feed = iter(frames)
    pipe = Pipeline(prefix, suffix, PipelineConfig(max_in_flight=max_in_flight, transport=transport,
                                                   prefix_cores=prefix_cores, suffix_cores=suffix_cores),
                    source=lambda: next(feed, None)).start()
    results = pipe.finish()
    summary = summarise(results, pipe.stats, warmup)
    summary.update(partition=partition, max_in_flight=max_in_flight, transport=transport)
    if placement.uses_cuda:
        summary["gpu_peak_bytes"] = torch.cuda.max_memory_allocated(placement.prefix_device)
    return summary


def run_bench(model: VLAModel, placement: Placement, num_frames: int = 24, partition: int | None = None,
              transports=("inproc", "shm", "inline"), max_in_flight: int = 2, warmup: int = 3) -> dict:
    prefix_cores, suffix_cores, devices = core_plan(placement)
    if partition is None:  # balanced for these stage devices: each side profiled on its cores in its dtype
        costs = seed_cost_model(model, placement, prefix_cores, suffix_cores)
        partition = min(range(costs.num_blocks + 1), key=costs.period_ms)
    frames = [synthetic_frame(model.spec, seq) for seq in range(num_frames + warmup)]
    L = model.num_blocks
    plan = [("native", L, 1, "inproc"), ("serial", partition, 1, "inproc")]
    plan += [("pipelined" if t == "inproc" else f"pipelined_{t}", partition, max_in_flight, t) for t in transports]
    modes = {name: run_mode(model, placement, p, k, t, frames, prefix_cores, suffix_cores, warmup)
             for name, p, k, t in plan}
    if placement.uses_cuda:
        try:
            modes["accelerate_device_map"] = run_accelerate_peer(model, partition, frames, warmup)
        except Exception as exc:  # the peer is informative; never lose our own results to it
            modes["accelerate_device_map"] = {"error": f"{type(exc).__name__}: {exc}"}
    native, serial, piped = modes["native"], modes["serial"], modes["pipelined"]
    slowest = max(piped["prefix_busy_ms"]["mean"], piped["suffix_busy_ms"]["mean"])
    report = {
        "preset": model.spec.name, "num_blocks": L, "partition": partition, "frames": num_frames, "warmup": warmup,
        "devices": devices, "placement": placement.describe(), "torch": torch.__version__,
        "speedup_pipelined_vs_native": native["period_ms"]["p50"] / piped["period_ms"]["p50"],
        "speedup_pipelined_vs_serial": serial["period_ms"]["p50"] / piped["period_ms"]["p50"],
        "pipeline_efficiency": slowest / piped["period_ms"]["mean"],
        "latency_pipelined_vs_serial": piped["latency_ms"]["p50"] / serial["latency_ms"]["p50"],
        "inproc_handover_fraction_of_period": piped["handover_ms"]["p50"] / piped["period_ms"]["p50"],
        "boundary_bytes": boundary_bytes(model, placement),
        "modes": modes,
    }
    if "pipelined_shm" in modes:
        report["shm_handover_ms_p50"] = modes["pipelined_shm"]["handover_ms"]["p50"]
    report["handover_microbench_orion_state"] = handover_microbench()
    return report


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
    encoded = encode_frame(frame, model.spec, model.family)
    kwargs = model.family.reference_kwargs({k: v.cuda() for k, v in encoded.pixels.items()},
                                           encoded.mm_token_type_ids.cuda())
    if "pixel_values" in kwargs:
        kwargs["pixel_values"] = kwargs["pixel_values"].half()
    ids = encoded.input_ids.cuda()
    out = model.backbone(input_ids=ids, attention_mask=torch.ones_like(ids), **kwargs)
    model.action_head(out.last_hidden_state[:, -1])


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
        ax.set_title(f"{name}: period p50 {mode['period_ms']['p50']:.1f} ms, latency p50 {mode['latency_ms']['p50']:.1f} ms",
                     fontsize=9)
        ax.set_xlabel("ms")
    ax = axes[-1]
    names = list(report["modes"])
    ax.bar(names, [report["modes"][n].get("period_ms", {}).get("p50") or 0 for n in names], color="tab:gray")
    ax.set_ylabel("period p50 (ms)")
    ax.set_title(f"{report['preset']} p={report['partition']}: pipelined vs native "
                 f"{report['speedup_pipelined_vs_native']:.2f}x, efficiency {report['pipeline_efficiency']:.2f}",
                 fontsize=9)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
