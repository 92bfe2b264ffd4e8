"""What the dashboard's pages show, assembled from the other services (``server.ui``).

Every figure comes from the service the REST API answers with (teams, pools, jobs, budgets,
usage), so the dashboard and the API can never disagree and the same authorization applies:
a member sees the teams they belong to, a platform admin every team. This module only joins
and summarizes; it reads the store through those services, never directly.

Two figures the API does not give are derived here, and the dashboard says how:

* **lent**: in each cohort and gpu type, the GPUs teams borrow are attributed to the teams
  whose nominal quota sits idle, in team-name order, each up to its idle nominal and its
  lending limit (the cohort pools idle quota; it keeps no record of who lent to whom).
* **fair-share standing**: a team's share of this month's GPU-hours divided by its share of
  the weights (1.0: exactly its share; above: it used more than its weight gives it).
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from datetime import date, timedelta

from gpupool.accounting import periods
from gpupool.auth.principal import Principal
from gpupool.controller.backoff import PoolHealth
from gpupool.controller.clock import Clock
from gpupool.server.budget_schemas import BudgetOut
from gpupool.server.schemas import JobEventOut, PoolOut, TeamOut
from gpupool.server.services.budgets import BudgetService
from gpupool.server.services.jobs import JobService
from gpupool.server.services.teams import TeamService
from gpupool.server.services.usage import ReportQuery, UsageService
from gpupool.server.usage_schemas import CostRowOut, CostSummary
from gpupool.spec.models import ClusterConfig

RECENT_PREEMPTIONS = 10
USAGE_DAYS = 14


@dataclass(frozen=True)
class Capacity:
    """GPUs of one gpu type (or one pool): healthy ones are in pools whose backend answers."""

    name: str
    gpu_type: str
    total: int
    healthy: int
    allocated: int

    @property
    def idle(self) -> int:
        return max(0, self.healthy - self.allocated)


@dataclass(frozen=True)
class Alert:
    level: str  # "warning" or "danger"
    text: str


@dataclass(frozen=True)
class Overview:
    by_type: list[Capacity]
    by_pool: list[Capacity]
    pending: dict[str, int]  # team -> queued jobs
    running: dict[str, int]
    preemptions: Sequence[JobEventOut]
    pools: list[PoolOut]
    alerts: list[Alert]


@dataclass(frozen=True)
class QuotaCell:
    gpu_type: str
    nominal: int
    used: int
    borrowed: int
    lent: int
    borrowing_limit: int | None
    lending_limit: int | None


@dataclass(frozen=True)
class TeamView:
    team: TeamOut
    cells: list[QuotaCell]
    fair_share: float  # the team's share of the weights
    standing: float | None  # usage share / fair share (None: nothing used by anyone)


@dataclass(frozen=True)
class CohortView:
    name: str
    teams: list[str]
    totals: dict[str, QuotaCell]  # gpu type -> the cohort's sums


@dataclass(frozen=True)
class PoolView:
    pool: PoolOut
    retry_in_s: float | None  # while backing off: seconds until its backend is tried again


@dataclass
class UsageView:
    report: CostSummary
    days: list[str]
    series: dict[str, dict[str, tuple[float, float]]] = field(default_factory=dict)
    # series: "team/gpu type" -> day -> (allocated GPU-hours, borrowed GPU-hours)
    totals: dict[str, CostRowOut] = field(default_factory=dict)  # "team/gpu type" -> sums
    budgets: list[BudgetOut] = field(default_factory=list)


class DashboardService:
    def __init__(
        self,
        config: Callable[[], ClusterConfig],
        clock: Clock,
        jobs: JobService,
        teams: TeamService,
        budgets: BudgetService,
        usage: UsageService,
        health: Callable[[str], PoolHealth],
    ) -> None:
        self._config = config
        self._clock = clock
        self._jobs = jobs
        self._teams = teams
        self._budgets = budgets
        self._usage = usage
        self._health = health

    # -- overview --------------------------------------------------------------------------

    def overview(self, principal: Principal) -> Overview:
        pools = self._teams.pools(principal).items
        teams = self._teams.list(principal).items
        by_pool = [
            Capacity(
                p.name,
                p.gpu_type,
                p.gpus_total,
                p.gpus_total if p.available else 0,
                p.gpus_allocated,
            )
            for p in pools
        ]
        sums: dict[str, list[int]] = defaultdict(lambda: [0, 0, 0])
        for c in by_pool:
            sums[c.gpu_type][0] += c.total
            sums[c.gpu_type][1] += c.healthy
            sums[c.gpu_type][2] += c.allocated
        by_type = [Capacity(t, t, *sums[t]) for t in sorted(sums)]
        alerts = [
            Alert("danger", f"pool {p.name} is unreachable: {p.message or 'no reason given'}")
            for p in pools
            if not p.available
        ]
        for budget in self._budgets.show(principal, None).items:
            if budget.status != "ok":
                alerts.append(
                    Alert(
                        "danger" if budget.status == "over" else "warning",
                        f"team {budget.team} budget {budget.name}: {budget.percent:.0f}% used "
                        f"of {budget.limit:g} {budget.unit} ({budget.period_label})",
                    )
                )
        return Overview(
            by_type=by_type,
            by_pool=by_pool,
            pending={t.name: t.queued for t in teams},
            running={t.name: t.running for t in teams},
            preemptions=self._jobs.recent(principal, "preempting", RECENT_PREEMPTIONS),
            pools=pools,
            alerts=alerts,
        )

    # -- teams -----------------------------------------------------------------------------

    def teams(self, principal: Principal) -> tuple[list[TeamView], list[CohortView]]:
        config = self._config()
        shown = self._teams.list(principal, with_members=True).items
        lent = _lent(shown)
        weights = sum(t.weight for t in config.teams.values()) or 1.0
        views = []
        for team in shown:
            cells = [
                QuotaCell(
                    gpu_type=gpu_type,
                    nominal=q.nominal,
                    used=q.used,
                    borrowed=q.borrowed,
                    lent=lent.get((team.name, gpu_type), 0),
                    borrowing_limit=q.borrowing_limit,
                    lending_limit=q.lending_limit,
                )
                for gpu_type, q in sorted(team.quota.items())
            ]
            fair = team.weight / weights
            standing = team.usage_share / fair if team.usage_gpu_hours and fair else None
            views.append(TeamView(team, cells, round(fair, 4), standing))
        return views, _cohorts(views)

    # -- pools -----------------------------------------------------------------------------

    def pools(self, principal: Principal) -> list[PoolView]:
        views = []
        for pool in self._teams.pools(principal).items:
            health = self._health(pool.name)
            retry = None
            if not health.available and health.retry_at is not None:
                retry = max(0.0, health.retry_at - self._clock.monotonic())
            views.append(PoolView(pool, retry))
        return views

    # -- usage -----------------------------------------------------------------------------

    def usage(self, principal: Principal, team: str | None = None) -> UsageView:
        """The last ``USAGE_DAYS`` days (of the accounting timezone), per team and gpu type."""
        report = self._usage.costs(principal, self.usage_query(team))
        first = self._first_day()
        view = UsageView(
            report=report,
            days=[(first + timedelta(days=n)).isoformat() for n in range(USAGE_DAYS)],
        )
        for row in report.rows:
            if row.team is None:  # idle capacity rows: not a team's use
                continue
            key = f"{row.team}/{row.gpu_type}"
            alloc, borrowed = view.series.setdefault(key, {}).get(row.period, (0.0, 0.0))
            view.series[key][row.period] = (  # a day's label is its ISO date
                alloc + row.allocated_gpu_hours,
                borrowed + row.borrowed_gpu_hours,
            )
            known = view.totals.get(key)
            view.totals[key] = row if known is None else _add(known, row)
        view.budgets = self._budgets.show(principal, team).items
        return view

    def usage_teams(self, principal: Principal) -> list[str]:
        """The teams whose usage ``principal`` reads (an auditor: every team)."""
        return [t for t in sorted(self._config().teams) if principal.reads_usage_of(t)]

    def usage_query(self, team: str | None) -> ReportQuery:
        """The report the usage page shows (and its CSV download holds)."""
        return ReportQuery(team=team, start=self._first_day().isoformat(), period="day")

    def _first_day(self) -> date:
        today = periods.local_date(self._clock.now(), self._config().accounting)
        return today - timedelta(days=USAGE_DAYS - 1)


def _add(a: CostRowOut, b: CostRowOut) -> CostRowOut:
    return a.model_copy(
        update={
            "allocated_gpu_hours": a.allocated_gpu_hours + b.allocated_gpu_hours,
            "borrowed_gpu_hours": a.borrowed_gpu_hours + b.borrowed_gpu_hours,
            "idle_gpu_hours": a.idle_gpu_hours + b.idle_gpu_hours,
            "allocated_cost": a.allocated_cost + b.allocated_cost,
            "borrowed_cost": a.borrowed_cost + b.borrowed_cost,
            "idle_cost": a.idle_cost + b.idle_cost,
            "total_cost": a.total_cost + b.total_cost,
            "unpriced": a.unpriced or b.unpriced,
        }
    )


def _lent(shown: list[TeamOut]) -> dict[tuple[str, str], int]:
    """GPUs each team lends, per gpu type (see the module docstring). Only the shown teams'
    figures are known to the caller; a cohort with hidden members is attributed among those
    shown, so a member never learns another team's usage from it."""
    by_cohort: dict[str, list[TeamOut]] = defaultdict(list)
    for team in shown:
        if team.cohort is not None:
            by_cohort[team.cohort].append(team)
    lent: dict[tuple[str, str], int] = {}
    for members in by_cohort.values():
        types = {t for team in members for t in team.quota}
        for gpu_type in types:
            owed = sum(t.quota[gpu_type].borrowed for t in members if gpu_type in t.quota)
            for team in sorted(members, key=lambda t: t.name):
                q = team.quota.get(gpu_type)
                if q is None or owed <= 0:
                    continue
                idle = max(0, q.nominal - (q.used - q.borrowed))
                if q.lending_limit is not None:
                    idle = min(idle, q.lending_limit)
                given = min(idle, owed)
                if given:
                    lent[(team.name, gpu_type)] = given
                    owed -= given
    return lent


def _cohorts(views: list[TeamView]) -> list[CohortView]:
    groups: dict[str, list[TeamView]] = defaultdict(list)
    for view in views:
        if view.team.cohort is not None:
            groups[view.team.cohort].append(view)
    cohorts = []
    for name in sorted(groups):
        totals: dict[str, QuotaCell] = {}
        for view in groups[name]:
            for c in view.cells:
                t = totals.get(c.gpu_type)
                totals[c.gpu_type] = QuotaCell(
                    c.gpu_type,
                    c.nominal + (t.nominal if t else 0),
                    c.used + (t.used if t else 0),
                    c.borrowed + (t.borrowed if t else 0),
                    c.lent + (t.lent if t else 0),
                    None,
                    None,
                )
        cohorts.append(CohortView(name, [v.team.name for v in groups[name]], totals))
    return cohorts
