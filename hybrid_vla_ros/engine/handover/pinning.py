"""Page-locked shared memory for a GPU prefix (ROS-free).

A device -> host copy into pageable memory goes through the driver's own staging buffer (two copies, the
second by the CPU); into page-locked memory it is one DMA. A GPU prefix writing to a shared-memory ring
registers the ring's mapping with CUDA once (cudaHostRegister), so each boundary state is copied straight
from the GPU into its slot: no `.cpu()` tensor, no second copy into the ring.
"""

from __future__ import annotations

import ctypes
import mmap

import torch

CUDA_HOST_REGISTER_PORTABLE = 1


def mapping_address(mm: mmap.mmap) -> int:
    """The address of an mmap's first byte (the ctypes view is dropped at once: the mapping stays closable)."""
    view = ctypes.c_char.from_buffer(mm)
    try:
        return ctypes.addressof(view)
    finally:
        del view


def register_for_device_copies(mm: mmap.mmap) -> str:
    """Page-lock the mapping for CUDA copies. -> 'pinned', or why not (no CUDA, or the driver refused)."""
    if not torch.cuda.is_available():
        return "not pinned: no CUDA"
    error = torch.cuda.cudart().cudaHostRegister(mapping_address(mm), len(mm), CUDA_HOST_REGISTER_PORTABLE)
    return "pinned" if int(error) == 0 else f"not pinned: cudaHostRegister returned {int(error)}"


def unregister(mm: mmap.mmap) -> None:
    if torch.cuda.is_available():
        torch.cuda.cudart().cudaHostUnregister(mapping_address(mm))
