"""One token from one frame's logits: greedy (argmax) or a seeded top-p draw (ROS-free).

The draw of step i of a frame uses its own torch.Generator, seeded from (policy seed, the frame's stamp, i). It
needs no generator state carried from step to step, so the packed suffix (which sees a frame's steps among
other frames', maybe in another process, maybe first at a decode row after a restart) and the sequential
reference draw the same number at the same step. The draw is an inverse-CDF lookup of one uniform number in
the sorted, top-p-cut distribution (float64), so two paths whose logits agree to rounding pick the same token
unless the number falls within rounding of a bucket edge (tests check that margin: test/test_decode_across_cut.py).
"""

from __future__ import annotations

import torch

MASK64 = (1 << 64) - 1


def mix64(x: int) -> int:
    """splitmix64's finaliser: a well-spread 64-bit value from any integer."""
    x = (x + 0x9E3779B97F4A7C15) & MASK64
    x = ((x ^ (x >> 30)) * 0xBF58476D1CE4E5B9) & MASK64
    x = ((x ^ (x >> 27)) * 0x94D049BB133111EB) & MASK64
    return x ^ (x >> 31)


def step_seed(seed: int, stamp_ns: int, index: int) -> int:
    """The seed of step `index` of the frame stamped `stamp_ns` (63 bits: any torch.Generator takes it)."""
    return mix64(mix64(mix64(seed) ^ (stamp_ns & MASK64)) ^ index) >> 1


def step_uniform(seed: int, stamp_ns: int, index: int) -> float:
    """The uniform number in [0, 1) of step `index` of the frame stamped `stamp_ns`."""
    generator = torch.Generator().manual_seed(step_seed(seed, stamp_ns, index))
    return float(torch.rand((), generator=generator, dtype=torch.float64))


def nucleus(logits: torch.Tensor, temperature: float, top_p: float) -> tuple[torch.Tensor, torch.Tensor]:
    """logits (V,) -> (order (k,), cumulative (k,)): the k most likely ids, most likely first, and their
    cumulative probabilities (float64, unnormalised: cumulative[-1] <= 1), k the fewest whose mass reaches top_p."""
    probs = torch.softmax(logits.double() / temperature, dim=-1)                     # (V,)
    ranked, order = probs.sort(descending=True, stable=True)                         # (V,), (V,)
    cumulative = ranked.cumsum(0)
    kept = probs.shape[0] if top_p >= 1 else max(1, int((cumulative - ranked < top_p).sum()))  # mass before < top_p
    return order[:kept], cumulative[:kept]


def sampled_index(logits: torch.Tensor, temperature: float, top_p: float, uniform: float) -> int:
    """The index into logits (V,) that `uniform` in [0, 1) picks from the top-p distribution (renormalised)."""
    order, cumulative = nucleus(logits, temperature, top_p)
    target = torch.tensor([uniform * float(cumulative[-1])], dtype=torch.float64)
    pick = min(int(torch.searchsorted(cumulative, target, right=True)), order.shape[0] - 1)
    return int(order[pick])


def greedy_index(logits: torch.Tensor) -> int:
    """The index of the largest of logits (V,)."""
    return int(logits.argmax(dim=-1))
