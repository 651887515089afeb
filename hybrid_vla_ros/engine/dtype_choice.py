"""`dtype: auto` for the CPU suffix: the fastest of fp32, bf16 and int8 by a short probe on the suffix's own
cores, bf16 only where the CPU has it natively, int8 only where a calibration measured its driving within a
bound (engine/int8_calibration.py). The reason is said, logged and published in diagnostics."""

from __future__ import annotations

import time
from dataclasses import dataclass, replace

import torch

from .cpu import BF16_FLAGS, cpu_flags, pinned

BF16_MUST_BE_FASTER = 0.9   # bf16 chosen only when it takes under 90% of fp32's time (rounding costs accuracy)
PROBE_TOKENS = 128          # rows of the probe's matmul: a frame's sequence is this order of size
PROBE_REPEATS = 5


INT8_MUST_BE_FASTER = 0.9   # int8 chosen only when it takes under 90% of the best float dtype's time
DEFAULT_INT8_MAX_DEVIATION_M = 0.05


@dataclass(frozen=True)
class DtypeChoice:
    dtype: str                     # "fp32", "bf16" or "int8"
    reason: str
    fp32_ms: float | None = None   # the probe's time per block-sized MLP matmul (best of PROBE_REPEATS)
    bf16_ms: float | None = None
    int8_ms: float | None = None


@dataclass(frozen=True)
class Int8Gate:
    """What int8 needs besides speed. deviation_m: the model's calibration's measured mean trajectory
    deviation (None: no calibration); bound_m: the most taken (int8_max_deviation_m)."""
    deviation_m: float | None
    bound_m: float = DEFAULT_INT8_MAX_DEVIATION_M
    flavour: str | None = None     # how int8 ran where calibrated (None: as here)

    @classmethod
    def of(cls, model, bound_m: float = DEFAULT_INT8_MAX_DEVIATION_M) -> "Int8Gate":
        from .int8_calibration import calibration_of
        calibration = calibration_of(model)
        if calibration is None:
            return cls(None, bound_m)
        return cls(calibration.deviation_m, bound_m, calibration.flavour)

    def refusal(self) -> str | None:
        """None when int8 may be probed, else why not."""
        from .int8 import int8_available
        missing = int8_available()
        if missing:
            return missing
        if self.deviation_m is None:
            return "the model has no int8 calibration (hybrid-vla calibrate writes one next to the checkpoint)"
        from .placement import int8_flavour
        if self.flavour is not None and self.flavour != int8_flavour():
            return (f"its calibration measured int8 with {self.flavour}; this CPU runs it with {int8_flavour()}: "
                    f"calibrate on this CPU kind")
        if not self.deviation_m <= self.bound_m:
            return (f"its calibration measured a mean trajectory deviation of {self.deviation_m:.3f} m, over the "
                    f"bound {self.bound_m:.3f} m (int8_max_deviation_m)")
        return None


def _matmul_ms(dtype: torch.dtype, hidden: int, intermediate: int) -> float:
    """Best time of (PROBE_TOKENS, hidden) @ (hidden, intermediate) in `dtype`, the bulk of a block's work."""
    gen = torch.Generator().manual_seed(0)
    x = torch.randn(PROBE_TOKENS, hidden, generator=gen).to(dtype)
    w = torch.randn(hidden, intermediate, generator=gen).to(dtype)
    torch.matmul(x, w)  # warm-up: oneDNN picks and caches its kernel
    best = float("inf")
    for _ in range(PROBE_REPEATS):
        t0 = time.perf_counter()
        torch.matmul(x, w)
        best = min(best, time.perf_counter() - t0)
    return best * 1e3


def _int8_ms(hidden: int, intermediate: int) -> float:
    """Best time of the int8 suffix's linear (engine/int8.py) on PROBE_TOKENS rows of hidden -> intermediate,
    its rows in the dtype the int8 suffix runs the rest of a block in."""
    from .int8 import int8_linear
    from .placement import int8_rest_dtype
    gen = torch.Generator().manual_seed(0)
    layer = int8_linear(torch.randn(intermediate, hidden, generator=gen), torch.ones(hidden))
    x = torch.randn(PROBE_TOKENS, hidden, generator=gen).to(int8_rest_dtype())
    with torch.inference_mode():
        layer(x)
        best = float("inf")
        for _ in range(PROBE_REPEATS):
            t0 = time.perf_counter()
            layer(x)
            best = min(best, time.perf_counter() - t0)
    return best * 1e3


def choose_with_int8(float_choice: DtypeChoice, hidden: int, intermediate: int, cores: list[int] | None,
                     gate: Int8Gate, timer=_matmul_ms, int8_timer=_int8_ms) -> DtypeChoice:
    """The float choice, or int8 where the gate lets it be probed and it measures clearly faster."""
    refusal = gate.refusal()
    if refusal:
        return replace(float_choice, reason=f"{float_choice.reason}; int8 not taken: {refusal}")
    with pinned(cores):
        float_ms = float_choice.bf16_ms if float_choice.dtype == "bf16" else (
            float_choice.fp32_ms if float_choice.fp32_ms is not None else timer(torch.float32, hidden, intermediate))
        int8_ms = int8_timer(hidden, intermediate)
    verdict = "int8" if int8_ms < INT8_MUST_BE_FASTER * float_ms else float_choice.dtype
    return replace(float_choice, dtype=verdict, int8_ms=int8_ms,
                   reason=f"{float_choice.reason}; int8 (calibrated deviation {gate.deviation_m:.3f} m <= "
                          f"{gate.bound_m:.3f} m) {int8_ms:.2f} ms vs {float_choice.dtype} {float_ms:.2f} ms -> {verdict}")


def choose_suffix_dtype(hidden: int, intermediate: int, cores: list[int] | None = None,
                        flags: set[str] | None = None, timer=_matmul_ms, int8: Int8Gate | None = None,
                        int8_timer=_int8_ms) -> DtypeChoice:
    """`dtype: auto` for the CPU suffix: bf16 only where the CPU has native bf16 (AMX or avx512_bf16) and a
    short probe on the suffix's own cores measures it faster; fp32 otherwise (without native bf16, bf16 is
    emulated and slower; measured 3.7x faster with avx512_bf16 on an earlier machine, DESIGN.md). Then, with
    an int8 gate, int8 where the gate allows it and the probe measures it clearly faster than that."""
    choice = _choose_float(hidden, intermediate, cores, flags, timer)
    return choice if int8 is None else choose_with_int8(choice, hidden, intermediate, cores, int8, timer, int8_timer)


def _choose_float(hidden: int, intermediate: int, cores, flags, timer) -> DtypeChoice:
    flags = cpu_flags() if flags is None else flags
    native = [f for f in BF16_FLAGS if f in flags]
    if not native:
        return DtypeChoice("fp32", "no native bf16 on this CPU (neither amx_bf16 nor avx512_bf16): fp32")
    with pinned(cores):
        fp32_ms, bf16_ms = timer(torch.float32, hidden, intermediate), timer(torch.bfloat16, hidden, intermediate)
    faster = bf16_ms < BF16_MUST_BE_FASTER * fp32_ms
    verdict = "bf16" if faster else "fp32"
    return DtypeChoice(verdict, f"{native[0]}: probe {hidden}x{intermediate} on cores {cores or 'unpinned'}: bf16 "
                                f"{bf16_ms:.2f} ms vs fp32 {fp32_ms:.2f} ms -> {verdict}", fp32_ms, bf16_ms)
