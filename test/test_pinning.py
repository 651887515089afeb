"""The boundary copy: one copy from the tensor into its slot; a GPU prefix's ring page-locked for DMA."""

import mmap

import pytest
import torch

from hybrid_vla_ros.engine.handover import codec
from hybrid_vla_ros.engine.handover.pinning import mapping_address, register_for_device_copies
from hybrid_vla_ros.engine.handover.transport import SharedMemoryTransport
from test_transport import assert_same, make_state


def test_mapping_address_is_the_first_byte_and_leaves_the_mapping_closable():
    import ctypes
    mm = mmap.mmap(-1, 4096)
    mm[0:4] = b"HVLA"
    assert ctypes.string_at(mapping_address(mm), 4) == b"HVLA"
    mm.close()   # no buffer export left behind (a BufferError here would leak every ring)


def test_a_state_is_written_into_place_without_an_intermediate_copy(monkeypatch):
    """write_tensor copies the tensor straight into the destination buffer: no .cpu()/.numpy() on the way."""
    state = make_state(dtype=torch.bfloat16)
    calls = []
    monkeypatch.setattr(torch.Tensor, "numpy", lambda self, *a, **k: calls.append("numpy"))
    buffer = bytearray(codec.encoded_size(state))
    codec.encode_into(state, buffer)
    assert calls == []
    monkeypatch.undo()
    assert_same(codec.decode(bytes(buffer)), state)


@pytest.mark.skipif(torch.cuda.is_available(), reason="the no-GPU answer")
def test_without_cuda_the_ring_says_why_it_is_not_pinned():
    assert register_for_device_copies(mmap.mmap(-1, 4096)) == "not pinned: no CUDA"


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a GPU (the device script runs it)")
def test_a_gpu_state_goes_straight_into_a_pinned_ring_slot():
    writer, reader = SharedMemoryTransport(slots=2), SharedMemoryTransport(slots=2)
    try:
        state = make_state(dtype=torch.float16)
        gpu = make_state(dtype=torch.float16)
        gpu.hidden = gpu.hidden.cuda()
        handle = writer.send(gpu)
        assert writer.pinned == "pinned"
        assert_same(reader.receive(handle), state)
    finally:
        reader.close()
        writer.close()
