"""int8 linear layers for the CPU suffix (issue 40): weights int8 per output channel (symmetric, scale =
absmax / 127), activations int8 per token (symmetric, scale = the row's absmax / range, computed at every
call); optionally smoothed per input channel (SmoothQuant: x / s into a weight scaled by s, from a
calibration, engine/int8_calibration.py).

The kernel: oneDNN's quantized linear (`onednn::qlinear_pointwise`, the op Inductor's x86 quantization lowers
to) with the weight prepacked once. Its activation scale is per tensor, so a row's own scale is applied to its
output row after the call (x_scale 1): per-token precision at the per-tensor kernel's speed, for any row count
(a frame's prefill and a packed decode step's few rows alike). Measured against `torch._int_mm` with separate
quantize / dequantize passes, torch.ao's fbgemm dynamic linear and `_weight_int8pack_mm`
(docs/DESIGN_DECISIONS.md, int8 suffix).

Activations go in as uint8 with zero point ACT_ZERO. Where the CPU has no VNNI (AVX2 / AVX-512 without
vnni), oneDNN's u8 x s8 products are summed in pairs into int16 (vpmaddubsw) and can saturate: activations
then use 7 bits (|q| <= 63, zero point 64), as fbgemm's reduce_range does for the same reason.
"""

from __future__ import annotations

import copy

import torch
from torch import nn

from .cpu import cpu_flags

WEIGHT_MAX = 127.0
QUANT_ROWS = 128
VNNI_FLAGS = ("avx512_vnni", "avx_vnni", "amx_int8")
_TINY = 1e-12


def activation_range(flags: set[str] | None = None) -> tuple[float, int]:
    """(largest |q|, zero point) of the uint8 activations on this CPU: 8 bits with VNNI, 7 without."""
    flags = cpu_flags() if flags is None else flags
    return (127.0, 128) if any(f in flags for f in VNNI_FLAGS) else (63.0, 64)


class Int8Linear(nn.Module):
    """y = x W^T + b with W int8 per output channel and x int8 per token (dynamic). x: (..., K) float ->
    (..., N) in x's dtype. smooth: (K,) SmoothQuant scales, folded into the weight here (None: none)."""

    def __init__(self, linear: nn.Linear, smooth: torch.Tensor | None = None, act_range=None):
        super().__init__()
        weight = linear.weight.detach().float()                                       # (N, K)
        if smooth is not None:
            smooth = smooth.detach().float().clamp_min(_TINY)
            weight = weight * smooth                                                  # column j times s_j
        self.register_buffer("inv_smooth", None if smooth is None else 1.0 / smooth)  # (K,) or None
        scale = weight.abs().amax(dim=1).clamp_min(_TINY) / WEIGHT_MAX                # (N,)
        self.register_buffer("weight_q", torch.round(weight / scale[:, None]).clamp(-WEIGHT_MAX, WEIGHT_MAX)
                             .to(torch.int8))                                         # (N, K) int8
        self.register_buffer("weight_scale", scale)                                   # (N,)
        self.bias = None if linear.bias is None else nn.Parameter(linear.bias.detach().float(), requires_grad=False)
        self.in_features, self.out_features = linear.in_features, linear.out_features
        self.act_max, self.act_zero = act_range or activation_range()
        self._prepack()

    def repack(self) -> None:
        """The int8 weight and oneDNN's packed copy allocated anew from the calling thread (a NUMA-bound suffix
        worker: their pages then live on its node)."""
        self.weight_q = self.weight_q.clone()
        self._prepack()

    def _prepack(self) -> None:
        self._packed = torch.ops.onednn.qlinear_prepack(self.weight_q, None)           # oneDNN's blocked layout
        self._zero_points = torch.zeros(self.out_features, dtype=torch.long)

    def __deepcopy__(self, memo):
        # oneDNN's packed weight does not deep-copy: the copy packs its own from the int8 weight
        clone = Int8Linear.__new__(Int8Linear)
        nn.Module.__init__(clone)
        for name, buf in self._buffers.items():
            clone.register_buffer(name, None if buf is None else buf.clone())
        clone.bias = copy.deepcopy(self.bias, memo)
        clone.in_features, clone.out_features = self.in_features, self.out_features
        clone.act_max, clone.act_zero = self.act_max, self.act_zero
        clone._prepack()
        return clone

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        shape = x.shape
        q, scale = self.quantize(x.reshape(-1, self.in_features))                    # (R, K) uint8, (R, 1)
        out = torch.ops.onednn.qlinear_pointwise(q, 1.0, self.act_zero, self._packed, self.weight_scale,
                                                 self._zero_points, None, 1.0, 0, x.dtype, "none", [], "")
        out.mul_(scale.to(x.dtype))                                                   # (R, N): each row's scale
        if self.bias is not None:
            out.add_(self.bias.to(x.dtype))
        return out.reshape(*shape[:-1], self.out_features)

    def quantize(self, rows: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """(R, K) float rows -> (R, K) uint8 and the (R, 1) fp32 scales. QUANT_ROWS rows at a time: at real
        width a frame's rows are tens of MB, and whole-frame fp32 temporaries would be page-faulted anew at
        every call (glibc maps blocks over 32 MB afresh); chunks stay in malloc's reused heap."""
        q = torch.empty(rows.shape, dtype=torch.uint8)
        scales = torch.empty(rows.shape[0], 1)
        for start in range(0, rows.shape[0], QUANT_ROWS):
            chunk = rows[start:start + QUANT_ROWS]
            chunk = chunk * self.inv_smooth if self.inv_smooth is not None else chunk.to(torch.float32, copy=True)
            # the row's absmax as max(max, -min): measured 15-25x faster here than an inf-norm or abs().amax()
            peak = torch.maximum(chunk.amax(dim=1, keepdim=True), chunk.amin(dim=1, keepdim=True).neg_())
            scale = peak.clamp_min_(_TINY).div_(self.act_max)
            q[start:start + QUANT_ROWS] = chunk.div_(scale).round_().add_(self.act_zero)
            scales[start:start + QUANT_ROWS] = scale
        return q, scales

    def extra_repr(self) -> str:
        return (f"in_features={self.in_features}, out_features={self.out_features}, "
                f"smoothed={self.inv_smooth is not None}, activation_bits={8 if self.act_max > 63 else 7}")


def int8_linear(weight: torch.Tensor, smooth: torch.Tensor | None = None) -> Int8Linear:
    """The Int8Linear of a (N, K) float weight, no bias: the block-sized linears probes and benchmarks time."""
    linear = nn.Linear(weight.shape[1], weight.shape[0], bias=False)
    with torch.no_grad():
        linear.weight.copy_(weight)
    return Int8Linear(linear, smooth)


def linear_names(module: nn.Module) -> list[str]:
    """The dotted names of every nn.Linear inside `module` (a decoder block: q/k/v/o, gate/up/down)."""
    return [name for name, sub in module.named_modules() if isinstance(sub, nn.Linear)]


def quantized_copy(block: nn.Module, smoothing: dict[str, torch.Tensor] | None = None) -> nn.Module:
    """A copy of `block` (never the block itself) with every nn.Linear an Int8Linear; `smoothing`: linear name
    -> (K,) scales for those it holds. The copy's other modules stay in the block's dtype."""
    smoothing = smoothing or {}
    out = copy.deepcopy(block)
    for name in linear_names(out):
        parent_name, _, attr = name.rpartition(".")
        parent = out.get_submodule(parent_name) if parent_name else out
        setattr(parent, attr, Int8Linear(getattr(parent, attr), smoothing.get(name)))
    return out


def int8_available() -> str | None:
    """None when this torch runs the int8 kernel on the CPU, else why not."""
    try:
        weight = torch.ones(8, 16, dtype=torch.int8)
        packed = torch.ops.onednn.qlinear_prepack(weight, None)
        torch.ops.onednn.qlinear_pointwise(torch.ones(2, 16, dtype=torch.uint8), 1.0, 0, packed, torch.ones(8),
                                           torch.zeros(8, dtype=torch.long), None, 1.0, 0, torch.float32, "none", [], "")
    except (RuntimeError, AttributeError) as exc:
        return f"torch {torch.__version__} cannot run oneDNN's int8 linear on this CPU ({exc})"
    return None
