"""Pictures of a drive: predicted and ground-truth paths over the front camera image (the camera model of
road.render), and a bird's-eye view of the whole drive (the ego's path dead-reckoned from its speed and yaw
rate, each frame's paths placed at the ego's pose of that frame). ROS-free: ros/demo.py reads the bag."""

from __future__ import annotations

from dataclasses import dataclass, replace

import numpy as np

from ..report import pyplot
from ..types import Pose2D
from .road import project_to_image


@dataclass
class ViewFrame:
    stamp_ns: int
    image: np.ndarray | None          # (H, W, 3) uint8, the front camera
    speed_mps: float
    yaw_rate_rps: float
    truth_xy: np.ndarray | None       # (N, 2) ego frame at the frame's stamp
    predicted_xy: np.ndarray | None   # (N, 2) ego frame at the frame's stamp
    truth_t_s: np.ndarray | None = None  # (N,) seconds from the frame's stamp of each ground-truth point


def constant_velocity(frame: ViewFrame) -> ViewFrame:
    """The frame with the baseline as its prediction: straight ahead at its speed, at the truth's times."""
    if frame.truth_t_s is None:
        return replace(frame, predicted_xy=None)
    t = frame.truth_t_s
    return replace(frame, predicted_xy=np.column_stack([frame.speed_mps * t, np.zeros_like(t)]))


def dead_reckoning(frames: list[ViewFrame]) -> np.ndarray:
    """(n, 3) x, y, yaw of the ego at each frame, in the frame of the first (unicycle on speed and yaw rate)."""
    poses, x, y, yaw = [], 0.0, 0.0, 0.0
    for i, f in enumerate(frames):
        if i:
            dt = (f.stamp_ns - frames[i - 1].stamp_ns) * 1e-9
            prev = frames[i - 1]
            yaw += prev.yaw_rate_rps * dt
            x += prev.speed_mps * dt * np.cos(yaw)
            y += prev.speed_mps * dt * np.sin(yaw)
        poses.append((x, y, yaw))
    return np.array(poses)


def displacement_errors(frames: list[ViewFrame]) -> dict:
    """ADE / FDE (m) of the predictions against the ground truth, over frames that have both."""
    pairs = [(f.predicted_xy, f.truth_xy) for f in frames if f.predicted_xy is not None and f.truth_xy is not None
             and len(f.predicted_xy) == len(f.truth_xy)]
    if not pairs:
        return {"frames": 0, "ade_m": None, "fde_m": None}
    dist = np.array([np.linalg.norm(p - t, axis=-1) for p, t in pairs])      # (frames, N)
    return {"frames": len(pairs), "ade_m": float(dist.mean()), "fde_m": float(dist[:, -1].mean())}


def _camera_panel(ax, frame: ViewFrame) -> None:
    height, width = frame.image.shape[:2]
    ax.imshow(frame.image)
    for points, colour, label in ((frame.truth_xy, "lime", "ground truth"), (frame.predicted_xy, "magenta", "model")):
        if points is not None:
            uv = project_to_image(points, height, width)
            ax.plot(uv[:, 0], uv[:, 1], "o-", color=colour, ms=3, lw=1.5, label=label)
    ax.set_xlim(0, width)
    ax.set_ylim(height, 0)
    ax.set_axis_off()


def _birds_eye_panel(ax, frames: list[ViewFrame], poses: np.ndarray, every: int) -> None:
    ax.plot(poses[:, 1], poses[:, 0], "k--", lw=1.2, zorder=3, label="ego (dead-reckoned odometry)")
    for i in range(0, len(frames), every):
        for points, colour in ((frames[i].truth_xy, "green"), (frames[i].predicted_xy, "magenta")):
            if points is not None:
                x, y = Pose2D(*poses[i]).from_ego(points[:, 0], points[:, 1])      # the drive's frame
                ax.plot(y, x, color=colour, lw=0.9, alpha=0.8)
    ax.plot([], [], color="green", label="ground truth")
    ax.plot([], [], color="magenta", label="model")
    ax.set_aspect("equal", adjustable="datalim")
    ax.invert_xaxis()  # y (left) to the left: the view from above, driving up the page
    ax.set_xlabel("y (m, left)")
    ax.set_ylabel("x (m, forward at the start)")
    ax.legend(fontsize=7, loc="best")


def plot_drive(frames: list[ViewFrame], path, title: str, panels: int = 4) -> None:
    """A few frames' camera images with both paths drawn on them, and the bird's-eye view of the drive."""
    plt = pyplot()
    with_images = [i for i, f in enumerate(frames) if f.image is not None]
    picks = [with_images[round(k * (len(with_images) - 1) / max(1, panels - 1))] for k in range(panels)] \
        if len(with_images) >= panels else with_images
    fig = plt.figure(figsize=(3.0 * max(len(picks), 1) + 4.5, 4.2))
    grid = fig.add_gridspec(1, len(picks) + 2)
    for column, index in enumerate(picks):
        ax = fig.add_subplot(grid[0, column])
        _camera_panel(ax, frames[index])
        ax.set_title(f"frame {index}", fontsize=8)
        if column == 0:
            ax.legend(fontsize=7, loc="upper left")
    ax = fig.add_subplot(grid[0, len(picks):])
    _birds_eye_panel(ax, frames, dead_reckoning(frames), every=max(1, len(frames) // 20))
    fig.suptitle(title, fontsize=9)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
