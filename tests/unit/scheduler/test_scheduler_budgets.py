"""Budget enforcement in run_cycle: hold admits nothing new, no-borrow keeps a team in nominal."""

from __future__ import annotations

from dataclasses import dataclass, field, replace

import pytest

from gpupool.scheduler import (
    BudgetAction,
    BudgetBlock,
    NodeView,
    PendingJob,
    Placement,
    PoolView,
    QuotaView,
    RunningJob,
    Snapshot,
    TeamView,
    run_cycle,
)
from gpupool.scheduler.snapshot import ReasonCode


def pool(name: str, gpu_type: str, gpus: int = 8) -> PoolView:
    return PoolView(name, gpu_type, "local", (NodeView(f"{name}-0", gpus, 64, 512),))


def team(name: str, **quotas: QuotaView) -> TeamView:
    return TeamView(name, "research", 1.0, dict(quotas))


def job(job_id: str, team_name: str, gpus: int = 1, types: tuple[str, ...] = ()) -> PendingJob:
    return PendingJob(job_id, team_name, 0, 0.0, gpus, gpu_types=types)


def hold(team_name: str, gpu_type: str | None = None) -> BudgetBlock:
    return BudgetBlock(
        team_name, "monthly", BudgetAction.HOLD, gpu_type, "1,012", "1,000 GPU-h", "June", "July 1"
    )


def no_borrow(team_name: str, gpu_type: str | None = None) -> BudgetBlock:
    return BudgetBlock(
        team_name, "monthly", BudgetAction.NO_BORROW, gpu_type, "1,012", "1,000 GPU-h", "June",
        "July 1",
    )  # fmt: skip


POOLS = (pool("h", "h100"), pool("t", "t4"))
TEAMS = (
    team("a", h100=QuotaView(2), t4=QuotaView(2)),
    team("b", h100=QuotaView(6), t4=QuotaView(6)),
)


@dataclass(frozen=True)
class Case:
    pending: tuple[PendingJob, ...]
    budgets: tuple[BudgetBlock, ...]
    want_admitted: dict[str, str]  # job -> gpu type
    want_pending: dict[str, tuple[ReasonCode, ...]] = field(default_factory=dict)
    running: tuple[RunningJob, ...] = ()


CASES = [
    pytest.param(
        Case((job("a1", "a"), job("b1", "b")), (), {"a1": "h100", "b1": "h100"}),
        id="no budgets: both teams run",
    ),
    pytest.param(
        Case(
            (job("a1", "a"), job("a2", "a", 3), job("b1", "b")),
            (hold("a"),),
            {"b1": "h100"},
            {"a1": (ReasonCode.BUDGET,), "a2": (ReasonCode.BUDGET,)},
        ),
        id="hold: none of the team's jobs starts, other teams are unaffected",
    ),
    pytest.param(
        Case(
            (job("a1", "a", types=("h100", "t4")),),
            (hold("a", "h100"),),
            {"a1": "t4"},
        ),
        id="hold on one gpu type: the job spills over to the next type",
    ),
    pytest.param(
        Case(
            (job("a1", "a", types=("h100",)),),
            (hold("a", "t4"),),
            {"a1": "h100"},
        ),
        id="hold on another gpu type changes nothing",
    ),
    pytest.param(
        Case(
            (job("a1", "a", 2, types=("h100",)), job("a2", "a", 1, types=("h100",))),
            (no_borrow("a"),),
            {"a1": "h100"},
            {"a2": (ReasonCode.QUOTA, ReasonCode.BUDGET)},
        ),
        id="no-borrow: runs within nominal, the job that would borrow waits",
    ),
    pytest.param(
        Case(
            (job("a1", "a", 3, types=("h100",)),),
            (),
            {"a1": "h100"},
        ),
        id="without the budget the same job borrows",
    ),
    pytest.param(
        Case(
            (job("a1", "a", 3, types=("h100",)), job("a2", "a", 3, types=("t4",))),
            (no_borrow("a", "t4"),),
            {"a1": "h100"},
            {"a2": (ReasonCode.QUOTA, ReasonCode.BUDGET)},
        ),
        id="no-borrow on one gpu type: borrowing on the others goes on",
    ),
]


@pytest.mark.parametrize("case", CASES)
def test_budget_enforcement(case: Case) -> None:
    snapshot = Snapshot(
        now=100.0,
        pools=POOLS,
        teams={t.name: t for t in TEAMS},
        running=case.running,
        pending=case.pending,
        budgets=case.budgets,
    )
    result = run_cycle(snapshot)
    assert {a.job_id: a.gpu_type for a in result.admissions} == case.want_admitted
    got = {job_id: tuple(r.code for r in reasons) for job_id, reasons in result.pending.items()}
    assert got == case.want_pending


def test_hold_reason_says_used_limit_period_and_when_it_ends() -> None:
    snapshot = Snapshot(100.0, POOLS, {t.name: t for t in TEAMS}, (), (job("a1", "a"),))
    result = run_cycle(replace(snapshot, budgets=(hold("a"),)))
    (reason,) = result.pending["a1"]
    assert reason.message == (
        "budget monthly: a used 1,012 of 1,000 GPU-h in June; its new jobs wait until July 1 "
        "or until an admin raises the budget"
    )


def test_no_borrow_keeps_running_borrowed_work_and_its_reason_names_the_type() -> None:
    # a already holds 3 h100s (1 borrowed): nothing is preempted, nothing more is admitted.
    borrowed = RunningJob("r1", "a", 0, "h100", "h", (Placement("h-0", (0, 1, 2)),))
    snapshot = Snapshot(
        100.0,
        (PoolView("h", "h100", "local", (NodeView("h-0", 8, 64, 512, frozenset({0, 1, 2})),)),),
        {t.name: t for t in TEAMS},
        (borrowed,),
        (job("a1", "a", 1, types=("h100",)),),
        budgets=(no_borrow("a"),),
    )
    result = run_cycle(snapshot)
    assert result.admissions == () and result.preemptions == ()
    budget = result.pending["a1"][-1]
    assert budget.code is ReasonCode.BUDGET and budget.gpu_type == "h100"
    assert "runs only within its nominal h100 quota (no borrowing) until July 1" in budget.message


def test_same_snapshot_same_decisions_with_budgets() -> None:
    pending = (*(job(f"a{i}", "a", 1 + i % 3) for i in range(6)), job("b1", "b"))
    snapshot = Snapshot(
        100.0, POOLS, {t.name: t for t in TEAMS}, (), pending, budgets=(no_borrow("a"),)
    )
    assert run_cycle(snapshot) == run_cycle(snapshot)
