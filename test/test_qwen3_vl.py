"""Qwen3-VL (model/families/qwen3_vl.py): exact at every cut, below and above the DeepStack depth; a cut below it
hands the DeepStack additions still due over with the boundary (in process, as bytes, through shared memory),
and a boundary without them, or with damaged ones, is refused with the reason."""

import dataclasses

import numpy as np
import pytest
import torch

from hybrid_vla_ros.engine.handover import codec
from hybrid_vla_ros.engine.handover.transport import SharedMemoryTransport
from hybrid_vla_ros.engine.stages import PrefixStage, SuffixStage, reference_forward
from hybrid_vla_ros.engine.verify import verify_partitions
from hybrid_vla_ros.errors import ConfigError, InputError
from hybrid_vla_ros.model.inputs import synthetic_frame
from hybrid_vla_ros.model.spec import VLASpec
from hybrid_vla_ros.model.presets import get_preset
from hybrid_vla_ros.types import DeepStack

PRESET = "tiny-qwen3vl"


@pytest.fixture(scope="module")
def model(tiny_models):
    return tiny_models[PRESET]


def test_the_preset_is_a_real_qwen3_vl_with_deepstack_into_the_first_two_blocks(model):
    config = model.backbone.config
    assert type(model.backbone).__name__ == "Qwen3VLModel" and config.model_type == "qwen3_vl"
    assert len(config.vision_config.deepstack_visual_indexes) == model.spec.deepstack_blocks == 2
    assert config.text_config.rope_parameters["mrope_interleaved"] is True
    assert hasattr(model.decoder.layers[0].self_attn, "q_norm")  # Qwen3 blocks


def test_split_equals_hfs_own_forward_bit_for_bit_below_and_above_the_deepstack_depth(model):
    report = verify_partitions(model, frames=2)
    assert [r["partition"] for r in report["results"]] == [0, 1, 2, 3, 4]
    # split vs HF's forward: same kernels, same inputs, one thread (test_partition.py, EXACT)
    assert all(r["max_abs_diff"] == 0.0 for r in report["results"]), report["results"]


def test_the_boundary_carries_exactly_the_additions_still_due(model):
    frame = synthetic_frame(model.spec, 0)
    n = model.spec.num_cameras * model.family.image_tokens_per_camera(model.spec)
    plain = PrefixStage(model, 2).run(frame).nbytes()
    for p, due in ((0, 2), (1, 1), (2, 0), (4, 0)):
        state = PrefixStage(model, p).run(frame)
        if due == 0:
            assert state.deepstack is None
            continue
        assert state.deepstack.first_block == p and state.deepstack.features.shape == (due, n, model.spec.hidden_size)
        assert state.nbytes() == plain + due * n * model.spec.hidden_size * 4 + n * 8


def test_info_reports_the_bytes_each_cut_hands_over(model):
    from hybrid_vla_ros.engine.scheduling.partition import partition_report
    frame = synthetic_frame(model.spec, 0)
    for p in range(model.num_blocks + 1):
        report = partition_report(model, p)
        assert report["boundary_bytes"] == PrefixStage(model, p).run(frame).nbytes(), p
        assert (report["deepstack_bytes"] > 0) == (p < 2)


def test_the_additions_matter_a_suffix_without_them_would_be_wrong(model):
    """Not vacuous: zeroing the carried additions changes the trajectory, and dropping them is refused."""
    frame = synthetic_frame(model.spec, 1)
    _, reference = reference_forward(model, frame)
    state = PrefixStage(model, 0).run(frame)
    suffix = SuffixStage(model, 0)
    zeroed = DeepStack(state.deepstack.positions, torch.zeros_like(state.deepstack.features), 0)
    wrong = suffix.run(dataclasses.replace(state, deepstack=zeroed))
    assert np.abs(wrong.points - reference.points).max() > 1e-4
    state.deepstack = None
    with pytest.raises(InputError, match="no DeepStack payload at partition 0.*2 are due"):
        suffix.run(state)


@pytest.mark.parametrize("p", [0, 1, 3])
def test_the_additions_survive_the_byte_codec_exactly(model, p):
    frame = synthetic_frame(model.spec, 2)
    _, reference = reference_forward(model, frame)
    decoded = codec.decode(codec.encode(PrefixStage(model, p).run(frame)))
    assert (decoded.deepstack is None) == (p >= 2)
    # bytes copied; split vs HF's forward: same kernels, same inputs, one thread (test_partition.py, EXACT)
    assert np.array_equal(SuffixStage(model, p).run(decoded).points, reference.points)


def test_the_shared_memory_ring_grows_when_the_cut_moves_below_the_deepstack_depth(model):
    """The ring is sized at the first state (p = 3: no additions); a state at p = 0 is larger: a new ring,
    which the reader attaches to; both frames come out exact and the old ring's slot is still read."""
    prefix, suffix = PrefixStage(model, 3, zone=(0, 4)), SuffixStage(model, 3, zone=(0, 4))
    frames = [synthetic_frame(model.spec, s) for s in range(3)]
    transport = SharedMemoryTransport(slots=2, scope="test")
    try:
        handles = []
        for frame, p in zip(frames, (3, 0, 1)):
            prefix.set_partition(p)
            handles.append(transport.send(prefix.run(frame)))
        assert handles[0][0] != handles[1][0]  # another segment
        for frame, handle in zip(frames, handles):
            out = suffix.run(transport.receive(handle))
            # bytes copied; split vs HF's forward: same kernels, same inputs, one thread (test_partition.py, EXACT)
            assert np.array_equal(out.points, reference_forward(model, frame)[1].points)
    finally:
        transport.close()


def test_damaged_additions_are_refused_with_the_reason(model):
    frame = synthetic_frame(model.spec, 3)
    suffix = SuffixStage(model, 1, zone=(0, 2))
    good = PrefixStage(model, 1).run(frame)

    def refused(deepstack, match, exc=InputError):
        state = PrefixStage(model, 1).run(frame)
        state.deepstack = deepstack
        with pytest.raises(exc, match=match):
            suffix.run(state)
    ds = good.deepstack
    refused(DeepStack(ds.positions, torch.cat([ds.features, ds.features]), 1), r"DeepStack features \(2, ")
    refused(DeepStack(ds.positions, ds.features, 0), "from block 0, expected")
    refused(DeepStack(ds.positions + 1000, ds.features, 1), "DeepStack positions")
    refused(DeepStack(ds.positions, ds.features.half(), 1), "DeepStack dtype torch.float16")
    refused(DeepStack(ds.positions, ds.features.clone().fill_(float("nan")), 1), "DeepStack features", Exception)
    later = PrefixStage(model, 2).run(frame)
    later.deepstack = ds
    with pytest.raises(InputError, match="a DeepStack payload at partition 2.* 0 are due"):
        SuffixStage(model, 2).run(later)


def test_a_deepstack_depth_beyond_the_blocks_or_on_another_family_is_refused():
    spec = get_preset(PRESET).to_dict()
    with pytest.raises(ConfigError, match="deepstack_blocks=5"):
        VLASpec.from_dict({**spec, "deepstack_blocks": 5}, "test")
    with pytest.raises(ConfigError, match="deepstack_blocks=1, expected 0..0 for qwen2_vl"):
        VLASpec.from_dict({**get_preset("tiny").to_dict(), "deepstack_blocks": 1}, "test")
