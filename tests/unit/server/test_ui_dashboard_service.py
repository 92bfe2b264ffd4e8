"""What the dashboard derives beyond the API's figures: lent GPUs, cohort sums, fair-share
standing and the overview's alerts (services.dashboard), on stand-in services."""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path

import pytest

from gpupool.auth.principal import Principal
from gpupool.controller.backoff import PoolHealth
from gpupool.server.budget_schemas import BudgetList, BudgetOut
from gpupool.server.schemas import PoolList, PoolOut, TeamList, TeamOut, TeamQuotaOut
from gpupool.server.services.dashboard import DashboardService
from gpupool.spec.load import load_config

DEMO = Path(__file__).resolve().parents[3] / "examples" / "demo.yaml"
NOW = datetime(2026, 12, 5, 12, tzinfo=UTC)


def quota(
    nominal: int, used: int = 0, borrowed: int = 0, lending: int | None = None
) -> TeamQuotaOut:
    return TeamQuotaOut(
        nominal=nominal, used=used, borrowed=borrowed, borrowing_limit=None, lending_limit=lending
    )


def team(
    name: str, cohort: str | None = "research", share: float = 0.0, **types: TeamQuotaOut
) -> TeamOut:
    return TeamOut(
        name=name,
        cohort=cohort,
        weight=1.0,
        quota=types,
        queued=0,
        running=0,
        usage_gpu_hours=share * 10,
        usage_share=share,
    )


def pool(name: str, gpu_type: str, total: int, allocated: int, available: bool = True) -> PoolOut:
    return PoolOut(
        name=name,
        backend="local",
        gpu_type=gpu_type,
        nodes=1,
        gpus_per_node=total,
        gpus_total=total,
        gpus_allocated=allocated,
        dedicated_to=None,
        available=available,
        message="" if available else "connection refused",
    )


@dataclass
class Teams:
    teams: list[TeamOut]
    pool_list: list[PoolOut] = field(default_factory=list)

    def list(self, principal: Principal, with_members: bool = False) -> TeamList:
        return TeamList(items=self.teams)

    def pools(self, principal: Principal) -> PoolList:
        return PoolList(items=self.pool_list)


@dataclass
class Budgets:
    items: list[BudgetOut] = field(default_factory=list)

    def show(self, principal: Principal, team: str | None) -> BudgetList:
        return BudgetList(items=self.items)


class Jobs:
    def recent(self, principal: Principal, kind: str, limit: int) -> list[object]:
        return []


class Clock:
    def now(self) -> datetime:
        return NOW

    def monotonic(self) -> float:
        return 100.0


def service(teams: Teams, budgets: Budgets | None = None) -> DashboardService:
    config = load_config(DEMO)
    return DashboardService(
        lambda: config,
        Clock(),  # type: ignore[arg-type]
        Jobs(),  # type: ignore[arg-type]
        teams,  # type: ignore[arg-type]
        budgets or Budgets(),  # type: ignore[arg-type]
        None,  # type: ignore[arg-type]
        lambda _pool: PoolHealth(available=True),
    )


ADMIN = Principal(user="admin", token_id="t", platform_admin=True)


@dataclass
class Lending:
    teams: list[TeamOut]
    want: dict[tuple[str, str], int]  # (team, gpu type) -> lent, where not 0


LENDING = [
    pytest.param(
        Lending(
            [team("team-a", h100=quota(2, used=0)), team("team-b", h100=quota(2, 4, 2))],
            {("team-a", "h100"): 2},
        ),
        id="the idle team lends what the other borrows",
    ),
    pytest.param(
        Lending(
            [
                team("team-a", h100=quota(2, used=1)),
                team("team-b", h100=quota(2, 0)),
                team("team-c", h100=quota(2, 5, 3)),
            ],
            {("team-a", "h100"): 1, ("team-b", "h100"): 2},
        ),
        id="attributed in team order, each up to its idle nominal",
    ),
    pytest.param(
        Lending(
            [team("team-a", h100=quota(4, 0, lending=1)), team("team-b", h100=quota(2, 3, 1))],
            {("team-a", "h100"): 1},
        ),
        id="the lending limit caps what a team lends",
    ),
    pytest.param(
        Lending(
            [team("team-a", cohort=None, h100=quota(2)), team("team-b", h100=quota(2, 3, 1))],
            {},
        ),
        id="a team outside the cohort lends nothing",
    ),
]


@pytest.mark.parametrize("case", LENDING)
def test_lent_gpus(case: Lending) -> None:
    views, _ = service(Teams(case.teams)).teams(ADMIN)
    lent = {(v.team.name, c.gpu_type): c.lent for v in views for c in v.cells if c.lent}
    assert lent == case.want


def test_cohort_sums_and_standing() -> None:
    teams = [
        team("team-a", share=0.75, h100=quota(2, 3, 1), t4=quota(2, 0)),
        team("team-b", share=0.25, h100=quota(2, 0)),
        team("team-c", cohort=None, share=0.0, t4=quota(2, 0)),
    ]
    views, cohorts = service(Teams(teams)).teams(ADMIN)
    assert [(c.name, c.teams) for c in cohorts] == [("research", ["team-a", "team-b"])]
    h100 = cohorts[0].totals["h100"]
    assert (h100.nominal, h100.used, h100.borrowed, h100.lent) == (4, 3, 1, 1)
    # The demo has three teams of weight 1: each team's fair share is a third.
    standing = {v.team.name: v.standing for v in views}
    assert standing == {
        "team-a": pytest.approx(2.25),
        "team-b": pytest.approx(0.75),
        "team-c": None,
    }


def budget(status: str, percent: float) -> BudgetOut:
    return BudgetOut(
        team="team-b",
        name="monthly",
        period="month",
        period_label="2026-12",
        period_start=NOW,
        period_end=NOW,
        gpu_type=None,
        unit="USD",
        used=percent * 20,
        limit=2000,
        remaining=2000 - percent * 20,
        percent=percent,
        status=status,  # type: ignore[arg-type]
        enforcement="alert",
        enforced=False,
        thresholds=[50, 80, 100],
        reached=[],
    )


def test_overview_capacity_and_alerts() -> None:
    teams = Teams(
        [team("team-a")],
        [pool("p-h100", "h100", 4, 3), pool("p2-h100", "h100", 4, 0, available=False)],
    )
    budgets = Budgets([budget("ok", 10), budget("warning", 85), budget("over", 120)])
    view = service(teams, budgets).overview(ADMIN)
    (h100,) = view.by_type
    assert (h100.total, h100.healthy, h100.allocated, h100.idle) == (8, 4, 3, 1)
    assert [(a.level, a.text.split(":")[0]) for a in view.alerts] == [
        ("danger", "pool p2-h100 is unreachable"),
        ("warning", "team team-b budget monthly"),
        ("danger", "team team-b budget monthly"),
    ]
