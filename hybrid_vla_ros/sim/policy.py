"""Policies of the simulator: a camera frame's view of the world -> a plan (N, 5) in the ego frame of that frame:
x, y, heading, speed, time from the frame (s).

- OraclePolicy: the drives' own ground-truth driver (road.ground_truth) on the same scene: what the model
  was trained to imitate, exact, no camera (deterministic and fast: the tests' policy).
- render_frame: the camera frame a model sees of a view (road.render of the scene from the car's pose, the
  sensor noise drawn from (scenario seed, frame index)); the model as a policy is learn/closed_loop/model_policy.py.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from .road import CAMERA_YAWS_RAD, RoadScene, ground_truth, render


@dataclass(frozen=True)
class View:
    scene: RoadScene      # the world seen from the car's pose at the frame's time
    yaw_rate_rps: float
    seed: int             # the scenario's
    index: int            # the frame's (camera ticks since the start)
    # the views of the camera ticks before it, oldest first, as far back as the policy's history_ticks reach
    # (fewer at the start of a drive): what a model reading its history sees of the past
    past: tuple = ()
    # the picture the camera delivers, when not this tick's: (scene, index) of an earlier tick (a cached burst frame
    # drop, sim/perturb.py); the stamp, speed and yaw rate stay this tick's
    shown: tuple | None = None

    @property
    def picture(self) -> tuple:
        """(scene, tick) whose picture the camera delivers."""
        return self.shown or (self.scene, self.index)


class OraclePolicy:
    name = "oracle"

    def __init__(self, waypoints: int = 8, dt_s: float = 0.5):
        self.waypoints, self.dt_s = waypoints, dt_s

    def __call__(self, view: View) -> np.ndarray:
        truth = ground_truth(view.scene, self.waypoints, self.dt_s)                    # (N, 4)
        t = self.dt_s * np.arange(1, self.waypoints + 1)
        return np.column_stack([truth, t])                                             # (N, 5)


def render_frame(view: View, spec):
    """The frame a model with `spec`'s cameras sees of `view`: road.render per camera (the sensor noise drawn from
    the scenario seed and the frame index), stamped at the frame's time (index x 100 ms). A model reading its
    history (spec.frames_per_camera > 1) gets the window of view.past and view (engine/pipeline/frame_window.py)."""
    if spec.frames_per_camera == 1:
        return camera_frame(view, spec)
    from ..engine.pipeline.frame_window import window_depth, window_of
    views = (*view.past, view)[-window_depth(spec):]
    frame = window_of([camera_frame(v, spec) for v in views], spec)
    # a view's picture is its scenario and tick's: keys by them, so a later window meets it again when re-rendered
    picks = [views[step] for step in spec.window_steps(len(views) - 1)]
    frame.image_keys = tuple(("view", v.seed, v.picture[1], camera) for camera in range(spec.num_cameras)
                             for v in picks)
    return frame


def camera_frame(view: View, spec):
    """`view` through each of spec's cameras: one image a camera (its picture's: view.picture), stamped at its tick."""
    from ..types import EgoState, Frame
    scene, tick = view.picture
    rng = np.random.default_rng([view.seed, tick])
    images = [render(scene, spec.image_height, spec.image_width, CAMERA_YAWS_RAD[c % len(CAMERA_YAWS_RAD)],
                     rng=rng) for c in range(spec.num_cameras)]
    return Frame(images=images, seq=view.index, stamp_ns=int(view.index * 1e8),
                 ego=EgoState(view.scene.speed_mps, view.yaw_rate_rps))


def history_ticks(policy) -> int:
    """Camera ticks before a frame that `policy` reads (0: the frame alone)."""
    spec = getattr(policy, "spec", None)
    return 0 if spec is None else (spec.frames_per_camera - 1) * spec.frame_stride
