"""Bad input raises an error that names the value, what was expected and where it came from."""


import numpy as np
import pytest
import torch

from hybrid_vla_ros.engine.placement import Placement
from hybrid_vla_ros.engine.stages import PrefixStage, SuffixStage
from hybrid_vla_ros.types import EgoState
from hybrid_vla_ros.errors import BoundaryDtypeError, ConfigError, InputError
from hybrid_vla_ros.model.inputs import synthetic_frame
from hybrid_vla_ros.model.load import load_vla


@pytest.fixture(scope="module")
def tiny():
    return load_vla(preset="tiny")


@pytest.mark.parametrize("partition", [-1, 5, 99])
def test_partition_outside_range_is_refused(tiny, partition):
    with pytest.raises(ConfigError, match=rf"{partition} is outside 0\.\.4"):
        PrefixStage(tiny, partition)
    with pytest.raises(ConfigError, match=rf"{partition} is outside 0\.\.4"):
        SuffixStage(tiny, partition)


def test_non_integer_partition_is_refused(tiny):
    with pytest.raises(ConfigError, match="'2' is not an integer"):
        SuffixStage(tiny, "2")


def test_unknown_preset_names_the_known_ones():
    with pytest.raises(ConfigError, match=r"unknown preset 'huge'.*tiny"):
        load_vla(preset="huge")


def test_a_camera_of_another_size_is_resized_and_an_empty_one_is_refused(tiny):
    frame = synthetic_frame(tiny.spec, 7)
    frame.images[1] = np.zeros((40, 72, 3), np.uint8)
    assert PrefixStage(tiny, 2).run(frame).hidden.shape == PrefixStage(tiny, 2).run(synthetic_frame(tiny.spec, 7)).hidden.shape
    frame.images[1] = np.zeros((0, 56, 3), np.uint8)
    with pytest.raises(InputError, match=r"frame 7 camera 1: image shape \(0, 56, 3\), expected \(H, W, 3\)"):
        PrefixStage(tiny, 2).run(frame)


def test_wrong_channel_count_is_refused(tiny):
    frame = synthetic_frame(tiny.spec, 0)
    frame.images[0] = np.zeros((56, 56, 4), np.uint8)
    with pytest.raises(InputError, match=r"camera 0: image shape \(56, 56, 4\), expected \(H, W, 3\)"):
        PrefixStage(tiny, 2).run(frame)


def test_wrong_camera_count_and_dtype_are_refused(tiny):
    frame = synthetic_frame(tiny.spec, 0)
    frame.images = frame.images[:1]
    with pytest.raises(InputError, match="1 camera images, model 'tiny' expects 2"):
        PrefixStage(tiny, 2).run(frame)
    frame = synthetic_frame(tiny.spec, 0)
    frame.images[0] = frame.images[0].astype(np.float32)
    with pytest.raises(InputError, match="dtype float32, expected uint8"):
        PrefixStage(tiny, 2).run(frame)


def test_non_finite_ego_state_is_refused(tiny):
    frame = synthetic_frame(tiny.spec, 3)
    frame.ego = EgoState(speed_mps=float("nan"))
    with pytest.raises(InputError, match="frame 3: ego speed_mps=nan"):
        PrefixStage(tiny, 2).run(frame)


def _state(tiny, partition=2):
    return PrefixStage(tiny, partition).run(synthetic_frame(tiny.spec, 0))


def test_boundary_state_from_another_partition_is_refused(tiny):
    with pytest.raises(InputError, match=r"computed at partition 1, this suffix runs from block 2 \(dynamic zone \[2, 2\]\)"):
        SuffixStage(tiny, 2).run(_state(tiny, 1))


def test_boundary_state_with_wrong_shape_is_refused(tiny):
    state = _state(tiny)
    state.hidden = state.hidden[:, :-3]
    with pytest.raises(InputError, match=r"hidden shape \(1, 39, 64\), expected \(1, 42, 64\)"):
        SuffixStage(tiny, 2).run(state)


def test_boundary_state_with_wrong_dtype_is_refused(tiny):
    state = _state(tiny)
    state.hidden = state.hidden.to(torch.float16)
    with pytest.raises(BoundaryDtypeError, match="hidden dtype torch.float16, expected torch.float32") as refused:
        SuffixStage(tiny, 2).run(state)
    assert refused.value.reason == "boundary_dtype_mismatch"   # what the suffix node counts it as


@pytest.mark.parametrize("dtype", [torch.float32, torch.float16, torch.bfloat16])
def test_boundary_dtype_auto_takes_what_the_prefix_sends_in_the_suffix_dtype(tiny, dtype):
    """boundary_dtype: auto (any_boundary_dtype): fp32, fp16 or bf16 rows, run in the suffix's own dtype."""
    exact = SuffixStage(tiny, 2).run(_state(tiny)).points
    state = _state(tiny)
    state.hidden = state.hidden.to(dtype)
    for suffix_dtype in (torch.float32, torch.bfloat16):
        stage = SuffixStage(tiny, 2, Placement(suffix_dtype=suffix_dtype), any_boundary_dtype=True)
        points = stage.run(state).points
        # fp32 rows into an fp32 suffix: no conversion, the same suffix kernels on the same state, on this thread
        exact_here = dtype == suffix_dtype == torch.float32
        # bf16 rounding of the boundary or of the suffix changes the numbers a little (under 0.1), not the plan
        assert np.array_equal(points, exact) if exact_here else np.abs(points - exact).max() < 0.1
    state.hidden = state.hidden.to(torch.int32)
    with pytest.raises(BoundaryDtypeError, match="expected one a prefix computes in"):
        SuffixStage(tiny, 2, any_boundary_dtype=True).run(state)


def test_boundary_state_with_wrong_positions_is_refused(tiny):
    state = _state(tiny)
    state.position_ids = state.position_ids[0]
    with pytest.raises(InputError, match=r"position_ids shape \(1, 42\), expected \(3, 1, 42\)"):
        SuffixStage(tiny, 2).run(state)


def test_suffix_serves_the_next_good_state_after_a_rejection(tiny):
    suffix = SuffixStage(tiny, 2)
    bad = _state(tiny)
    bad.hidden = bad.hidden[:, :5]
    with pytest.raises(InputError):
        suffix.run(bad)
    assert suffix.run(_state(tiny)).points.shape == (tiny.spec.num_waypoints, 5)


def test_unavailable_cuda_and_unknown_dtype_are_refused():
    if not torch.cuda.is_available():
        with pytest.raises(ConfigError, match="'cuda' requested but torch.cuda.is_available\\(\\) is False"):
            Placement.create(prefix_device="cuda")
    with pytest.raises(ConfigError, match="'int8' is not one of"):
        Placement.create(prefix_dtype="int8")


def test_a_boundary_state_with_one_inf_is_refused_as_nonfinite(tiny):
    """Tried as a new user would: one inf element used to come out as a trajectory of NaN waypoints."""
    from hybrid_vla_ros.errors import NonFiniteError
    suffix = SuffixStage(tiny, 2)
    for bad in (float("inf"), float("nan"), float("-inf")):
        state = _state(tiny)
        state.hidden = state.hidden.clone()
        state.hidden[0, 7, 3] = bad
        with pytest.raises(NonFiniteError, match=r"hidden: 1 of 2688 values are NaN or Inf") as info:
            suffix.run(state)
        assert info.value.reason == "nonfinite_boundary"
    assert np.isfinite(suffix.run(_state(tiny)).points).all()   # and the next good state is served


def test_a_trajectory_with_nan_waypoints_is_refused_as_nonfinite_output(tiny):
    import copy
    from hybrid_vla_ros.errors import NonFiniteError
    broken = copy.deepcopy(tiny)
    with torch.no_grad():
        broken.action_head.mlp[2].bias[0] = float("nan")   # an overflowing head: the first waypoint's dx
    with pytest.raises(NonFiniteError, match="trajectory of frame 0") as info:
        SuffixStage(broken, 2).run(_state(broken))
    assert info.value.reason == "nonfinite_output"


def test_nonfinite_refusals_warn_and_turn_to_error_while_they_persist():
    from hybrid_vla_ros.engine.pipeline.worker import ERROR, OK, WARN, StageHealth
    health = StageHealth(error_after=3)

    def level():
        return next(c for c in health.checks(0) if c[0] == "nonfinite")[1]
    assert level() == OK
    health.reject("nonfinite_boundary")
    assert level() == WARN
    health.reject("nonfinite_output")
    health.reject("nonfinite_boundary")
    assert level() == ERROR
    health.reject("invalid_boundary")          # another reason neither adds to nor ends the streak
    assert level() == ERROR
    health.record(5.0)                         # a frame served: the streak is over, the count stays
    assert level() == WARN
    values = next(c for c in health.checks(0) if c[0] == "nonfinite")[3]
    assert values["nonfinite"] == "3" and values["rejected.nonfinite_boundary"] == "2"
