"""ActionFlow's reference tokens for tests, checked to be far from a tie, which is what makes comparing them exactly sound.

Why not bit-equality. The packed forward (engine/actionflow/forward.py: the rows of several frames in one (R, H)
batch, its own RoPE and attention over the KV ring) and the sequential reference (engine/actionflow/reference.py:
HF's layers and DynamicCache, one frame, batch 1) run different kernels: other GEMM row counts, other attention
calls. A graph's stage worker, pinned to its share of the cores, also splits its kernels over another thread count.
Their fp32 logits therefore agree only to rounding: measured at most 1.4e-6 apart (3 ulps of the largest |logit|,
about 4) over the three tiny action-token families, every cut, packs of 1, 3 and 8, on an AVX2-only CPU.

Why the tokens are still equal. A token is the argmax of its step's logits, so two paths whose logits are each
within t of each other pick the same token wherever the best logit leads the second by more than 2 t. Here
t = LOGIT_ULPS fp32 ulps (eps) of the step's largest |logit|: a few ulps per rounding of the at most 4 blocks, the
final norm and the head, 10x the 3 measured. reference_tokens asserts that margin at every greedy step of the
reference (the smallest seen in these tests: 3.4e-4, about 11x the 2 t of 3e-5), so an exact token comparison
against it holds on any CPU's kernels; a frame with a near-tie fails here, naming it, instead of flipping a token
on some other machine.
"""

from __future__ import annotations

import threading

import torch

from hybrid_vla_ros.engine.actionflow.reference import sequential_tokens

LOGIT_ULPS = 32


def reference_tokens(model, frame) -> list[int]:
    """sequential_tokens(model, frame), after checking every greedy step's top-2 margin (module docstring)."""
    steps, caller = [], threading.get_ident()

    def record(_module, _inputs, logits):   # only this thread's calls: a graph's packed side may share the head
        if threading.get_ident() == caller:
            steps.append(logits.detach().float().flatten())

    hook = model.action_head.register_forward_hook(record)
    try:
        tokens = sequential_tokens(model, frame)
    finally:
        hook.remove()
    assert len(steps) == len(tokens), (len(steps), len(tokens))
    eps = torch.finfo(torch.float32).eps
    for step, logits in enumerate(steps):
        tol = LOGIT_ULPS * eps * float(logits.abs().max())
        best, second = (float(v) for v in logits.topk(2).values)
        assert best - second > 2 * tol, (f"frame {frame.seq}, token {step}: the best logit leads by {best - second:.2e}, "
                                         f"within 2 x {tol:.2e} (fp32 rounding of another kernel could flip it)")
    return tokens
