"""The scheduling policy: balanced p from costs, memory budget, zone, no flapping, backlog, bad settings."""

import random

import pytest

from hybrid_vla_ros.engine.scheduling.costs import CostModel, CostPolicy
from hybrid_vla_ros.engine.scheduling.policies import SimplePolicy, StageSample
from hybrid_vla_ros.errors import ConfigError


def model(prefix_block=10.0, suffix_block=10.0, blocks=8, embed=10.0, head=0.0, handover=0.0):
    return CostModel(embed, [prefix_block] * blocks, [suffix_block] * blocks, head, handover)


def test_picks_the_partition_that_minimises_the_pipelined_period():
    costs = model(prefix_block=5.0, suffix_block=20.0, blocks=10, embed=25.0)
    policy = CostPolicy(costs, 0, 10, partition=0)
    best = policy.best()
    periods = {p: costs.period_ms(p) for p in range(11)}
    assert periods[best] == min(periods.values())
    assert best == 7  # prefix 25 + 7*5 = 60, suffix 3*20 = 60; p=8: 65 vs 40, p=6: 55 vs 80


def test_handover_cost_counts_on_the_suffix_side():
    assert CostPolicy(model(handover=25.0), 0, 8, partition=0).best() > CostPolicy(model(), 0, 8, partition=0).best()


def test_memory_budget_caps_the_partition_and_a_zone_over_budget_is_refused():
    costs = model(prefix_block=1.0, suffix_block=50.0, blocks=8)  # the GPU is fast: it would take every block
    prefix_bytes = [100 + 10 * p for p in range(9)]
    policy = CostPolicy(costs, 0, 5, partition=2, prefix_bytes=prefix_bytes, budget_bytes=150)
    assert policy.best() == 5 and max(policy.candidates()) == 5
    with pytest.raises(ConfigError, match=r"dynamic zone \[0, 8\] keeps .* over the budget .* lower dynamic_zone_max"):
        CostPolicy(costs, 0, 8, partition=2, prefix_bytes=prefix_bytes, budget_bytes=150)


def test_the_zone_bounds_the_choice():
    costs = model(prefix_block=1.0, suffix_block=50.0)
    assert CostPolicy(costs, 2, 4, partition=3).best() == 4


def test_no_flapping_under_noisy_observations():
    rng = random.Random(0)
    costs = model()
    policy = CostPolicy(costs, 0, 8, partition=4, hysteresis=0.05, cooldown_frames=3)
    for frame in range(300):
        p = policy.partition
        policy.update(StageSample(p, costs.prefix_ms(p) / costs.prefix_scale * rng.uniform(0.93, 1.07),
                                  costs.suffix_ms(p) / costs.suffix_scale * rng.uniform(0.93, 1.07)))
    assert len(policy.moves) <= 2, policy.moves


def test_a_slower_suffix_moves_the_partition_up_within_a_few_frames():
    policy = CostPolicy(model(), 0, 8, partition=4, cooldown_frames=3)
    for frame in range(10):  # the suffix's cores now run at half speed (a competing load)
        p = policy.partition
        policy.update(StageSample(p, 10 + 10 * p, 2 * 10 * (8 - p)))
    assert policy.partition == 5 and policy.moves[0][0] <= 4  # max(10 + 10p, 20 (8 - p)) is least at p = 5


def test_backlog_moves_at_once_even_during_cool_down():
    policy = CostPolicy(model(), 0, 8, partition=4, cooldown_frames=100)
    policy.frames_since_move = 0
    assert policy.update(StageSample(4, 50.0, 40.0, backlog=1)) == 4
    assert policy.update(StageSample(4, 50.0, 40.0, backlog=3)) == 5


def test_stage_times_are_attributed_to_the_partition_the_frame_ran_at():
    """A frame still in flight across a move ran at the old partition: its times must calibrate that one."""
    costs = model()
    policy = CostPolicy(costs, 0, 8, partition=7, cooldown_frames=100)
    policy.frames_since_move = 0
    exact_at_4 = (costs.prefix_ms(4), costs.suffix_ms(4))
    policy.update(StageSample(4, *exact_at_4))   # measured at p=4 while the policy holds p=7
    assert costs.prefix_scale == pytest.approx(1.0) and costs.suffix_scale == pytest.approx(1.0)


def test_cost_policy_honours_cooldown_seconds():
    costs = model()
    policy = CostPolicy(costs, 0, 8, partition=0, cooldown_frames=0, confirm_frames=1, cooldown_s=10.0)
    policy.last_move_s = 100.0
    assert policy.update(StageSample(0, costs.prefix_ms(0), costs.suffix_ms(0), at_s=105.0)) == 0  # cooling
    assert policy.update(StageSample(0, costs.prefix_ms(0), costs.suffix_ms(0), at_s=111.0)) != 0


def test_simple_policy_ignores_times_measured_at_another_partition():
    policy = SimplePolicy(0, 8, 4, hysteresis=0.1, cooldown_s=0.0)
    assert policy.update(StageSample(3, prefix_ms=10.0, suffix_ms=100.0, at_s=1.0)) == 4
    assert policy.update(StageSample(4, prefix_ms=10.0, suffix_ms=100.0, at_s=2.0)) == 5


@pytest.mark.parametrize("kwargs,message", [
    (dict(zone_min=5, zone_max=3, partition=4), r"dynamic zone \[5, 3\]"),
    (dict(zone_min=0, zone_max=9, partition=4), r"dynamic zone \[0, 9\] must lie in 0\.\.8"),
    (dict(zone_min=0, zone_max=8, partition=9), "partition 9 lies outside"),
    (dict(zone_min=0, zone_max=8, partition=4, hysteresis=1.5), "hysteresis 1.5"),
    (dict(zone_min=0, zone_max=8, partition=4, budget_bytes=-1, prefix_bytes=[1] * 9), "budget -1 B"),
    (dict(zone_min=0, zone_max=8, partition=4, budget_bytes=100), "needs the prefix bytes"),
])
def test_invalid_zones_and_budgets_are_refused_with_a_reason(kwargs, message):
    with pytest.raises(ConfigError, match=message):
        CostPolicy(model(), **kwargs)


def test_one_slow_frame_does_not_move_the_partition_but_a_sustained_slowdown_does():
    costs = model()
    policy = CostPolicy(costs, 0, 8, partition=4, cooldown_frames=0, confirm_frames=1)
    steady = lambda p, slow=1.0: StageSample(p, costs.prefix_ms(p) / costs.prefix_scale,  # noqa: E731
                                             slow * costs.suffix_ms(p) / costs.suffix_scale)
    for _ in range(6):
        policy.update(steady(policy.partition))
    start = policy.partition
    policy.update(steady(start, slow=3.0))          # one outlier (a noisy neighbour)
    for _ in range(3):
        policy.update(steady(policy.partition))
    assert policy.partition == start and not policy.moves
    for _ in range(10):                              # a competing load that stays
        policy.update(steady(policy.partition, slow=2.0))
    assert policy.partition > start


def test_both_policies_take_run_time_changes_through_one_interface():
    cost, simple = CostPolicy(model(), 0, 8, partition=4), SimplePolicy(0, 8, 4)
    for policy in (cost, simple):
        policy.tune("cooldown_s", 3.0)
        policy.tune("backlog_threshold", 5)
        policy.tune("hysteresis", 5.0)
        assert (policy.cooldown_s, policy.backlog_threshold) == (3.0, 5)
    assert cost.hysteresis == 0.9 and simple.hysteresis == 5.0  # the cost policy's is a fraction of the period


@pytest.mark.parametrize("kind", ["cost", "simple"])
def test_one_backlog_report_moves_p_once_not_once_per_frame_in_flight(kind):
    """docs/results/load_step.json had moves at frames 25 and 26: each sample of a tick carried the same
    /diagnostics backlog and moved p up a block past the cool-down. Frames that ran at the old p (in flight
    across the move) must not push it further; a new backlog seen at the new p still does."""
    policy = CostPolicy(model(), 0, 8, partition=4, cooldown_frames=100) if kind == "cost" else \
        SimplePolicy(0, 8, 4, cooldown_s=100.0)
    for _ in range(4):                                   # four frames of one tick, all at p = 4, backlog 3
        policy.update(StageSample(4, 50.0, 40.0, backlog=3, at_s=1.0))
    assert policy.partition == 5
    assert policy.update(StageSample(5, 50.0, 40.0, backlog=3, at_s=1.1)) == 6   # still behind at the new p
