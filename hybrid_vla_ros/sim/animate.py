"""An animation of one closed-loop drive (issue 41, item 5): per camera frame, what the front camera saw and a
bird's-eye view of the road, the car's path so far, the plan it is following and the lead vehicle; a GIF."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from .loop import Drive
from .policy import camera_frame
from .world import Road

MAX_FRAMES = 400   # a GIF of 40 s at 10 frames/s: longer drives keep every k-th frame


@dataclass
class Still:
    t: float
    car: tuple            # x, y, yaw
    plan_xy: np.ndarray   # (M, 2) world positions of the plan being followed
    lead_xy: tuple | None
    image: np.ndarray     # (H, W, 3) the front camera at the newest frame


class RecordingDrive(Drive):
    """A Drive that also keeps a Still at every camera tick (loop.py calls record() there)."""

    def __init__(self, scenario, policy, timing, camera_spec):
        super().__init__(scenario, policy, timing)
        self.camera_spec = camera_spec
        self.stills: list[Still] = []

    def record(self) -> None:
        super().record()
        newest = max(self.snapshots) if self.snapshots else None
        plan = getattr(self, "plan", None)
        if newest is None or plan is None:
            return
        image = camera_frame(self.snapshots[newest][2], self.camera_spec).images[0]
        lead = self.road.point(self.lead_s) if self.lead_s is not None else None
        self.stills.append(Still(self.t, (self.car.x, self.car.y, self.car.yaw), plan.points[:, :2].copy(),
                                 (lead.x, lead.y) if lead else None, image))


def animate(stills: list[Still], scenario, title: str, path, fps: int = 10) -> int:
    """Write the GIF -> the number of frames in it."""
    from matplotlib.animation import FuncAnimation, PillowWriter
    from ..errors import ConfigError, expect
    from ..report import pyplot
    expect(bool(stills), ConfigError, f"animation '{path}': the drive recorded no frame with a plan")
    plt = pyplot()
    step = max(1, -(-len(stills) // MAX_FRAMES))
    stills = stills[::step]
    road = Road(scenario)
    fig, (cam, bev) = plt.subplots(1, 2, figsize=(9, 4.2), gridspec_kw={"width_ratios": [1, 1.3]})
    keep = road.s <= scenario.length_m + 10
    for side in (-1, 1):
        bev.plot(road.x[keep] - side * scenario.width_m / 2 * np.sin(road.theta[keep]),
                 road.y[keep] + side * scenario.width_m / 2 * np.cos(road.theta[keep]), color="grey", lw=0.8)
    picture = cam.imshow(stills[0].image)
    cam.set_axis_off()
    trail, = bev.plot([], [], color="tab:blue", lw=1.2, label="driven")
    planned, = bev.plot([], [], color="tab:orange", lw=1.5, label="plan followed")
    car, = bev.plot([], [], "s", color="tab:blue", ms=6)
    lead, = bev.plot([], [], "s", color="tab:red", ms=6, label="lead")
    bev.set_aspect("equal", adjustable="datalim")
    bev.legend(fontsize=7, loc="upper left")
    heading = fig.suptitle("", fontsize=9)

    def draw(i: int):
        s = stills[i]
        picture.set_data(s.image)
        xs, ys = zip(*[(p.car[0], p.car[1]) for p in stills[:i + 1]])
        trail.set_data(xs, ys)
        planned.set_data(s.plan_xy[:, 0], s.plan_xy[:, 1])
        car.set_data([s.car[0]], [s.car[1]])
        lead.set_data(*(([s.lead_xy[0]], [s.lead_xy[1]]) if s.lead_xy else ([], [])))
        bev.set_xlim(s.car[0] - 30, s.car[0] + 50)
        bev.set_ylim(s.car[1] - 40, s.car[1] + 40)
        heading.set_text(f"{title}  t = {s.t:4.1f} s")
        return picture, trail, planned, car, lead, heading

    movie = FuncAnimation(fig, draw, frames=len(stills), blit=False)
    movie.save(str(path), writer=PillowWriter(fps=fps))
    plt.close(fig)
    return len(stills)
