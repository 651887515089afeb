"""The packed (ActionFlow) suffix in bf16: its own bf16 copies of blocks, norm and token head (the model,
shared with an fp32 prefix in one process, stays fp32), a bf16 KV ring, hidden rows taken in whatever dtype
the prefix sends (boundary_dtype auto) or refused when a named boundary dtype does not match.

Tolerance. bf16 keeps 8 significant bits: each rounding is off by at most u = 2^-9 (0.2%) relative. On the
path to a logit the weights, every block's activations (norms, q/k/v, attention, MLP, residual) and the KV
ring are rounded; over the 1-4 blocks of a cut these errors partly cancel. Measured over the three tiny
action-token families at cuts 0, 1 and 3 (8 frames, 64 greedy tokens each): the largest |bf16 - fp32| logit
is 0.92% of the step's largest |logit|. LOGIT_TOL = 2% (about 10 u) leaves twice that, while the logits of two different
frames differ by about 100% of it (4.4 and 3.9 of logits up to 4): a wrong answer cannot pass. Greedy tokens
are compared through the logits, not directly: with every logit within t of fp32, the argmax can only change
where fp32's two best logits lie within 2 t (a near-tie; random tiny models have them: margins down to 3e-4,
and 6 of those 576 tokens flipped, all at margins below 0.011). Exactness tests (test_packed_serve.py, test_actionflow.py) stay fp32.
"""

import pytest
import torch

from hybrid_vla_ros.engine.actionflow.codec import decode_state, encode_state
from hybrid_vla_ros.engine.actionflow.forward import PackedSide
from hybrid_vla_ros.engine.actionflow.prefix_server import PackedPrefixServer
from hybrid_vla_ros.engine.actionflow.suffix_server import PackedSuffixServer
from hybrid_vla_ros.errors import BoundaryDtypeError
from hybrid_vla_ros.model.load import load_vla

from test_packed_serve import FAMILIES, drive, frames_of

LOGIT_TOL = 0.02   # of the step's largest |fp32 logit| (module docstring)


@pytest.fixture(scope="module")
def models():
    return {name: load_vla(preset=name) for name in FAMILIES}


@pytest.fixture
def logits_seen(monkeypatch):
    """Every packed step's logits, by the dtype of the side that computed them, in step order."""
    seen = {torch.float32: [], torch.bfloat16: []}
    original = PackedSide.logits

    def recording(side, state):
        out = original(side, state)
        seen[side.dtype].append(out)
        return out
    monkeypatch.setattr(PackedSide, "logits", recording)
    return seen


def assert_close_to_fp32(fp32: list, bf16: list) -> None:
    """Each step's bf16 logits within LOGIT_TOL of fp32's, and a different greedy token only at a near-tie."""
    assert len(fp32) == len(bf16) > 0
    for a, b in zip(fp32, bf16):
        tol = LOGIT_TOL * float(a.abs().max())
        assert float((a - b).abs().max()) <= tol
        top2 = a.topk(2, dim=-1).values
        flipped = a.argmax(dim=-1) != b.argmax(dim=-1)
        assert bool(((top2[:, 0] - top2[:, 1])[flipped] <= 2 * tol).all())


@pytest.mark.parametrize("name", FAMILIES)
def test_a_bf16_packed_suffix_gives_the_fp32_logits_within_bf16_rounding(models, name, logits_seen):
    """The fp32 suffix answers the prefix; a bf16 suffix server steps the very same payloads beside it (its
    KV ring fills with the same rows). Cut at 0 (every block on the suffix) and at 2, two groups."""
    model = models[name]
    for partition in (0, 2):
        for seen in logits_seen.values():
            seen.clear()
        bf16 = PackedSuffixServer(model, dtype=torch.bfloat16)
        prefix = PackedPrefixServer(model, 3, 2, partition, policy="lossless", capacity=16, token_timeout_s=60.0)
        done, _ = drive(prefix, PackedSuffixServer(model), frames_of(model, 6),
                        on_step=lambda sent: bf16.step(sent.payload))
        assert len(done) == 6 and not prefix.take_lost()
        assert_close_to_fp32(logits_seen[torch.float32], logits_seen[torch.bfloat16])
        side = bf16.side
        assert all(b.self_attn.q_proj.weight.dtype == torch.bfloat16 for b in side.blocks)
        assert side.head.proj.weight.dtype == torch.bfloat16 and side.norm.weight.dtype == torch.bfloat16
        assert all(k.dtype == torch.bfloat16 for k in side.ring.keys.values())
    assert all(p.dtype == torch.float32 for p in model.parameters())   # own copies: the shared model untouched


def test_a_bf16_packed_suffix_answering_the_prefix_completes_every_frame(models):
    """bf16 tokens fed back: every frame completes once, with its stamp, its tokens in the action vocabulary."""
    model = models["tiny-qwen3vl-act"]   # M-RoPE and DeepStack additions still due at p = 1
    frames = frames_of(model, 7)
    prefix = PackedPrefixServer(model, 3, 2, 1, policy="lossless", capacity=16, token_timeout_s=60.0)
    done, steps = drive(prefix, PackedSuffixServer(model, zone=(0, 2), dtype=torch.bfloat16), frames)
    tokenizer = model.action_tokenizer
    assert {r.seq: r.stamp_ns for r in done} == {f.seq: f.stamp_ns for f in frames} and not prefix.take_lost()
    assert all(len(r.tokens) == tokenizer.tokens_per_frame and
               all(tokenizer.base <= t < tokenizer.base + tokenizer.bins for t in r.tokens) for r in done)
    assert max(s.rows for s in steps) > 1


def _steps(model, partition=2, dtype=torch.float32):
    """The payloads of a packed prefix (its sides in `dtype`) answered by an fp32 suffix, in order."""
    sent = []
    prefix = PackedPrefixServer(model, 2, 1, partition, policy="lossless", capacity=8, token_timeout_s=60.0,
                                dtype=dtype)
    drive(prefix, PackedSuffixServer(model, boundary_dtype=None), frames_of(model, 3),
          on_step=lambda s: sent.append(s.payload))
    return sent


def _as(payload: bytes, dtype: torch.dtype) -> bytes:
    state, header = decode_state(payload)
    state.hidden = state.hidden.to(dtype)
    return encode_state(state, header.partition, header.step, header.slots, header.deadline_ns)


def test_boundary_dtype_auto_follows_the_prefix_and_a_named_one_refuses_any_other(models, logits_seen):
    model = models["tiny-act"]
    payloads = _steps(model)
    exact, following = PackedSuffixServer(model), PackedSuffixServer(model, boundary_dtype=None)
    for payload in payloads:
        exact.step(payload)
        following.step(_as(payload, torch.bfloat16))   # a bf16 prefix's rows, converted to this fp32 suffix
    fp32 = logits_seen[torch.float32]
    assert_close_to_fp32(fp32[-2 * len(payloads)::2], fp32[-2 * len(payloads) + 1::2])
    named = PackedSuffixServer(model, dtype=torch.bfloat16, boundary_dtype=torch.float32)
    for dtype in (torch.bfloat16, torch.float16):
        with pytest.raises(BoundaryDtypeError, match=f"dtype {dtype}, expected torch.float32 "
                                                     r"\(boundary_dtype: fp32") as refused:
            named.step(_as(payloads[0], dtype))
        assert refused.value.reason == "boundary_dtype_mismatch"
    named.step(payloads[0])   # the named dtype itself is taken


def test_a_bf16_packed_prefix_sends_bf16_rows_that_an_auto_suffix_takes(models):
    model = models["tiny-llava-act"]
    payloads = _steps(model, partition=2, dtype=torch.bfloat16)
    assert {decode_state(p)[0].hidden.dtype for p in payloads} == {torch.bfloat16}
    with pytest.raises(BoundaryDtypeError):
        PackedSuffixServer(model).step(payloads[0])   # the engine's default: fp32 rows only
