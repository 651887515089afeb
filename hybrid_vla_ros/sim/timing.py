"""When each mode's plans take effect: a timing profile -> per mode (latency, period, re-timed or not).

A frame is taken when the first stage is free (the `latest` input policy: the newest captured frame, or
the next one if that was already taken); its plan takes effect `latency` after the stage started on it (its
age then: latency + how old the frame was at the start); the first stage is free again `period` after it
started. Stage times prefix P, handover X, suffix S (ms):

    native              latency = period = N (the whole model on the prefix device)
    serial              latency = period = P + X + S
    pipelined           latency = P + X + S, period = max(P, X + S)        (cross-frame pipeline)
    chunked (k chunks)  latency = k max(a, s) + min(a, s), a = P / k, s = (X + S) / k, period = max(P, X + S)
                        (plan/chunks.py's closed form for equal chunks)
    pipelined_retimed   pipelined's timing; the plan re-timed to the present (engine/retime.py) when it
                        takes effect, from its frame's pose and the car's current one
    native_retimed      native's timing, re-timed the same way (the fair baseline for pipelined_retimed)
    chunked_retimed     chunked's timing, re-timed the same way

Every other mode applies a plan as a consumer of the package's base_link output does: its waypoints from the
car's pose at the moment it takes effect, its times from that moment. `instant` (latency 0, the camera's
period) is the reference no real system reaches.

Profiles: `measured`: this machine's per-frame stage times of the engine on the model that drives (timed
here, PrefixStage / SuffixStage, in-process handover); `orion-paper`: the paper's ORION figures (arXiv
2608.14586: native 521 ms, serial 783 ms, pipelined period 408 ms at p = 16, handover 0.41 ms), split as
plan/paper.implied_by_paper's prefix-bound reading: P = 408 ms, S = 783 - 408 - 0.41 ms; `minddrive-paper`: the
paper's MindDrive figures (native 443 ms, pipelined period 306.2 ms = P; no serial latency given, so S at ORION's
S / P: 281.1 ms); `orion-planned`: the
planner's prediction for ORION on the paper's hardware (plan/run.plan_described: L20 fp32 + Xeon 8470Q bf16, its
block rates from this machine's measured GEMM efficiency), at the planner's best cut. The world runs in
simulated time; the model's own compute is off the clock, so a profile's latency is what the world sees
(a time scale of profile latency / measured latency for the small model).
"""

from __future__ import annotations

import time
from dataclasses import dataclass

from ..plan.paper import PAPER_MODELS

CHUNKS = 4
MODES = ("native", "serial", "pipelined", "chunked", "pipelined_retimed", "native_retimed", "chunked_retimed")


@dataclass(frozen=True)
class StageMs:
    native: float
    prefix: float
    transfer: float
    suffix: float
    source: str


@dataclass(frozen=True)
class ModeTiming:
    mode: str
    latency_s: float
    period_s: float
    retimed: bool = False


def mode_timings(st: StageMs, chunks: int = CHUNKS) -> dict[str, ModeTiming]:
    """The modes' latency and period from stage times (formulas in the module docstring)."""
    serial = st.prefix + st.transfer + st.suffix
    period = max(st.prefix, st.transfer + st.suffix)
    a, s = st.prefix / chunks, (st.transfer + st.suffix) / chunks
    chunked = chunks * max(a, s) + min(a, s)
    ms = {"native": (st.native, st.native), "serial": (serial, serial), "pipelined": (serial, period),
          "chunked": (chunked, period), "pipelined_retimed": (serial, period),
          "native_retimed": (st.native, st.native), "chunked_retimed": (chunked, period)}
    return {m: ModeTiming(m, lat / 1e3, per / 1e3, m.endswith("_retimed")) for m, (lat, per) in ms.items()}


def instant(camera_period_s: float) -> ModeTiming:
    return ModeTiming("instant", 0.0, camera_period_s)


def orion_paper() -> StageMs:
    fig = PAPER_MODELS["orion"].figures
    prefix = fig.hybrid_period_ms
    return StageMs(native=fig.native_ms, prefix=prefix, transfer=fig.transfer_ms,
                   suffix=fig.serial_ms - prefix - fig.transfer_ms,
                   source="the paper's ORION figures (native 521 ms, serial 783 ms, pipelined period 408 ms, "
                          "handover 0.41 ms; prefix-bound split)")


def minddrive_paper() -> StageMs:
    """The paper's MindDrive figures: native 443 ms and the pipelined period 306.2 ms; it gives no serial latency, so
    the suffix is taken at ORION's suffix / prefix ratio (374.6 / 408), prefix-bound as orion_paper reads ORION."""
    fig, orion = PAPER_MODELS["minddrive"].figures, orion_paper()
    prefix = fig.hybrid_period_ms
    return StageMs(native=fig.native_ms, prefix=prefix, transfer=orion.transfer,
                   suffix=prefix * orion.suffix / orion.prefix,
                   source="the paper's MindDrive figures (native 443 ms, pipelined period 306.2 ms; no serial latency "
                          "given: the suffix at ORION's suffix/prefix ratio, handover ORION's 0.41 ms)")


def orion_planned(progress=None) -> StageMs:
    """The planner's ORION on L20 (fp32) + Xeon 8470Q (bf16) at its best cut (measures one real-size block here)."""
    import torch

    from ..model.load import load_vla
    from ..plan.hardware import PARTS_GPU, XEON_8470Q
    from ..plan.run import plan_described
    paper = PAPER_MODELS["orion"]
    blocks = load_vla(preset=paper.block_preset, lazy=True)
    result = plan_described(blocks, PARTS_GPU["l20"], "l20", XEON_8470Q, torch.float32, torch.bfloat16,
                            work=paper.workload, progress=progress)
    row = result["rows"][result["best_p"]]
    return StageMs(native=result["native"]["period_ms"], prefix=row["prefix_ms"], transfer=row["transfer_ms"],
                   suffix=row["suffix_ms"],
                   source=f"the planner's ORION on L20 fp32 + Xeon 8470Q bf16 at its best cut p = {row['p']} "
                          f"(hybrid-vla plan --paper's model; block rates from this machine's measured GEMM share)")


def measured(model, frames: list, partition: int | None = None, repeats: int = 5) -> StageMs:
    """Per-frame stage times (ms) of the engine on `model` here, the fastest of the repeats (the least disturbed
    by other load): native = PrefixStage(L) + SuffixStage(L) (norm + head), hybrid = PrefixStage(p) +
    SuffixStage(p), p = L // 2 by default; in-process handover (0). `frames` repeat one window, so a model reading
    its history is timed with every image of its window encoded (encode_once off: a repeated window would encode
    none), an upper bound of its prefix."""
    from ..engine.stages import PrefixStage, SuffixStage
    L = model.num_blocks
    p = partition if partition is not None else L // 2

    def times(cut: int) -> tuple[float, float]:
        pre, suf = PrefixStage(model, cut, encode_once=False), SuffixStage(model, cut)
        suf.run(pre.run(frames[0]))                                                  # warm-up
        a, b = [], []
        for _ in range(repeats):
            for f in frames:
                t0 = time.perf_counter()
                state = pre.run(f)
                t1 = time.perf_counter()
                suf.run(state)
                a.append(t1 - t0)
                b.append(time.perf_counter() - t1)
        return min(a) * 1e3, min(b) * 1e3
    native_pre, native_suf = times(L)
    pre, suf = times(p)
    return StageMs(native=native_pre + native_suf, prefix=pre, transfer=0.0, suffix=suf,
                   source=f"measured here: '{model.spec.name}', p = {p}, fp32 on the CPU, fastest of "
                          f"{repeats * len(frames)} frames, in-process handover")


PROFILES = ("measured", "orion-paper", "minddrive-paper", "orion-planned")
