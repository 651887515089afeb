"""Every device and dtype decision of the engine, in one place.

The prefix device is `cuda` when available (pinned host buffers, non-blocking copies) or the CPU; the
suffix is always the CPU. Code elsewhere calls these helpers instead of `.to(...)` so that the same code
runs unchanged on a machine with a GPU.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from ..errors import BoundaryDtypeError, ConfigError, expect
from .cpu import BF16_FLAGS, cpu_flags

DTYPES = {"fp32": torch.float32, "float32": torch.float32, "bf16": torch.bfloat16, "bfloat16": torch.bfloat16,
          "fp16": torch.float16, "float16": torch.float16}
DTYPE_NAMES = {torch.float32: "fp32", torch.bfloat16: "bf16", torch.float16: "fp16"}
CPU = torch.device("cpu")
BOUNDARY_DTYPES = (torch.float32, torch.float16, torch.bfloat16)  # what a prefix may send (its compute dtype)
INT8 = "int8"   # a suffix dtype: the blocks' linear layers in int8 (engine/int8.py), the rest: int8_rest_dtype()


def parse_dtype(name: str | torch.dtype, where: str = "dtype") -> torch.dtype:
    if isinstance(name, torch.dtype):
        expect(name in DTYPE_NAMES, ConfigError, f"{where}: {name} is not one of {sorted(set(DTYPE_NAMES.values()))}")
        return name
    expect(name in DTYPES, ConfigError, f"{where}: '{name}' is not one of {sorted(DTYPES)}")
    return DTYPES[name]


def int8_rest_dtype(flags: set[str] | None = None) -> torch.dtype:
    """What an int8 suffix runs besides its linears (norms, attention, activations, head): bf16 where the CPU
    has native bf16 (half the bytes of fp32 through the elementwise steps), else fp32 (emulated bf16 is
    slower than fp32). Measured in docs/BENCHMARKS.md (int8 suffix)."""
    flags = cpu_flags() if flags is None else flags
    return torch.bfloat16 if any(f in flags for f in BF16_FLAGS) else torch.float32


def int8_flavour() -> str:
    """How the int8 suffix runs on this CPU, in words: its activation bits and the rest's dtype (what a
    calibration's measured deviation holds for)."""
    from .int8 import activation_range
    bits = 8 if activation_range()[0] > 63 else 7
    return f"{bits}-bit activations, the rest in {DTYPE_NAMES[int8_rest_dtype()]}"


def parse_suffix_dtype(name: str | torch.dtype) -> tuple[torch.dtype, bool]:
    """A CPU suffix's dtype -> (its float compute dtype, whether its blocks' linears run in int8)."""
    if name == INT8:
        return int8_rest_dtype(), True
    expect(name in DTYPES or isinstance(name, torch.dtype), ConfigError,
           f"suffix dtype: '{name}' is not one of {sorted([*DTYPES, INT8])}")
    return parse_dtype(name, "suffix dtype"), False


def parse_boundary_dtype(name: str) -> torch.dtype | None:
    """The suffix's boundary_dtype: 'auto' -> None (whatever float dtype the prefix sends), else that dtype."""
    return None if name == "auto" else parse_dtype(name, "boundary_dtype")


def check_boundary_dtype(dtype: torch.dtype, expected: torch.dtype | None, what: str) -> None:
    """A boundary tensor's dtype. expected None (boundary_dtype: auto): any dtype a prefix computes in (fp32,
    fp16, bf16; the suffix converts it to its own); else exactly `expected`. BoundaryDtypeError otherwise."""
    if expected is None:
        expect(dtype in BOUNDARY_DTYPES, BoundaryDtypeError,
               f"{what} dtype {dtype}, expected one a prefix computes in (fp32, fp16, bf16; boundary_dtype: auto)")
    else:
        expect(dtype == expected, BoundaryDtypeError,
               f"{what} dtype {dtype}, expected {expected} (boundary_dtype: {DTYPE_NAMES[expected]}; set it to the "
               f"prefix dtype, or to auto to follow whatever the prefix sends)")


def resolve_prefix_device(name: str = "auto") -> torch.device:
    """'auto' -> cuda if available else cpu; 'cuda[:i]' must be available; 'cpu' always works."""
    if name == "auto":
        return torch.device("cuda") if torch.cuda.is_available() else CPU
    try:
        device = torch.device(name)
    except RuntimeError as exc:
        raise ConfigError(f"prefix device '{name}' is not a torch device ({exc})") from exc
    expect(device.type in ("cpu", "cuda"), ConfigError, f"prefix device '{name}': expected 'auto', 'cpu' or 'cuda'")
    expect(device.type != "cuda" or torch.cuda.is_available(), ConfigError,
           f"prefix device '{name}' requested but torch.cuda.is_available() is False on this machine")
    return device


@dataclass(frozen=True)
class Placement:
    prefix_device: torch.device = CPU
    prefix_dtype: torch.dtype = torch.float32
    suffix_dtype: torch.dtype = torch.float32
    suffix_device: torch.device = CPU
    suffix_int8: bool = False    # the suffix blocks' linears in int8, the rest in suffix_dtype (fp32)

    @classmethod
    def create(cls, prefix_device: str = "auto", prefix_dtype: str = "fp32", suffix_dtype: str = "fp32") -> "Placement":
        dtype, int8 = parse_suffix_dtype(suffix_dtype)
        return cls(resolve_prefix_device(prefix_device), parse_dtype(prefix_dtype, "prefix dtype"), dtype,
                   suffix_int8=int8)

    @property
    def suffix_kind(self):
        """The suffix's arithmetic as the planner names it: its torch dtype, or INT8 for int8 linears."""
        return INT8 if self.suffix_int8 else self.suffix_dtype

    @property
    def suffix_name(self) -> str:
        """The suffix dtype as the `dtype` parameter names it: fp32, bf16, fp16 or int8."""
        return INT8 if self.suffix_int8 else DTYPE_NAMES[self.suffix_dtype]

    @property
    def uses_cuda(self) -> bool:
        return self.prefix_device.type == "cuda"

    def exact_fp32(self) -> None:
        """fp32 on the GPU means fp32: TF32 off for matmuls and cuDNN convolutions. PyTorch leaves cuDNN's TF32
        on by default, and the vision patch embedding (a convolution) then differs from the CPU by ~1e-3
        (measured on an H200: verify --preset tiny 6.5e-4). Process-wide, as PyTorch's switches are; a
        reduced-precision prefix dtype (fp16/bf16) leaves them alone."""
        if self.uses_cuda and self.prefix_dtype == torch.float32:
            torch.backends.cuda.matmul.allow_tf32 = False
            torch.backends.cudnn.allow_tf32 = False

    def describe(self) -> dict:
        return {"prefix_device": str(self.prefix_device), "prefix_dtype": DTYPE_NAMES[self.prefix_dtype],
                "suffix_device": str(self.suffix_device), "suffix_dtype": self.suffix_name}

    # ---- modules -------------------------------------------------------------------------------------
    def to_prefix(self, tensor: torch.Tensor) -> torch.Tensor:
        if self.uses_cuda and tensor.device.type == "cpu" and not tensor.is_pinned():
            tensor = tensor.pin_memory()
        return tensor.to(self.prefix_device, non_blocking=self.uses_cuda)

    def host_buffer(self, shape, dtype: torch.dtype) -> torch.Tensor:
        """A host buffer for boundary states: pinned when a GPU copies into it."""
        return torch.empty(shape, dtype=dtype, pin_memory=self.uses_cuda)

    def to_host(self, tensor: torch.Tensor, out: torch.Tensor | None = None) -> torch.Tensor:
        """Device -> host. With `out` (preallocated, pinned on CUDA) copies into it; syncs before returning."""
        if tensor.device.type == "cpu":
            return tensor if out is None else out.copy_(tensor)
        if out is None:
            out = self.host_buffer(tensor.shape, tensor.dtype)
        out.copy_(tensor, non_blocking=True)
        torch.cuda.current_stream(tensor.device).synchronize()
        return out

    def synchronize(self) -> None:
        if self.uses_cuda:
            torch.cuda.synchronize(self.prefix_device)
