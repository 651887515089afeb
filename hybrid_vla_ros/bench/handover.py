"""The boundary handover in isolation: send + receive through each transport, and the inline handover through
a ROS message as the nodes run it (without DDS)."""

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
    out["inline_ros_ms"] = _inline_through_a_message(state, repeats)
    return out


def _inline_through_a_message(state: BoundaryState, repeats: int) -> dict | None:
    """The inline handover as the nodes run it, without DDS: encode, into a UInt8MultiArray (the prefix's
    publish), out of it (the suffix's callback), decode. None where rclpy's messages are not installed."""
    try:
        from std_msgs.msg import UInt8MultiArray
    except ImportError:
        return None
    from ..engine.handover.endpoints import HandoverDecoder, HandoverEncoder
    from ..ros import messages
    encoder, decoder, times = HandoverEncoder("inline", 1, "bench"), HandoverDecoder(), []
    for seq in range(repeats):
        state.seq = seq
        t0 = time.perf_counter()
        msg = messages.boundary_to_msg(encoder.encode(state), UInt8MultiArray())
        received, _ = decoder.decode(messages.boundary_from_msg(msg))
        times.append((time.perf_counter() - t0) * 1e3)
        assert received.seq == seq
    return percentiles(times[2:])
