"""Closed-loop driving (issue 41): the car and its controller, the infractions, the metrics' definitions,
latency never helping a deterministic oracle, re-timing recovering it, and the shipped model driving a few
steps. ROS-free."""

import math

import numpy as np
import pytest

from hybrid_vla_ros.sim.car import CarState, Plan, control, step
from hybrid_vla_ros.sim.loop import DT_S, Drive, Record, drive_scenario
from hybrid_vla_ros.sim.metrics import aggregate, route_metrics
from hybrid_vla_ros.sim.policy import OraclePolicy
from hybrid_vla_ros.sim.timing import ModeTiming, instant, mode_timings, orion_paper
from hybrid_vla_ros.sim.world import Lead, Light, Scenario


def straight(lead=None, light=None, length=100.0, speed=10.0) -> Scenario:
    return Scenario(seed=0, length_m=length, width_m=3.5, amps=(0.0, 0.0, 0.0), periods_m=(100.0,) * 3,
                    phases=(0.0,) * 3, start_speed_mps=speed, start_offset_m=0.0, lead=lead, light=light,
                    look=(1.0, 1e4, 0.0))


class Straight:
    """Straight on at 10 m/s whatever it sees (blind to the lead and the light)."""
    name = "straight"

    def __call__(self, view):
        t = 0.5 * np.arange(1, 9)
        return np.column_stack([10.0 * t, 0 * t, 0 * t, 10.0 + 0 * t, t])


def track(car: CarState, plan: Plan, seconds: float) -> list[CarState]:
    states = [car]
    for k in range(int(seconds / DT_S)):
        steer, accel = control(states[-1], plan, k * DT_S)
        states.append(step(states[-1], steer, accel, DT_S))
    return states


def test_the_car_tracks_a_straight_plan_from_half_a_metre_off():
    t = np.arange(0, 10.01, 0.1)
    plan = Plan(np.column_stack([10 * t, 0 * t, 0 * t, 10 + 0 * t, t]), 0.0, 0.0)
    states = track(CarState(0.0, 0.5, 0.0, 8.0), plan, 8.0)
    settled = states[int(3.0 / DT_S):]
    assert max(abs(s.y) for s in settled) < 0.1                    # lateral error below 0.1 m after 3 s
    assert max(abs(s.v - 10.0) for s in settled) < 0.2             # speed within 0.2 m/s


def test_the_car_tracks_a_curved_plan():
    radius, speed = 50.0, 8.0                                       # curvature 0.02 1/m, lateral accel 1.3 m/s^2
    t = np.arange(0, 10.01, 0.1)
    angle = speed * t / radius
    pts = np.column_stack([radius * np.sin(angle), radius * (1 - np.cos(angle)), angle, speed + 0 * t, t])
    states = track(CarState(0.0, 0.0, 0.0, speed), Plan(pts, 0.0, 0.0), 6.0)
    errors = [abs(math.hypot(s.x, s.y - radius) - radius) for s in states[int(1.0 / DT_S):]]
    assert max(errors) < 0.3                                        # cross-track error below 0.3 m after 1 s
    assert max(abs(s.v - speed) for s in states) < 0.2


def test_a_plan_into_the_lead_vehicle_is_a_collision_and_costs_the_vehicle_factor():
    stopped = Lead(start_s=40.0, cruise_mps=0.0, brake_at_s=100.0, brake_mps2=1.0, slow_mps=0.0, hold_s=1.0)
    rec = Drive(straight(lead=stopped), Straight(), instant(0.1)).run()
    m = route_metrics(rec)
    assert rec.end == "collision" and m["infractions"]["collision"] == 1
    assert m["penalty"] == pytest.approx(0.60)
    assert m["driving_score"] == pytest.approx(100 * m["completion"] * 0.60)
    assert 0.3 < m["completion"] < 0.45 and m["min_ttc_s"] < 0.5


def test_running_a_red_light_is_counted():
    red = Light(stop_s=50.0, red_from_s=0.0, red_to_s=1e3)
    m = route_metrics(Drive(straight(light=red), Straight(), instant(0.1)).run())
    assert m["end"] == "completed" and m["infractions"]["red_light"] == 1
    assert m["driving_score"] == pytest.approx(70.0)                # full route x 0.70
    green = Light(stop_s=50.0, red_from_s=100.0, red_to_s=200.0)
    assert route_metrics(Drive(straight(light=green), Straight(), instant(0.1)).run())["infractions"]["red_light"] == 0


def test_completion_and_score_as_defined():
    rec = Record(straight(), "x", rows=[(0.1 * k, k, 0, 0, 10, k, math.nan) for k in range(30)],
                 off_lane_m=5.0, progress_m=75.0, end="collision")
    rec.events.update(collision=1, red_light=2, lane_departure=1)
    m = route_metrics(rec)
    assert m["completion"] == pytest.approx(0.70)                   # (75 - 5) / 100
    assert m["penalty"] == pytest.approx(0.60 * 0.70 ** 2)
    assert m["driving_score"] == pytest.approx(100 * 0.70 * 0.60 * 0.49)
    assert not m["success"]
    row = aggregate([m, {**m, "driving_score": 0.0}])
    assert row["driving_score"] == pytest.approx(m["driving_score"] / 2) and row["collisions"] == 2


def test_the_timing_formulas_at_the_papers_orion_figures():
    modes = mode_timings(orion_paper())
    assert modes["native"].latency_s == pytest.approx(0.521) and modes["native"].period_s == pytest.approx(0.521)
    assert modes["serial"].latency_s == pytest.approx(0.783) and modes["pipelined"].period_s == pytest.approx(0.408)
    assert modes["pipelined"].latency_s == pytest.approx(0.783) and modes["pipelined_retimed"].retimed
    assert modes["chunked"].latency_s == pytest.approx(0.408 + 0.37500 / 4 * 1, abs=1e-3)  # k max(a,s) + min(a,s)
    retimed = modes["native_retimed"]
    assert retimed.retimed and (retimed.latency_s, retimed.period_s) == (modes["native"].latency_s, modes["native"].period_s)
    assert not modes["native"].retimed


def test_later_plans_never_help_the_oracle_and_retiming_recovers():
    seeds, oracle = range(6), OraclePolicy()

    def row(latency, retimed=False):
        timing = ModeTiming("x", latency, max(latency, 0.1), retimed)
        return aggregate([route_metrics(drive_scenario(s, oracle, timing)) for s in seeds])
    rows = [row(lat) for lat in (0.0, 0.4, 0.8)]
    for early, late in zip(rows, rows[1:]):
        assert late["driving_score"] <= early["driving_score"] and late["smoothness"] <= early["smoothness"]
        assert late["mean_abs_jerk"] >= early["mean_abs_jerk"]
        assert late["collisions"] + late["lane_departures"] >= early["collisions"] + early["lane_departures"]
    assert rows[0]["driving_score"] == 100.0 and rows[-1]["driving_score"] < 80.0
    retimed = row(0.8, retimed=True)
    assert rows[-1]["driving_score"] < retimed["driving_score"] <= rows[0]["driving_score"]


def test_the_shipped_model_drives_a_few_steps():
    from hybrid_vla_ros.model.load import load_vla
    from hybrid_vla_ros.learn.closed_loop.model_policy import ModelPolicy
    from hybrid_vla_ros.sim.world import random_scenario
    policy = ModelPolicy(load_vla(checkpoint="builtin:drive"))
    drive = Drive(random_scenario(0), policy, mode_timings(orion_paper())["pipelined_retimed"])
    rec = drive.run(max_time_s=1.5)
    assert rec.frames >= 3 and rec.plan_ages_s and min(rec.plan_ages_s) >= 0.783 - 1e-6
    assert rec.progress_m > 10.0 and np.isfinite(np.array(rec.rows)[:, :6]).all()


def test_the_shipped_model_completes_held_out_routes_at_its_own_latency():
    """The shipped model drives (docs/DRIVING.md: 16 of 20 held-out routes with no infraction at this machine's
    latency): two of them, end to end, with the plan of every frame taking effect at once (instant timing)."""
    from hybrid_vla_ros.model.load import load_vla
    from hybrid_vla_ros.sim.loop import CAMERA_PERIOD_S
    from hybrid_vla_ros.learn.closed_loop.model_policy import ModelPolicy
    from hybrid_vla_ros.sim.world import random_scenario
    policy = ModelPolicy(load_vla(checkpoint="builtin:drive"))
    for seed in (0, 1):
        metrics = route_metrics(Drive(random_scenario(seed), policy, instant(CAMERA_PERIOD_S)).run())
        assert metrics["end"] == "completed" and metrics["success"], (seed, metrics)


def test_animate_writes_a_gif_of_one_drive_with_the_camera_and_the_plan(tmp_path, capsys):
    """--animate: the oracle drives scenario 2 under the paper's ORION timing, pipelined and re-timed; the GIF has a
    frame per camera tick (10 per second of the drive) showing the front camera beside the bird's-eye view."""
    from PIL import Image
    from hybrid_vla_ros.cli import main
    gif = tmp_path / "drive.gif"
    code = main(["eval", "--closed-loop", "--oracle", "--timing", "orion-paper", "--seed", "2", "--animate", str(gif),
                 "--drive-seconds", "4"])
    out = capsys.readouterr().out
    assert code == 0 and "orion-paper / pipelined_retimed" in out
    seconds, frames = float(out.split(" after ")[1].split(" s;")[0]), int(out.split("; ")[1].split(" frames")[0])
    with Image.open(gif) as image:
        assert image.n_frames == frames and image.size[0] > image.size[1]
    assert abs(frames - 10 * seconds) <= 2 and seconds <= 4.0 + 1e-6
