"""Heads that read what the published planners read (issue 38, item 2; model/plugins/driving_heads.py): the whole
final sequence, the frame context, a named token subset's logits, a command-chosen mode, seeded DDIM steps; exact
at every cut, whole frames and chunked, in process and through the boundary codec (the context rides along)."""

import dataclasses
import math

import numpy as np
import pytest
import torch
from torch import nn

from hybrid_vla_ros.context import FrameContext
from hybrid_vla_ros.engine.handover.codec import decode, encode
from hybrid_vla_ros.engine.stages import PrefixStage, SuffixStage, reference_forward
from hybrid_vla_ros.engine.verify import verify_partitions
from hybrid_vla_ros.errors import ConfigError, NonFiniteError
from hybrid_vla_ros.model.checkpoint import load_checkpoint, save_checkpoint
from hybrid_vla_ros.model.inputs import synthetic_frame
from hybrid_vla_ros.model.plugins import WaypointHead
from hybrid_vla_ros.model.plugins.diffusion_head import DdimPlannerHead
from hybrid_vla_ros.model.plugins.driving_heads import ORION_MODES
from hybrid_vla_ros.model.presets import get_preset
from hybrid_vla_ros.model.vla import build_model
from hybrid_vla_ros.types import NAV_COMMANDS, Navigation

DRIVING = ["tiny-orion", "tiny-minddrive", "tiny-recogdrive", "tiny-simlingo", "tiny-orion-vae", "tiny-minddrive-vae"]
CHUNKED_TOLERANCE_M = 1e-4   # chunked prefill's matmul shapes differ from a whole frame's (test_chunked.py's bound)


@pytest.fixture(scope="module")
def models():
    return {name: build_model(get_preset(name)) for name in DRIVING}


def with_command(frame, command: str):
    """The frame with its context's route command replaced (a copy; the images are shared)."""
    context = FrameContext.from_dict(frame.context.to_dict())
    nav = context.navigation
    context.navigation = Navigation(command, nav.distance_m, nav.goal_ego, nav.target_ego, "route")
    return dataclasses.replace(frame, context=context)


@pytest.mark.parametrize("name", DRIVING)
def test_each_driving_head_is_exact_at_every_cut(models, name):
    model = models[name]
    result = verify_partitions(model, frames=3)   # frames 0..2: three route commands, three noise seeds
    assert [r["partition"] for r in result["results"]] == list(range(model.num_blocks + 1))
    assert result["max_abs_diff"] == 0.0, result["results"]


@pytest.mark.parametrize("name", DRIVING)
def test_chunked_frames_give_the_same_plan_and_extras(models, name):
    """A sequence-reading head gets every chunk's rows (the suffix keeps them), not the last chunk's."""
    model = models[name]
    frame = synthetic_frame(model.spec, 2)
    model.reset_memory("test")
    _, reference = reference_forward(model, frame)
    for partition in (0, 2, model.num_blocks):
        model.reset_memory("test")
        prefix, suffix = PrefixStage(model, partition), SuffixStage(model, partition)
        trajectories = [suffix.forward(state)[1] for state in prefix.run_chunks(frame, 3)]
        assert trajectories[:-1] == [None, None]
        out = trajectories[-1]
        assert np.abs(out.points - reference.points).max() <= CHUNKED_TOLERANCE_M
        assert out.extras.keys() == reference.extras.keys()
        for key, value in reference.extras.items():
            assert np.allclose(out.extras[key], value, atol=1e-5) if not isinstance(value, str) \
                else out.extras[key] == value


def test_the_route_command_chooses_the_plan(models):
    """ORION's shape: one plan per planner mode (ORION's command order); the same frame under another command gives
    another plan, the mode named by it; "arrive" and a frame without a route take lane following (ORION: VOID)."""
    model = models["tiny-orion"]
    frame = synthetic_frame(model.spec, 0)
    plans = {}
    for command in NAV_COMMANDS:
        model.reset_memory("test")
        _, trajectory = reference_forward(model, with_command(frame, command))
        chosen = command if command in ORION_MODES else "follow lane"
        assert trajectory.extras == {"mode": ORION_MODES.index(chosen), "mode_command": chosen}
        plans[command] = trajectory.points
    assert all(not np.allclose(plans["turn left"], plans[c]) for c in ORION_MODES if c != "turn left")
    assert np.array_equal(plans["arrive"], plans["follow lane"])
    model.reset_memory("test")
    _, no_route = reference_forward(model, dataclasses.replace(frame, context=None))
    assert no_route.extras["mode_command"] == "follow lane"
    # Through the split at a middle cut, the command travels in the boundary state's context to the suffix.
    prefix, suffix = PrefixStage(model, 2), SuffixStage(model, 2)
    for command in ("turn left", "change lane right"):
        model.reset_memory("test")
        out = suffix.run(decode(encode(prefix.run(with_command(frame, command)))))
        assert np.array_equal(out.points, plans[command]) and out.extras["mode_command"] == command


def test_the_decision_reads_the_named_lm_head_rows_at_the_named_position(models):
    model = models["tiny-minddrive"]
    head = model.action_head
    frame = synthetic_frame(model.spec, 1)
    model.reset_memory("test")
    hidden, trajectory = reference_forward(model, frame)                                # (P, S, H)
    with torch.no_grad():
        logits = hidden[head.decision_pass, head.position] @ head.decision_rows.t()    # computed here, not by the head
    assert np.allclose(trajectory.extras["decision_logits"], logits.tolist(), atol=1e-6)
    assert trajectory.extras["decision"] == head.labels[int(logits.argmax())]
    # Make another token's row the winner: the decision and the plan it conditions change.
    other = (int(logits.argmax()) + 3) % len(head.labels)
    saved = head.decision_rows.detach().clone()
    try:
        with torch.no_grad():
            head.decision_rows[other] = hidden[head.decision_pass, head.position] * 10
        model.reset_memory("test")
        _, flipped = reference_forward(model, frame)
    finally:
        with torch.no_grad():
            head.decision_rows.copy_(saved)
    assert flipped.extras["decision"] == head.labels[other]
    assert not np.allclose(flipped.points, trajectory.points)
    # The path beside it: 20 positions, one path per route command.
    assert np.array(trajectory.extras["path"]).shape == (20, 2)
    model.reset_memory("test")
    _, right = reference_forward(model, with_command(frame, "turn right"))
    model.reset_memory("test")
    _, left = reference_forward(model, with_command(frame, "turn left"))
    assert right.extras["path"] != left.extras["path"] and right.extras["decision"] == left.extras["decision"]


def test_ddim_noise_is_seeded_by_the_stamp_and_the_steps_follow_ddim(models, monkeypatch):
    model = models["tiny-recogdrive"]
    frame = synthetic_frame(model.spec, 1)
    first = reference_forward(model, frame)[1].points
    assert np.array_equal(first, reference_forward(model, frame)[1].points)           # same stamp, same noise
    later = dataclasses.replace(frame, stamp_ns=frame.stamp_ns + 1)
    later.context.stamp_ns = later.stamp_ns
    assert not np.allclose(first, reference_forward(model, later)[1].points)          # another frame, other noise
    # DDIM, eta 0 and no clipping, with a denoiser that always predicts the start noise z, returns
    # x0 = (1 - sqrt(1 - a_T)) z / sqrt(a_T) after any number of steps (each step re-derives the same x0): checks
    # the update step by step, and the denormalisation into steps.
    head: DdimPlannerHead = model.action_head
    calls, start = [], {}

    def constant_noise(x, t, encoded):
        calls.append(t)
        start.setdefault("z", x.clone())
        return start["z"]

    monkeypatch.setattr(head, "denoise", constant_noise)
    monkeypatch.setattr(head, "eta", 0.0)
    monkeypatch.setattr(head, "clip", False)
    points = reference_forward(model, frame)[1].points
    a_t = head.alpha_bar[head.timesteps()[0]]
    poses = (1 - math.sqrt(1 - a_t)) / math.sqrt(a_t) * start["z"][0]                  # (N, 3) normalised
    denorm = torch.tensor(head.denorm)
    poses = (poses + 1) / 2 * denorm[:, 0] + denorm[:, 1]
    assert np.allclose(points[:, :3], poses.double().numpy(), atol=1e-4)                # x, y cumulated; heading
    assert calls == [80, 60, 40, 20, 0] == head.timesteps()


def test_ddim_history_of_any_length_is_padded_as_unknown():
    from hybrid_vla_ros.model.plugins.diffusion_head import _last_rows, recogdrive_history
    history = torch.arange(6.0).view(1, 2, 3)
    padded = _last_rows(history, 4)
    assert padded.shape == (1, 4, 3) and padded[0, :2].abs().sum() == 0 and torch.equal(padded[0, 2:], history[0])
    assert torch.equal(_last_rows(torch.arange(18.0).view(1, 6, 3), 4)[0], torch.arange(6.0, 18.0).view(4, 3))
    # ReCogDrive's 4 poses are NAVSIM's t-3 ... t0: the 3 newest before the frame, then the current pose at 0
    poses = recogdrive_history(torch.arange(18.0).view(1, 6, 3), 4)[0]
    assert torch.equal(poses[:3], torch.arange(9.0, 18.0).view(3, 3)) and poses[3].abs().sum() == 0


def test_ddim_status_is_navsim_s_8_values(models):
    """command one-hot (left, straight, right, unknown) || vx, vy || ax, ay in the ego frame."""
    head: DdimPlannerHead = models["tiny-recogdrive"].action_head
    ego = torch.tensor([[10.0, 1.0, 0.1, 0.0]])                                     # speed, accel, yaw rate, steering
    expected = {"turn left": [1, 0, 0, 0], "change lane right": [0, 0, 1, 0], "follow lane": [0, 1, 0, 0],
                "arrive": [0, 1, 0, 0]}
    for command, one_hot in expected.items():
        row = torch.tensor([[float(c == command) for c in NAV_COMMANDS]])
        assert head.status(row, ego)[0].tolist() == pytest.approx(one_hot + [10.0, 0.0, 1.0, 1.0])
    assert head.status(torch.zeros(1, len(NAV_COMMANDS)), ego)[0, :4].tolist() == [0, 0, 0, 1]   # no command


@pytest.mark.parametrize("name", DRIVING)
def test_driving_heads_survive_a_checkpoint(models, name, tmp_path):
    model = models[name]
    frame = synthetic_frame(model.spec, 2)
    model.reset_memory("test")
    _, before = reference_forward(model, frame)
    save_checkpoint(model, tmp_path / name)
    loaded = load_checkpoint(tmp_path / name)
    assert type(loaded.action_head) is type(model.action_head)
    loaded.reset_memory("test")
    _, after = reference_forward(loaded, frame)
    assert np.array_equal(before.points, after.points) and before.extras == after.extras


class _Probe(WaypointHead):
    def __init__(self, config, hidden_size, side=(), output=None):
        super().__init__(config)
        self.side_inputs, self.output = side, output
        self.proj = nn.Linear(hidden_size, 4)

    @classmethod
    def from_config(cls, config, hidden_size, spec=None):
        return cls(config, hidden_size)

    def forward(self, query_hidden, **side):
        self.seen = side
        raw = self.proj(query_hidden).expand(-1, self.num_waypoints, 4)
        return self.output(raw) if self.output else raw


def test_side_inputs_are_checked_and_handed_over_with_their_shapes():
    from hybrid_vla_ros.model.plugins.head_inputs import check_side_inputs
    spec = get_preset("tiny-recogdrive")
    model = build_model(spec)
    probe = _Probe({"num_waypoints": 8, "query_tokens": 1}, spec.hidden_size,
                   side=("sequence", "sequence_mean", "command", "lidar2img", "history", "noise_seed"))
    check_side_inputs(probe)
    frame = synthetic_frame(spec, 3)
    hidden = torch.randn(1, model.sequence_length, spec.hidden_size)
    model.run_head(probe, hidden, model.sequence_length - 1, frame.context, frame.stamp_ns)
    seen = probe.seen
    assert seen["sequence"].shape == (1, 1, model.sequence_length, spec.hidden_size)
    assert torch.equal(seen["sequence_mean"], hidden.mean(dim=1).unsqueeze(0))
    assert seen["command"][0].tolist() == [float(c == NAV_COMMANDS[3 % 7]) for c in NAV_COMMANDS]
    assert seen["lidar2img"].shape == (1, spec.num_cameras, 4, 4) and seen["history"].shape == (1, 4, 3)
    assert isinstance(seen["noise_seed"], int)
    with pytest.raises(ConfigError, match="side_inputs .*'weather'.* not known"):
        check_side_inputs(_Probe({"num_waypoints": 8}, 8, side=("weather",)))


def test_a_head_returning_no_waypoints_or_a_nonfinite_extra_is_refused():
    spec = get_preset("tiny-orion")
    model = build_model(spec)
    hidden = torch.randn(1, model.sequence_length, spec.hidden_size)
    last = model.sequence_length - 1
    no_waypoints = _Probe({"num_waypoints": 8}, spec.hidden_size, output=lambda raw: {"plan": raw})
    with pytest.raises(ConfigError, match="'waypoints'"):
        model.run_head(no_waypoints, hidden, last, None, 0)
    nan_extra = _Probe({"num_waypoints": 8}, spec.hidden_size,
                       output=lambda raw: {"waypoints": raw, "score": torch.full((1,), math.nan)})
    with pytest.raises(NonFiniteError, match="head extra 'score'") as info:
        model.run_head(nan_extra, hidden, last, None, 0)
    assert info.value.reason == "nonfinite_output"


def test_orion_shaped_patches_carry_their_camera_s_3d_rays(models):
    """The scene encoder's geometry (PETR's 3D position encoding): each patch centre's ray at each depth bin, taken
    back through lidar2img into base_link, projects onto that patch centre at that depth; moving a camera changes
    the scene tokens and the plan; a camera without geometry gets no encoding."""
    from hybrid_vla_ros.context import CameraGeometry
    model = models["tiny-orion"]
    encoder = model.scene_encoder
    frame = synthetic_frame(model.spec, 1)
    cameras = frame.context.cameras
    lidar2img = frame.context.as_tensors((encoder.config["image_width"], encoder.config["image_height"]))["lidar2img"]
    points = encoder.patch_points(lidar2img)                                            # (N, P, B, 3)
    step, bins = encoder.config["patch_size"], encoder.config["depth_bins"]
    cols = encoder.config["image_width"] // step
    for cam in range(len(cameras)):
        geometry = cameras[cam]
        for patch in (0, points.shape[1] // 2, points.shape[1] - 1):
            uv, depth = geometry.project(points[cam, patch].double().numpy())
            centre = [(patch % cols) * step + step / 2, (patch // cols) * step + step / 2]
            assert np.allclose(uv, [centre] * bins, atol=1e-3)
            assert np.allclose(depth, np.linspace(1.0, encoder.config["depth_max_m"], bins), atol=1e-3)
    model.reset_memory("test")
    _, before = reference_forward(model, frame)
    moved = FrameContext.from_dict(frame.context.to_dict())
    shifted = moved.cameras[0].cam_from_base.copy()
    shifted[:3, 3] += [0.0, 0.0, 0.5]
    moved.cameras[0] = CameraGeometry(cameras[0].frame_id, cameras[0].K, shifted, cameras[0].width, cameras[0].height)
    model.reset_memory("test")
    _, after = reference_forward(model, dataclasses.replace(frame, context=moved))
    assert not np.allclose(before.points, after.points)
    unknown = encoder._geometry(lidar2img, torch.tensor([1.0, 0.0]))
    assert unknown[1].abs().sum() == 0 and unknown[0].abs().sum() > 0


def test_the_ddim_head_samples_finite_plans_in_bf16(models):
    """In bf16 the schedule's first alpha_bar (0.99937) would round to 1.0 and the last step divide 0 by 0: the
    schedule stays in float64 and the sampling in float32, so a bf16 head gives finite plans."""
    import copy
    model = models["tiny-recogdrive"]
    frame = synthetic_frame(model.spec, 1)
    hidden, reference = reference_forward(model, frame)
    head = copy.deepcopy(model.action_head).to(torch.bfloat16)
    raw, _ = model.run_head(head, hidden.to(torch.bfloat16), hidden.shape[1] - 1, frame.context, frame.stamp_ns)
    assert torch.isfinite(raw).all()
    assert model.action_head.alpha_bar[0] == pytest.approx(0.99937, abs=1e-5)


def test_verify_compares_the_heads_extras_too():
    from hybrid_vla_ros.engine.verify import extras_difference
    assert extras_difference({"decision": "stop", "logits": [1.0, 2.0]}, {"decision": "stop", "logits": [1.0, 2.5]}) == 0.5
    assert extras_difference({"decision": "stop"}, {"decision": "speed_up"}) == math.inf
    assert extras_difference({}, {"mode": 1}) == math.inf
    assert extras_difference({"route": [[0.0, 1.0]]}, {"route": [[0.0, 1.0]]}) == 0.0
