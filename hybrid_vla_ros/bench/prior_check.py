"""The load-step scenario's check of the planner against the static sweep it measures (issue 26): the prior
made before the run, and the planner timed again before each idle pass (this machine's speed drifts more within
minutes than the planner errs)."""

from __future__ import annotations


def prior_vs_sweep(prediction: dict, start_p: int, compared: dict) -> dict:
    """How far the planner's prior (the policy's starting p, its predicted period) was from the best static p the
    idle sweep then measured, and from that p's measured period."""
    idle = compared["static_sweep_period_ms"]["idle"]
    best = compared["best_static"]["idle"]
    predicted = prediction["rows"][start_p]["period_ms"]
    return {"partition": start_p, "predicted_period_ms": predicted, "best_static_idle": best,
            "measured_best_period_ms": idle[best], "measured_period_at_prior_ms": idle.get(start_p),
            "blocks_off": start_p - best, "period_off": predicted / idle[best] - 1,
            "source": "hybrid-vla plan for this machine (plan/run.py plan_here), made before the run"}


def plan_across_sweep(plans: list[dict], compared: dict) -> dict:
    """The planner timed again before each idle pass (this machine's speed drifts by more than the planner's
    error within minutes): its best p and period, the mean over the passes' plans, against the idle sweep."""
    idle, best = compared["static_sweep_period_ms"]["idle"], compared["best_static"]["idle"]
    period = lambda plan, p: plan["rows"][p]["period_ms"]  # noqa: E731
    ps = [plan["best_p"] for plan in plans]
    cut = round(sum(ps) / len(ps))
    predicted = sum(period(plan, cut) for plan in plans) / len(plans)
    return {"plans": [{"best_p": plan["best_p"], "period_ms": period(plan, plan["best_p"])} for plan in plans],
            "partition": cut, "predicted_period_ms": predicted, "best_static_idle": best,
            "measured_best_period_ms": idle[best], "blocks_off": cut - best, "period_off": predicted / idle[best] - 1,
            "source": "hybrid-vla plan for this machine, made before each idle pass (plan/run.py plan_here); "
                      "p: the passes' best cuts averaged, period: the passes' predictions at that cut averaged"}


__all__ = ["plan_across_sweep", "prior_vs_sweep"]
