"""The closed loop's compensation and its world (issue 54): chunked + re-timed, the driving-score difference to
native with its bootstrap interval, and Bench2Drive-Robust's perturbations as options of the world (sim/perturb.py):
burst frame drops, localisation noise, a FIFO between the controller and the car."""

import numpy as np
import pytest

from hybrid_vla_ros.errors import ConfigError
from hybrid_vla_ros.sim.loop import DT_S, Drive
from hybrid_vla_ros.sim.metrics import paired_difference
from hybrid_vla_ros.sim.perturb import ActionBuffer, CameraStream, Perturbations, believed_pose
from hybrid_vla_ros.sim.policy import OraclePolicy
from hybrid_vla_ros.sim.timing import ModeTiming, mode_timings, orion_paper
from hybrid_vla_ros.sim.world import random_scenario


def test_chunked_retimed_has_chunkeds_timing_and_is_retimed():
    modes = mode_timings(orion_paper())
    chunked, retimed = modes["chunked"], modes["chunked_retimed"]
    assert (retimed.latency_s, retimed.period_s) == (chunked.latency_s, chunked.period_s)
    assert retimed.retimed and not chunked.retimed


def test_the_paired_bootstrap_decides_only_what_the_scenarios_allow():
    base = [50.0, 80.0, 20.0, 100.0, 60.0]
    same = paired_difference(base, base)
    assert same["mean"] == same["low"] == same["high"] == 0.0 and same["verdict"] == "as well"
    better = paired_difference([b + 10 for b in base], base)
    assert better["verdict"] == "better" and better["low"] == better["high"] == 10.0
    mixed = paired_difference([60.0, 70.0, 30.0, 90.0, 60.0], base)    # +10, -10, +10, -10, 0
    assert mixed["verdict"] == "as well" and mixed["low"] < 0 < mixed["high"]
    assert paired_difference([b - 30 for b in base], base)["verdict"] == "worse"
    assert paired_difference(base, [b - 1 for b in base], seed=3) == paired_difference(base, [b - 1 for b in base], seed=3)


def test_each_row_is_compared_with_native_under_the_same_compensation():
    from hybrid_vla_ros.learn.closed_loop.evaluate import evaluate, table_lines
    report = evaluate(OraclePolicy(), scenarios=3, profiles=("orion-paper",), progress=lambda *_: None,
                      modes=("pipelined", "chunked_retimed"))
    rows = {r["mode"]: r for r in report["rows"]}
    assert set(rows) == {"instant", "native", "pipelined", "native_retimed", "chunked_retimed"}
    assert rows["pipelined"]["vs_native"]["baseline"] == "native"
    assert rows["chunked_retimed"]["vs_native"]["baseline"] == "native_retimed"
    routes = report["routes"]
    diff = np.mean([a["driving_score"] - b["driving_score"] for a, b in
                    zip(routes["orion-paper/pipelined"], routes["orion-paper/native"])])
    assert rows["pipelined"]["vs_native"]["mean"] == pytest.approx(diff)
    assert "vs native" in "\n".join(table_lines(report))
    with pytest.raises(ConfigError, match="modes"):
        evaluate(OraclePolicy(), scenarios=1, profiles=("orion-paper",), modes=("warp",))


def view_at(t: int):
    from hybrid_vla_ros.sim.policy import View
    return View(scene=f"scene{t}", yaw_rate_rps=0.01 * t, seed=0, index=t)


def test_a_burst_shows_the_last_delivered_picture_with_the_ticks_own_stamp_and_ego():
    always = CameraStream(Perturbations(burst_probability=1.0, burst_frames=3), seed=0)
    got = [always.deliver(t, view_at(t)) for t in range(6)]   # a burst at every chance
    assert [v.picture for v in got] == [("scene0", 0)] * 6
    assert [v.index for v in got] == list(range(6)) and got[5].yaw_rate_rps == 0.05 and got[5].scene == "scene5"
    stream = CameraStream(Perturbations(burst_probability=0.2, burst_frames=4), seed=5)
    got = [stream.deliver(t, view_at(t)).picture[1] for t in range(400)]
    cached = [t for t in range(400) if got[t] != t]
    assert 0 < stream.dropped == len(cached)
    runs, start = [], None                                # each run of cached frames: whole bursts of 4
    for t in range(1, 401):
        if t < 400 and got[t] != t:
            start = t if start is None else start
            assert got[t] == start - 1                    # the last frame delivered before the run
        elif start is not None:
            runs.append(t - start)
            start = None
    assert len(runs) > 3 and all(r % 4 == 0 for r in runs[:-1])
    quiet = CameraStream(Perturbations(), seed=0)
    assert [quiet.deliver(t, view_at(t)).picture[1] for t in range(5)] == list(range(5))


def test_the_action_buffer_delays_commands_by_its_steps():
    buffer = ActionBuffer(3)
    out = [buffer.through((k, -k)) for k in range(6)]
    assert out == [(0, 0), (0, 0), (0, 0), (0, 0), (1, -1), (2, -2)]
    assert ActionBuffer(0).through((5, 5)) == (5, 5)


def test_localisation_noise_is_seeded_by_scenario_and_tick():
    p = Perturbations(localisation_noise_m=0.5, localisation_noise_rad=0.02)
    a, b = believed_pose(p, 3, 7, 1.0, 2.0, 0.1), believed_pose(p, 3, 7, 1.0, 2.0, 0.1)
    assert a == b and a != (1.0, 2.0, 0.1) and believed_pose(p, 3, 8, 1.0, 2.0, 0.1) != a
    assert believed_pose(Perturbations(), 3, 7, 1.0, 2.0, 0.1) == (1.0, 2.0, 0.1)


@pytest.mark.parametrize("field, value", [("burst_probability", 1.5), ("burst_frames", 0),
                                          ("localisation_noise_m", -1.0), ("control_delay_s", float("nan"))])
def test_out_of_range_perturbations_are_refused(field, value):
    with pytest.raises(ConfigError, match=field):
        Perturbations(**{field: value})


def test_no_perturbation_drives_as_before_and_each_one_changes_the_drive():
    oracle, timing = OraclePolicy(), ModeTiming("native", 0.5, 0.5)
    scenario = random_scenario(2)
    plain = Drive(scenario, oracle, timing).run()
    again = Drive(scenario, oracle, timing, Perturbations()).run()
    assert plain.rows == again.rows and plain.end == again.end
    for p in (Perturbations(localisation_noise_m=0.3), Perturbations(control_delay_s=10 * DT_S)):
        perturbed = Drive(scenario, oracle, timing, p).run()
        assert perturbed.rows != plain.rows, p
    # bursts hide pictures: the oracle reads the scene itself (no camera), the model sees them
    assert Drive(scenario, oracle, timing, Perturbations(burst_probability=0.3)).run().rows == plain.rows
    from hybrid_vla_ros.learn.closed_loop.model_policy import ModelPolicy
    from hybrid_vla_ros.model.load import load_vla
    model = ModelPolicy(load_vla(checkpoint="builtin:drive"))
    seen = Drive(scenario, model, timing).run(max_time_s=3.0)
    assert Drive(scenario, model, timing, Perturbations(burst_probability=0.3)).run(max_time_s=3.0).rows != seen.rows


def test_a_plan_applied_as_it_arrives_starts_from_the_cars_pose_at_that_world_step():
    """Latencies off the camera's 100 ms grid (ORION's 521 ms): an as-is plan is placed at the car's pose of the
    world step it takes effect at, not at the last camera tick's (0.8 m behind at 10 m/s)."""
    starts = []

    class Watching(Drive):
        def deliver(self):
            before = self.plan
            super().deliver()
            if self.plan is not before:
                starts.append((self.plan.points[0, :2].copy(), np.array([self.car.x, self.car.y])))
    Watching(random_scenario(4), OraclePolicy(), ModeTiming("native", 0.521, 0.521)).run(max_time_s=4.0)
    assert len(starts) >= 5
    for plan_start, car in starts:
        np.testing.assert_allclose(plan_start, car, atol=1e-9)
