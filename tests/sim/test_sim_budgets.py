"""Budgets in a replay: enforced on the virtual clock as the controller enforces them.

The golden cluster (one node of 4 GPUs; teams a and b, nominal 2 each, one cohort). Virtual
time 0 is ``DEFAULT_ORIGIN``, Thursday 2026-01-01 00:00 UTC: a weekly budget's week (from
Monday) ends on Monday 2026-01-05, 4 days later.
"""

from __future__ import annotations

from typing import Any

from gpupool.sim.budgets import DEFAULT_ORIGIN
from gpupool.sim.cluster import policy_setup
from gpupool.sim.engine import Outcome, simulate
from gpupool.sim.metrics import summarize
from gpupool.sim.report import budget_rows
from gpupool.spec.models import Budget, ClusterConfig
from sim.test_sim_golden import CONFIG, NOMINAL, job

NEXT_WEEK = 4 * 86_400.0
HOUR = 3_600.0


def with_budget(**budget: Any) -> ClusterConfig:
    teams = dict(CONFIG.teams)
    teams["a"] = teams["a"].model_copy(update={"budgets": [Budget(name="weekly", **budget)]})
    return CONFIG.model_copy(update={"teams": teams})


def run(config: ClusterConfig, trace: list[Any], policy: str = "gpupool") -> Outcome:
    return simulate(policy_setup(config, policy), trace, NOMINAL)


def starts(outcome: Outcome) -> dict[str, float | None]:
    return {r.trace.job_id: r.first_start for r in outcome.jobs}


# a uses 2 GPU-h in its first hour; its next job comes after that; b's at the same time.
TRACE = [
    job("a1", 0, HOUR, 2, "a"),
    job("a2", HOUR + 400, 100, 1, "a"),
    job("b1", HOUR + 400, 100, 1, "b"),
]


def test_a_used_up_hold_budget_keeps_new_jobs_waiting_until_the_next_period() -> None:
    config = with_budget(period="week", gpu_hours=2, enforcement="hold")
    assert DEFAULT_ORIGIN.weekday() == 3  # a Thursday: the next week starts 4 days later
    outcome = run(config, TRACE)
    assert starts(outcome) == {"a1": 0.0, "a2": NEXT_WEEK, "b1": HOUR + 400}
    (budget,) = summarize(outcome)["budgets"]
    assert budget["team"] == "a" and budget["enforcement"] == "hold"
    assert budget["periods_over"] == 1
    # Held from the cycle at a1's end (2 GPU-h used) until the week ended.
    assert budget["enforced_hours"] == (NEXT_WEEK - HOUR) / HOUR
    assert budget["last_period"] == "the week of Jan 5, 2026"
    # The hard-quota baseline keeps the teams' budgets; the global FIFO has no teams.
    assert starts(run(config, TRACE, "hard-quota-fifo"))["a2"] == NEXT_WEEK
    assert starts(run(config, TRACE, "fifo"))["a2"] == HOUR + 400


def test_a_budget_that_alerts_only_changes_nothing() -> None:
    alert = run(with_budget(period="week", gpu_hours=2), TRACE)
    none = run(CONFIG, TRACE)
    assert starts(alert) == starts(none) == {"a1": 0.0, "a2": HOUR + 400, "b1": HOUR + 400}
    (budget,) = summarize(alert)["budgets"]
    assert (budget["periods_over"], budget["enforced_hours"]) == (1, 0.0)
    assert summarize(none)["budgets"] == []


def test_running_work_counts_before_it_ends() -> None:
    """a1 runs 2 GPUs for 3 h; by 1 h in it has used the 2 GPU-h: a2, submitted then, waits."""
    config = with_budget(period="week", gpu_hours=2, enforcement="hold")
    trace = [job("a1", 0, 3 * HOUR, 2, "a"), job("a2", HOUR + 400, 100, 1, "a")]
    assert starts(run(config, trace)) == {"a1": 0.0, "a2": NEXT_WEEK}


def test_no_borrow_keeps_the_team_within_its_nominal() -> None:
    """Over a no-borrow budget, a's second 2-GPU job does not borrow b's idle GPUs: it waits
    for a's first one to end; without the budget it borrows at once."""
    trace = [
        job("a0", 0, HOUR, 2, "a"),
        job("a1", HOUR + 400, 1000, 2, "a"),
        job("a2", HOUR + 400, 1000, 2, "a"),
    ]
    capped = run(with_budget(period="week", gpu_hours=1, enforcement="no-borrow"), trace)
    free = run(CONFIG, trace)
    assert starts(free) == {"a0": 0.0, "a1": HOUR + 400, "a2": HOUR + 400}
    assert starts(capped) == {"a0": 0.0, "a1": HOUR + 400, "a2": HOUR + 1400}
    assert summarize(capped)["borrowed_gpu_hours"] == 0.0


def test_a_money_budget_prices_the_pools_gpu_hours() -> None:
    gpu = CONFIG.gpu_types["gpu"].model_copy(update={"price_per_gpu_hour": 3.0})
    config = with_budget(period="month", amount=6, enforcement="hold").model_copy(
        update={"gpu_types": {"gpu": gpu}}
    )
    outcome = run(config, TRACE)
    # 2 GPU-h at 3.00 is 6.00: used up; the month ends on February 1 (31 days).
    assert starts(outcome)["a2"] == 31 * 86_400.0
    metrics = {"gpupool": summarize(outcome)}
    (row,) = budget_rows(metrics)
    assert row[:6] == ["gpupool", "a", "weekly", "hold", "6 USD", "1"]
