"""The scheduler's samples are bounded and recent: finished frames heard while it is inactive are dropped
(counted), never fed to the policy all at once on activation; samples older than a few update periods
never steer the policy; the queue between two ticks holds a bounded number."""

import time

import pytest
from diagnostic_msgs.msg import DiagnosticStatus, KeyValue
from rclpy.lifecycle import TransitionCallbackReturn

from ros_harness import TINY_OVERRIDES

PERIOD_S = 0.05


def info(**values) -> DiagnosticStatus:
    return DiagnosticStatus(values=[KeyValue(key=k, value=str(v)) for k, v in values.items()])


def finish_frame(node, stamp_ns: int, partition: int = 2) -> None:
    """One finished frame as the scheduler hears it: the prefix's frame info, then the suffix's trajectory
    info (its subscription callbacks, as the executor calls them)."""
    node._on_prefix_info(info(stamp_ns=stamp_ns, partition=partition, prefix_ms=10.0))
    node._on_trajectory_info(info(stamp_ns=stamp_ns, partition=partition, suffix_ms=12.0))


@pytest.fixture
def scheduler(domain):
    import rclpy
    from rclpy.executors import SingleThreadedExecutor
    from hybrid_vla_ros.ros.launch_support.bringup import graph_params, make_node
    context = rclpy.Context()
    rclpy.init(context=context)
    params = graph_params(overrides=TINY_OVERRIDES)["hybrid_vla_scheduler"]
    params.update(autostart=False, update_period_s=PERIOD_S)
    node = make_node("hybrid_vla_scheduler", params, context)
    executor = SingleThreadedExecutor(context=context)
    executor.add_node(node)
    assert node.trigger_configure() == TransitionCallbackReturn.SUCCESS
    fed = []
    update = node.policy.update
    node.policy.update = lambda sample: (fed.append(sample), update(sample))[1]   # what steers the policy
    node.fed_to_policy = fed

    def spin(seconds: float) -> None:
        end = time.monotonic() + seconds
        while time.monotonic() < end:
            executor.spin_once(timeout_sec=0.01)
    node.spin = spin
    yield node
    executor.remove_node(node)
    executor.shutdown()
    node.destroy_node()
    rclpy.shutdown(context=context)


def activate(node) -> None:
    assert node.trigger_activate() == TransitionCallbackReturn.SUCCESS
    node._on_prefix_info(info(stamp_ns=1, partition=2, prefix_ms=10.0))  # a running graph: resume ends now
    assert node.resume_until is None


def test_frames_heard_while_inactive_are_dropped_and_never_reach_the_policy(scheduler):
    for i in range(1000):   # ~33 s of a 30 Hz graph while the scheduler is configured but not active
        finish_frame(scheduler, 1_000 + i)
    assert len(scheduler.samples) == 0 and scheduler.dropped["inactive"] == 1000
    activate(scheduler)
    scheduler.spin(4 * PERIOD_S)
    assert scheduler.fed_to_policy == []
    finish_frame(scheduler, 5_000)    # one finished while active: that one is used
    scheduler.spin(4 * PERIOD_S)
    assert [s.prefix_ms for s in scheduler.fed_to_policy] == [10.0]


def test_samples_older_than_the_stale_bound_never_steer_the_policy(scheduler):
    from hybrid_vla_ros.ros.nodes.scheduler_node import stale_after_s
    activate(scheduler)
    for i in range(5):
        finish_frame(scheduler, 1_000 + i)
    time.sleep(stale_after_s(PERIOD_S) + 0.1)   # no tick meanwhile (an executor held up): they are old now
    finish_frame(scheduler, 2_000)
    scheduler.spin(4 * PERIOD_S)
    assert len(scheduler.fed_to_policy) == 1 and scheduler.dropped["stale"] == 5


def test_the_queue_between_two_ticks_is_bounded(scheduler):
    from hybrid_vla_ros.ros.nodes.scheduler_node import MAX_SAMPLES
    activate(scheduler)
    for i in range(MAX_SAMPLES + 100):   # no tick meanwhile: the oldest go
        finish_frame(scheduler, 1_000 + i)
    assert len(scheduler.samples) == MAX_SAMPLES and scheduler.dropped["overflow"] == 100
    scheduler.spin(4 * PERIOD_S)
    assert len(scheduler.fed_to_policy) == MAX_SAMPLES
