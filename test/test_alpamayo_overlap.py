"""An Alpamayo release served with frames overlapping (issue 51, step 8): with max_in_flight 2 the prefix starts
frame t+1 (its prefill) while frame t is still in its exchange with the suffix, each answer going to its own
frame; every trajectory published still equals run_reference exactly, and a frame that finishes after a newer
one went to the output is dropped as superseded, never published (whether a frame of this drive is superseded is
chance: its reasoning's length; the drop itself is checked by handing the suffix a finished older frame). The
graph in one process over real DDS on loopback; the releases, drive and reference of test_alpamayo_graph.py."""

import pytest

from test_alpamayo_graph import BASE_NS, camera_sets, expected, graph_params, one_process, releases  # noqa: F401
from ros_harness import wait_until


def drive_at_once(driver, sets, suffix, timeout_s):
    """Odometry, then every frame's cameras at once (lossless: all queued at the prefix); -> the paths and infos
    published once each frame is published or dropped as superseded."""
    driver.ready(timeout_s)
    for stamp in range(0, BASE_NS + len(sets) * 100_000_000, 100_000_000):
        driver.odom.publish(driver.odometry(stamp))
    driver.spin(0.2)
    for k, cameras in enumerate(sets):
        driver.send(cameras, BASE_NS + k * 100_000_000)
    over = lambda: min(len(driver.paths), len(driver.infos)) + suffix.health.drop_reasons["superseded"] >= len(sets)
    assert wait_until(over, driver.spin, timeout_s), f"{len(driver.infos)} of {len(sets)} frames out"
    return driver.paths, driver.infos


@pytest.mark.slow
@pytest.mark.parametrize("in_flight", [1, 2])
def test_frames_in_flight_at_once_each_equal_the_reference(in_flight, releases, domain):
    import numpy as np
    from hybrid_vla_ros.engine.expert_serve.envelope import Tag
    params = graph_params(releases["r1"], False)
    params["hybrid_vla_prefix"]["max_in_flight"] = params["hybrid_vla_suffix"]["max_in_flight"] = in_flight
    with one_process(params) as (graph, driver):
        prefix, suffix = graph.nodes["hybrid_vla_prefix"], graph.nodes["hybrid_vla_suffix"]
        sets = camera_sets(4)
        refs = expected(suffix.serving.model, sets, False)
        paths, infos = drive_at_once(driver, sets, suffix, timeout_s=60)
        stamps = [p.header.stamp.sec * 10**9 + p.header.stamp.nanosec for p in paths]
        assert stamps == sorted(stamps) and len(set(stamps)) == len(stamps)   # never an older plan after a newer
        for path, info, stamp in zip(paths, infos, stamps):
            ref = refs[(stamp - BASE_NS) // 100_000_000]
            xy = np.array([[p.pose.position.x, p.pose.position.y] for p in path.poses])
            assert np.array_equal(xy, ref.xyz[:, :2].double().numpy()), stamp    # exact, fp32 -> float64
            assert info["tokens"] == ",".join(map(str, ref.tokens))
        assert prefix.serving.most_open == in_flight   # the overlap happened (2: frame t+1 began before t ended)
        assert suffix.serving.server.replaced == 0 and not prefix.health.rejected and not suffix.health.rejected
        superseded = suffix.health.drop_reasons["superseded"]
        assert len(paths) + superseded == len(sets) and (in_flight == 2 or superseded == 0)
        run, newest = suffix.serving.newest   # an older frame of the run finishing now: counted, not published
        assert newest == len(sets) - 1 and suffix.serving._superseded(Tag(run, 0, BASE_NS))
        assert suffix.health.drop_reasons["superseded"] == superseded + 1
