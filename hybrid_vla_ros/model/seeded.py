"""Real-size presets: weights drawn on demand, one seeded generator per tensor (ROS-free).

A 3B model built the usual way runs `nn.init` over every module in fp32 first (minutes here, and twice the
memory of bf16). Instead the model is built with its parameters on the meta device, and a stage asks for the
modules it runs (`ensure_loaded`, like a checkpoint's side): each of their tensors is filled in the stage's
dtype from a generator seeded by (preset seed, tensor name), so every process that materialises a tensor
gets the same values whatever else it materialises, in whatever order, on as many threads as it has.

Values (not a trained model; finite and of the usual scale, so timings and memory are those of the real
thing): matrices and embeddings N(0, 0.02) as HF's `initializer_range`; biases 0; other vectors
(norm weights, layer scales) 1.
"""

from __future__ import annotations

import hashlib
import os
import threading
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager

import torch
from torch import nn

from ..errors import ConfigError, expect

INIT_STD = 0.02
MEMORY_HEADROOM = 0.9   # refuse to materialise more than this share of the memory available now


_BUILD_LOCK = threading.Lock()


@contextmanager
def parameters_on_meta():
    """Modules built inside get their parameters on the meta device (no memory, no init); buffers are real.
    Holds a lock: module construction elsewhere in the process waits (the patch is process-wide)."""
    original = nn.Module.register_parameter

    def register(module, name, param):
        if param is not None and param.device.type != "meta":
            param = nn.Parameter(param.to("meta"), requires_grad=param.requires_grad)
        original(module, name, param)
    with _BUILD_LOCK:
        nn.Module.register_parameter = register
        try:
            yield
        finally:
            nn.Module.register_parameter = original


def tensor_seed(seed: int, name: str) -> int:
    """A 63-bit seed per (preset seed, tensor name): independent of which other tensors are drawn."""
    digest = hashlib.sha256(f"{seed}:{name}".encode()).digest()
    return int.from_bytes(digest[:8], "little") >> 1


def seeded_tensor(seed: int, name: str, shape: torch.Size, dtype: torch.dtype, device="cpu") -> torch.Tensor:
    """The values of one real-size tensor (see the module doc for the rule)."""
    out = torch.empty(shape, dtype=dtype, device=device)
    if name.endswith("bias"):
        return out.zero_()
    if out.dim() < 2 and "embed" not in name:
        return out.fill_(1.0)
    generator = torch.Generator(device=out.device).manual_seed(tensor_seed(seed, name))
    return out.normal_(0.0, INIT_STD, generator=generator)


def available_memory_bytes() -> int | None:
    """MemAvailable of /proc/meminfo (None where there is none)."""
    try:
        with open("/proc/meminfo") as f:
            for line in f:
                if line.startswith("MemAvailable:"):
                    return int(line.split()[1]) * 1024
    except OSError:
        pass
    return None


class SeededWeights:
    """The weight source of a real-size preset model (`model.seeded_weights`); see the module doc."""

    def __init__(self, spec):
        self.seed, self.name = spec.seed, spec.name
        self.drawn: set[str] = set()     # names materialised so far (tests and reports: which side drew what)

    def materialise(self, model: nn.Module, modules, dtype: torch.dtype, device="cpu") -> None:
        """Fill the meta parameters of `modules` (parts of `model`) in `dtype` on `device`, in parallel."""
        wanted = {id(p) for m in modules for p in m.parameters()}
        todo = [(name, p) for name, p in model.named_parameters() if id(p) in wanted and p.device.type == "meta"]
        need = sum(p.numel() for _, p in todo) * torch.empty((), dtype=dtype).element_size()
        self._check_fits(need, dtype, device)

        def draw(item):
            name, param = item
            return name, seeded_tensor(self.seed, name, param.shape, dtype, device)
        threads = max(1, min(len(todo), torch.get_num_threads(), os.cpu_count() or 1))
        with ThreadPoolExecutor(threads) as pool:     # normal_ runs on one core per tensor: tensors in parallel
            for name, tensor in pool.map(draw, todo):
                owner, _, leaf = name.rpartition(".")
                model.get_submodule(owner)._parameters[leaf] = nn.Parameter(tensor, requires_grad=False)
                self.drawn.add(name)

    def _check_fits(self, need: int, dtype: torch.dtype, device) -> None:
        if torch.device(device).type != "cpu":
            return
        free = available_memory_bytes()
        expect(free is None or need <= MEMORY_HEADROOM * free, ConfigError,
               f"preset '{self.name}': {need / 2**30:.1f} GiB of weights in {str(dtype).replace('torch.', '')} "
               f"do not fit the {free / 2**30 if free else 0:.1f} GiB of memory available; materialise one side "
               f"(a stage reads only its blocks), a smaller dtype, or ask `hybrid-vla info` for the shapes")


__all__ = ["SeededWeights", "parameters_on_meta", "seeded_tensor", "tensor_seed"]
