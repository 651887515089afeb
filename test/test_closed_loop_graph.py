"""The real graph in the closed loop (issue 41, item 4): the simulator's world (sim/) as a node (/clock, camera,
odometry), the three nodes with use_sim_time, the shipped drive model's plans applied as they arrive over DDS; the
drive's metrics come out as the engine-side closed loop computes them."""

import math

import numpy as np
import pytest

from ros_harness import TINY_OVERRIDES

pytestmark = pytest.mark.slow

CAMERA = "/test/cam0/image"


def drive_params():
    from hybrid_vla_ros.ros.launch_support.bringup import graph_params
    model = {"model.checkpoint": "builtin:drive", "model.preset": ""}
    overrides = {node: {**values, **model} for node, values in TINY_OVERRIDES.items()}
    overrides["hybrid_vla_prefix"].update(camera_topics=[CAMERA], use_kinematic_state=True)
    return graph_params(overrides=overrides)


def test_the_graph_drives_the_world_with_its_plans_as_they_arrive(domain):
    from hybrid_vla_ros.sim.loop import CAMERA_PERIOD_S
    from hybrid_vla_ros.model.load import load_vla
    from hybrid_vla_ros.ros.closed_loop.run import drive_in_loop
    spec = load_vla(checkpoint="builtin:drive").spec
    out = drive_in_loop(drive_params(), spec, seed=3, time_scale=1.0, max_time_s=4.0, timeout_s=180.0)
    frames = 4.0 / CAMERA_PERIOD_S
    # The drive ran its 4 world seconds on the graph's plans: most frames answered, none before its capture. The
    # world's time moves in steps of DT_S (20 ms): a plan answered within one step is applied at its capture's
    # world time, age 0 (a quiet fresh-clone run got 0.0 for every plan), so the age is >= 0, not > 0.
    assert out["end"] in ("timeout", "completed", "collision", "route_deviation"), out
    assert out["seconds"] == pytest.approx(4.0, abs=0.05) or out["end"] != "timeout", out
    assert out["plans_received"] >= frames / 4, out
    assert out["mean_plan_age_s"] is not None and 0.0 <= out["mean_plan_age_s"] < 2.0, out
    assert math.isfinite(out["driving_score"]), out
    assert out["completion"] > 0.0 and np.isfinite(out["mean_abs_jerk"]), out


def test_eval_closed_loop_graph_prints_and_writes_the_drives(domain, tmp_path, capsys):
    import json
    from hybrid_vla_ros.cli import main
    code = main(["eval", "--closed-loop", "--graph", "--scenarios", "1", "--seed", "5", "--drive-seconds", "2",
                 "--json", str(tmp_path / "g.json")])
    out = capsys.readouterr()
    assert code == 0, out.err
    assert "graph in the loop (drive, output base_link, timing its own, time scale 1.0): 1 scenarios, driving " \
           "score" in out.out
    report = json.loads((tmp_path / "g.json").read_text())
    assert report["seeds"] == [5] and report["routes"][0]["plans_received"] >= 5 and report["mean"]["routes"] == 1


def test_the_graph_re_timed_in_the_map_frame_drives_at_a_profiles_latency(domain):
    """The suffix re-times each plan to its present in the map frame; the world follows it as placed (its frame
    matched through trajectory_info), held to 0.4 s after its capture: the compute this CPU does not take."""
    from hybrid_vla_ros.model.load import load_vla
    from hybrid_vla_ros.ros.closed_loop.run import drive_in_loop
    params = drive_params()
    params["hybrid_vla_suffix"].update(frame_id="map", output_retime=True)
    out = drive_in_loop(params, load_vla(checkpoint="builtin:drive").spec, seed=3, max_time_s=4.0, timeout_s=180.0,
                        latency_s=0.4)
    assert out["plans_received"] >= 10, out
    # every plan but frame 0's (the warm start, at once) took effect 0.4 s after its frame at the earliest
    assert 0.4 * (out["plans_received"] - 1) / out["plans_received"] <= out["mean_plan_age_s"] < 1.0, out
    assert out["completion"] > 0.0 and math.isfinite(out["driving_score"]), out


def test_a_graph_that_never_answers_ends_the_warm_start_with_the_reason(domain):
    """A graph whose nodes cannot configure (the cut beyond the model's 4 blocks) never answers frame 0: the
    world says so after first_plan_s instead of waiting for ever."""
    from hybrid_vla_ros.errors import ConfigError
    from hybrid_vla_ros.model.load import load_vla
    from hybrid_vla_ros.ros.closed_loop.run import drive_in_loop
    params = drive_params()
    for node in ("hybrid_vla_prefix", "hybrid_vla_suffix"):
        params[node].update(partition_point=7, dynamic_zone_min=5, dynamic_zone_max=9)
    with pytest.raises(ConfigError, match="no plan for frame 0 within 5 s"):
        drive_in_loop(params, load_vla(checkpoint="builtin:drive").spec, seed=3, max_time_s=2.0, first_plan_s=5.0)
