"""`hybrid-vla bench --head action-tokens --pack 1,2,4,8`: ActionFlow's packed prefill + decode against plain
sequential decoding (transformers' layers and cache, one frame at a time), on the same frames, in one run:
unsplit on all cores, and split at p with two packed groups alternating (prefix side on core 0, suffix side
on core 1: the two-core stand-in for GPU + CPU), the suffix side in its own process as in the graph (and,
for comparison, in a thread of this process). `exact`: every frame's tokens equal sequential decoding's."""

from __future__ import annotations

import os
import time
from contextlib import contextmanager

import torch

from ...engine.actionflow.packing import ActionFlow, run_alternating
from ...engine.actionflow.reference import sequential_results
from ...engine.cpu import allowed_cores
from ...model.inputs import synthetic_frame
from ...report import percentiles, pyplot


@contextmanager
def cores_and_threads(cores: set[int], threads: int):
    """This thread on `cores` with `threads` intra-op threads, restored afterwards."""
    old_cores, old_threads = os.sched_getaffinity(0), torch.get_num_threads()
    os.sched_setaffinity(0, cores)
    torch.set_num_threads(threads)
    try:
        yield
    finally:
        os.sched_setaffinity(0, old_cores)
        torch.set_num_threads(old_threads)


class TimedFlow(ActionFlow):
    """ActionFlow that adds up the time each side works and the rows of each step (the bench's breakdown)."""

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self.busy_s = {"prefix": 0.0, "suffix": 0.0}
        self.rows: list[int] = []

    def prefix_step(self):
        t0 = time.perf_counter()
        state = super().prefix_step()
        self.busy_s["prefix"] += time.perf_counter() - t0
        if state is not None:
            self.rows.append(int(state.hidden.shape[0]))
        return state

    def suffix_step(self, state):
        t0 = time.perf_counter()
        tokens = super().suffix_step(state)
        self.busy_s["suffix"] += time.perf_counter() - t0
        return tokens


def summarise(results, wall_s: float, sequential_fps: float, reference: dict) -> dict:
    done = [r for r in results if r.tokens is not None]
    fps = len(done) / wall_s
    return {"frames_per_s": fps, "latency_ms": percentiles([r.latency_s * 1e3 for r in done]),
            "speedup_vs_sequential": fps / sequential_fps, "wall_s": wall_s,
            "exact": len(done) == len(reference) and all(r.tokens == reference[r.seq] for r in done)}


def run_actionflow_bench(model, packs: list[int], frames: int = 24, partition: int | None = None,
                         progress=print, graph: bool = False, repeat: int = 1) -> dict:
    """graph: also the ROS graph at the largest K with one and with two packed groups. repeat: each
    configuration that many times, interleaved (a noisy machine drifts between runs); the entry of the median
    run is reported, with every run's frames/s in `runs_frames_per_s`."""
    spec, cores = model.spec, sorted(allowed_cores())
    inputs = [synthetic_frame(spec, i) for i in range(frames)]
    partition = spec.num_blocks // 2 if partition is None else partition
    sequential, reference = sequential_run(model, inputs, cores, repeat)
    seq_fps = sequential["frames_per_s"]
    progress(f"sequential: {seq_fps:.2f} frames/s")
    report = {"preset": spec.name, "frames": frames, "repeat": repeat, "cores": cores,
              "tokens_per_frame": model.action_tokenizer.tokens_per_frame,
              "prompt_tokens": model.sequence_length,
              "sequential": sequential,
              "pack": {}, "split": {"partition": partition, "prefix_cores": cores[:1], "suffix_cores": cores[1:2] or cores[:1],
                                    "pack": {}, "how": "suffix side in its own process (as the suffix node)"},
              "split_threads": {"pack": {}, "how": "suffix side in a thread of the same process (shares the "
                                                   "interpreter lock with the prefix side)"}}
    for pack in packs:
        runs: dict[str, list] = {"unsplit": [], "split": [], "split_threads": []}
        for _ in range(repeat):
            runs["unsplit"].append(_unsplit_run(model, pack, inputs, seq_fps, reference, cores))
            runs["split"].append(split_processes_run(model, pack, partition, inputs, seq_fps, reference, report))
            runs["split_threads"].append(_split_run(model, pack, partition, inputs, seq_fps, reference, report))
        entry, split, threads = (_median(runs[mode]) for mode in ("unsplit", "split", "split_threads"))
        report["pack"][str(pack)], report["split"]["pack"][str(pack)] = entry, split
        report["split_threads"]["pack"][str(pack)] = threads
        progress(f"pack {pack}: unsplit {entry['frames_per_s']:.2f} frames/s ({entry['speedup_vs_sequential']:.2f}x), "
                 f"split {split['frames_per_s']:.2f} ({split['speedup_vs_sequential']:.2f}x), split in threads "
                 f"{threads['frames_per_s']:.2f}")
    if graph:
        report["graph"] = {"pack": max(packs), "pack_groups": {}}
        for groups in (1, 2):
            entry = report["graph"]["pack_groups"][str(groups)] = \
                run_packed_graph(model, max(packs), groups, frames, partition, report)
            progress(f"graph, K={max(packs)}, {groups} group(s): {entry.get('frames_per_s', 0):.2f} frames/s")
    report["exact"] = all(e["exact"] for mode in (report["pack"], report["split"]["pack"],
                                                  report["split_threads"]["pack"]) for e in mode.values())
    return report


def sequential_run(model, inputs, cores, repeat: int) -> tuple[dict, dict]:
    """Plain sequential decoding on all cores, `repeat` times: -> (its entry, seq -> tokens)."""
    walls = []
    with cores_and_threads(set(cores), len(cores)):
        sequential_results(model, inputs[:1])  # warm-up
        for _ in range(repeat):
            t0 = time.perf_counter()
            results = sequential_results(model, inputs)
            walls.append(time.perf_counter() - t0)
    wall = sorted(walls)[len(walls) // 2]
    return ({"frames_per_s": len(inputs) / wall, "wall_s": wall, "runs_frames_per_s": [len(inputs) / w for w in walls],
             "latency_ms": percentiles([r.latency_s * 1e3 for r in results])}, {r.seq: r.tokens for r in results})


def _unsplit_run(model, pack: int, inputs, seq_fps: float, reference: dict, cores) -> dict:
    with cores_and_threads(set(cores), len(cores)):
        flow = TimedFlow(model, pack)
        t0 = time.perf_counter()
        results = flow.run(inputs)
        entry = summarise(results, time.perf_counter() - t0, seq_fps, reference)
    steps = max(1, len(flow.rows))
    entry.update(steps=len(flow.rows), rows_per_step=sum(flow.rows) / steps,
                 step_ms=(flow.busy_s["prefix"] + flow.busy_s["suffix"]) * 1e3 / steps)
    return entry


def _median(entries: list[dict]) -> dict:
    """The run of median frames/s, with every run's frames/s; exact only if every run was."""
    ordered = sorted(entries, key=lambda e: e["frames_per_s"])
    return {**ordered[len(ordered) // 2], "runs_frames_per_s": [e["frames_per_s"] for e in entries],
            "exact": all(e["exact"] for e in entries)}


def _split_run(model, pack: int, partition: int, inputs, seq_fps: float, reference: dict, report: dict) -> dict:
    """Two groups alternating across the cut; each side single-threaded on its own core. Also: how close the
    wall time comes to the slower side's busy time (1.0 = the slower side never waits)."""
    prefix_cores, suffix_cores = set(report["split"]["prefix_cores"]), set(report["split"]["suffix_cores"])
    groups = [TimedFlow(model, pack, partition=partition) for _ in range(2)]
    with cores_and_threads(prefix_cores, 1):
        t0 = time.perf_counter()
        results = run_alternating(groups, inputs, suffix_cores=suffix_cores)
        wall = time.perf_counter() - t0
    entry = summarise(results, wall, seq_fps, reference)
    busy = {side: sum(g.busy_s[side] for g in groups) for side in ("prefix", "suffix")}
    entry.update(prefix_busy_s=busy["prefix"], suffix_busy_s=busy["suffix"],
                 slower_stage_fraction=max(busy.values()) / wall)
    return entry


CHILD_WAIT_S = 120.0   # the suffix process's start (a spawned interpreter building the model) or one step


def _child_failed(child):
    raise RuntimeError(f"the suffix process (pid {child.pid}) did not answer within {CHILD_WAIT_S:.0f} s "
                       f"(exit code {child.exitcode})")


def run_packed_graph(model, pack: int, groups: int, frames: int, partition: int, report: dict) -> dict:
    """The ROS graph (prefix and suffix nodes in processes of their own, on the split's cores) serving the
    action-token model from a bag replayed at its recorded 10 Hz: faster than these cores decode, so frames
    queue at the prefix (input policy lossless) and the output rate is the graph's capacity. (As fast as
    possible, a burst of camera images overflows the prefix's sensor-data subscription, keep last 5.)"""
    from ...engine.placement import Placement
    from ..graph import run_graph_mode
    entry = run_graph_mode(model, Placement(), partition, frames, report["split"]["prefix_cores"],
                           report["split"]["suffix_cores"], 2, processes=True,
                           prefix_extra={"pack": pack, "pack_groups": groups}, window=frames, rate=1.0,
                           # frames queued on purpose: no age limit; the suffix bounds its KV ring by the same pack
                           suffix_extra={"max_output_age_ms": 0.0, "pack": pack, "pack_groups": groups})
    if "completed" in entry:
        entry["frames_per_s"] = entry["completed"] / entry["wall_s"]
    return entry


def _suffix_process(conn, source: dict, cores: list[int]) -> None:
    """The suffix side in a process of its own (as the suffix node runs it: no interpreter lock shared with
    the prefix): packed steps in, next tokens out, over a pipe; an empty message ends it, answered with the
    seconds it worked. source: load_vla's preset or checkpoint, the model the parent benches."""
    os.sched_setaffinity(0, set(cores))
    torch.set_num_threads(1)
    from ...engine.actionflow.suffix_server import PackedSuffixServer
    from ...model.load import load_vla
    server, busy = PackedSuffixServer(load_vla(**source)), 0.0
    conn.send_bytes(b"ready")
    while payload := conn.recv_bytes():
        t0 = time.perf_counter()
        tokens = server.step(payload).tokens_payload
        busy += time.perf_counter() - t0
        conn.send_bytes(tokens)
    conn.send(busy)


def model_source(model) -> dict:
    """load_vla's arguments for the model benched: its checkpoint directory where it was read from one."""
    files = getattr(model, "checkpoint_files", None)
    return {"checkpoint": str(files.directory)} if files is not None else {"preset": model.spec.name}


def split_processes_run(model, pack: int, partition: int, inputs, seq_fps: float, reference: dict,
                         report: dict) -> dict:
    """The graph's arrangement without ROS: the prefix server here (two alternating groups, core 0), the
    suffix server in another process (core 1), packed steps and tokens as bytes over a pipe."""
    import multiprocessing
    from collections import deque
    from ...engine.actionflow.prefix_server import PackedPrefixServer
    ctx = multiprocessing.get_context("spawn")
    here, there = ctx.Pipe()
    child = ctx.Process(target=_suffix_process, args=(there, model_source(model), report["split"]["suffix_cores"]),
                        daemon=True)
    child.start()
    receive = lambda: here.recv_bytes() if here.poll(CHILD_WAIT_S) else _child_failed(child)  # noqa: E731
    receive()
    results, busy, pending = [], 0.0, deque()
    try:
        with cores_and_threads(set(report["split"]["prefix_cores"]), 1):
            server = PackedPrefixServer(model, pack, 2, partition, policy="lossless", capacity=len(inputs),
                                        token_timeout_s=600.0)
            for frame in inputs:
                server.submit(frame)
            t0 = time.perf_counter()
            while not server.idle or pending:
                index = server.next_group(wait_s=0.0)
                if index is not None:
                    s0 = time.perf_counter()
                    sent = server.step(index)
                    busy += time.perf_counter() - s0
                    if sent is not None:
                        here.send_bytes(sent.payload)
                        pending.append(sent)
                if pending and (index is None or len(pending) >= 2):
                    pending.popleft()
                    server.tokens_in(receive())
                results += server.take_completed()
            wall = time.perf_counter() - t0
    finally:
        here.send_bytes(b"")
        suffix_busy = here.recv() if here.poll(CHILD_WAIT_S) else float("nan")
        child.join(10)
    entry = summarise(results, wall, seq_fps, reference)
    entry.update(prefix_busy_s=busy, suffix_busy_s=suffix_busy, slower_stage_fraction=max(busy, suffix_busy) / wall)
    return entry


def plot_actionflow(report: dict, path: str) -> None:
    plt = pyplot()
    packs = list(report["pack"])
    fig, axes = plt.subplots(1, 2, figsize=(10, 4))
    x = range(len(packs))
    axes[0].bar([i - 0.27 for i in x], [report["pack"][k]["frames_per_s"] for k in packs], 0.27, label="packed, unsplit")
    axes[0].bar(list(x), [report["split"]["pack"][k]["frames_per_s"] for k in packs], 0.27,
                label=f"packed, split at p={report['split']['partition']} (2 groups, suffix process)")
    axes[0].bar([i + 0.27 for i in x], [report["split_threads"]["pack"][k]["frames_per_s"] for k in packs], 0.27,
                label="packed, split (2 groups, suffix thread)")
    axes[0].axhline(report["sequential"]["frames_per_s"], color="k", ls="--", label="sequential (HF cache)")
    for groups, entry in report.get("graph", {}).get("pack_groups", {}).items():
        axes[0].plot([packs.index(str(report["graph"]["pack"]))], [entry.get("frames_per_s", 0)],
                     "D" if groups == "2" else "v", ms=10, color="purple" if groups == "2" else "black",
                     markeredgecolor="white", label=f"ROS graph, {groups} group(s), nodes in processes")
    axes[0].set_xticks(list(x), [f"K={k}" for k in packs])
    axes[0].set_ylabel("frames / s")
    axes[0].legend(fontsize=8)
    axes[0].set_title(f"{report['preset']}: {report['tokens_per_frame']} action tokens, "
                      f"{report['prompt_tokens']}-token prompt, exact={report['exact']}", fontsize=9)
    axes[1].plot(packs, [report["pack"][k]["latency_ms"]["p50"] for k in packs], "o-", label="unsplit")
    axes[1].plot(packs, [report["split"]["pack"][k]["latency_ms"]["p50"] for k in packs], "s-", label="split (process)")
    axes[1].axhline(report["sequential"]["latency_ms"]["p50"], color="k", ls="--", label="sequential")
    axes[1].set_xlabel("K (frames in flight)")
    axes[1].set_ylabel("latency p50 (ms, prefill start -> last token)")
    axes[1].legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
