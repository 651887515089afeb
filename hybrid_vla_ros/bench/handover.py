"""The boundary handover in isolation: send + receive through each transport (ROS-free)."""

from __future__ import annotations

import time

import torch

from ..engine.handover.transport import make_transport
from ..types import BoundaryState
from ..report import percentiles


def handover_microbench(tokens: int = 600, hidden: int = 4096, repeats: int = 40) -> dict:
    """Send + receive of an ORION-sized boundary state (600 x 4096 fp16, ~4.9 MB) through each transport."""
    state = BoundaryState(hidden=torch.randn(1, tokens, hidden).half(),
                          position_ids=torch.arange(tokens).view(1, -1),
                          attention_mask=torch.ones(1, tokens, dtype=torch.long), partition=16)
    out = {"bytes": state.nbytes()}
    for name in ("inproc", "shm", "inline"):
        transport = make_transport(name, slots=2)
        times = []
        try:
            for seq in range(repeats):
                state.seq = seq
                t0 = time.perf_counter()
                received = transport.receive(transport.send(state))
                times.append((time.perf_counter() - t0) * 1e3)
                assert received.seq == seq
        finally:
            transport.close()
        out[f"{name}_ms"] = percentiles(times[2:])
    return out
