"""Teams and pools as the API shows them: configuration joined with live usage."""

from __future__ import annotations

from collections import Counter, defaultdict
from collections.abc import Callable
from datetime import UTC, datetime

from gpupool.accounting.budgets import BudgetState, month_at
from gpupool.accounting.pricing import MS_PER_HOUR
from gpupool.auth.principal import Action, Principal, authorize
from gpupool.controller.autoscaler import PoolScale
from gpupool.controller.backoff import PoolHealth
from gpupool.controller.budgets import budget_states
from gpupool.core.errors import NotFound
from gpupool.core.jobs import ACTIVE, JobStatus
from gpupool.server.schemas import (
    PoolList,
    PoolOut,
    PoolScaleOut,
    TeamList,
    TeamOut,
    TeamQuotaOut,
)
from gpupool.spec.models import ClusterConfig
from gpupool.state import budgets as budget_store
from gpupool.state import queue
from gpupool.state.db import SessionFactory

_ACTIVE = [s.value for s in ACTIVE]


class TeamService:
    def __init__(
        self,
        sessions: SessionFactory,
        config: Callable[[], ClusterConfig],
        health: Callable[[str], PoolHealth] = lambda _pool: PoolHealth(available=True),
        now: Callable[[], datetime] = lambda: datetime.now(UTC),
        scale: Callable[[str], PoolScale | None] = lambda _pool: None,
    ):
        self._sessions = sessions
        self._config = config
        self._health = health
        self._now = now
        self._scale = scale  # an autoscaled pool's state, from this process's controller

    def _period(
        self, config: ClusterConfig
    ) -> tuple[dict[str, float], float, dict[str, BudgetState]]:
        """This month's GPU-hours per team and of all teams, and each team's tightest budget
        (the one used the most, in percent)."""
        now = self._now()
        month = month_at(config.accounting, now)
        with self._sessions() as session:
            used = budget_store.gpu_ms(session, month.start, month.end, now)
            states = (
                budget_states(session, config, now)
                if any(t.budgets for t in config.teams.values())
                else []
            )
        hours: dict[str, float] = defaultdict(float)
        for (team, *_), gpu_ms in used.items():
            hours[team] += gpu_ms / MS_PER_HOUR
        tightest: dict[str, BudgetState] = {}
        for state in states:
            known = tightest.get(state.team)
            if known is None or state.percent > known.percent:
                tightest[state.team] = state
        return hours, sum(hours.values()), tightest

    def _usage(self) -> tuple[dict[str, Counter[str]], dict[str, Counter[str]], Counter[str]]:
        """GPUs in use and borrowed per team per gpu type; GPUs allocated per pool."""
        used: dict[str, Counter[str]] = defaultdict(Counter)
        borrowed: dict[str, Counter[str]] = defaultdict(Counter)
        per_pool: Counter[str] = Counter()
        with self._sessions() as session:
            rows = queue.active_usage(session)
        for team, gpus, nodes, gpu_type, pool, lent in rows:
            used[team][gpu_type] += gpus * nodes
            borrowed[team][gpu_type] += lent
            per_pool[pool] += gpus * nodes
        return used, borrowed, per_pool

    def _counts(self) -> dict[tuple[str, str], int]:
        with self._sessions() as session:
            return queue.open_counts(session)

    def list(self, principal: Principal, with_members: bool = False) -> TeamList:
        """The teams ``principal`` reads; ``with_members``: each with its members and roles
        (the dashboard's teams page: one read of the usage for all of them)."""
        config = self._config()
        names = principal.readable_teams(sorted(config.teams))
        usage, counts = self._usage(), self._counts()  # once for the page, not per team
        period = self._period(config)
        return TeamList(
            items=[
                self._team(
                    config,
                    n,
                    usage,
                    counts,
                    with_members=with_members,
                    period=period,
                    budget_shown=administers(principal, n),
                )
                for n in names
            ]
        )

    def get(self, principal: Principal, name: str) -> TeamOut:
        config = self._config()
        if name not in config.teams:
            raise NotFound(f"no team named {name!r}")
        authorize(principal, Action.READ, name)
        return self._team(
            config,
            name,
            self._usage(),
            self._counts(),
            with_members=True,
            period=self._period(config),
            budget_shown=administers(principal, name),
        )

    def _team(
        self,
        config: ClusterConfig,
        name: str,
        usage: tuple[dict[str, Counter[str]], dict[str, Counter[str]], Counter[str]],
        counts: dict[tuple[str, str], int],
        *,
        with_members: bool,
        period: tuple[dict[str, float], float, dict[str, BudgetState]] | None = None,
        budget_shown: bool = False,
    ) -> TeamOut:
        team = config.teams[name]
        used, borrowed, _ = usage
        gpu_types = sorted(set(team.quota) | set(used[name]))
        quota = {
            t: TeamQuotaOut(
                nominal=team.quota[t].nominal if t in team.quota else 0,
                borrowing_limit=team.quota[t].borrowing_limit if t in team.quota else None,
                lending_limit=team.quota[t].lending_limit if t in team.quota else None,
                used=used[name][t],
                borrowed=borrowed[name][t],
            )
            for t in gpu_types
        }
        hours, total, tightest = period or ({}, 0.0, {})
        budget = tightest.get(name) if budget_shown else None  # budgets: admins only
        return TeamOut(
            usage_gpu_hours=round(hours.get(name, 0.0), 3),
            usage_share=round(hours.get(name, 0.0) / total, 4) if total else 0.0,
            budget_remaining=None if budget is None else round(budget.remaining, 3),
            budget_unit=None if budget is None else budget.unit,
            budget_status=None if budget is None else budget.status,
            name=name,
            cohort=team.cohort,
            weight=team.weight,
            quota=quota,
            queued=counts.get((name, JobStatus.QUEUED.value), 0),
            running=sum(counts.get((name, s), 0) for s in _ACTIVE),
            members=dict(team.members) if with_members else None,
        )

    def pools(self, principal: Principal) -> PoolList:
        del principal  # any authenticated user may see pool capacity
        config = self._config()
        _, _, per_pool = self._usage()
        return PoolList(
            items=[
                PoolOut(
                    name=p.name,
                    backend=p.backend,
                    gpu_type=p.gpu_type,
                    nodes=p.nodes,
                    gpus_per_node=p.node.gpus,
                    gpus_total=p.nodes * p.node.gpus,
                    gpus_allocated=per_pool[p.name],
                    dedicated_to=p.dedicated_to,
                    available=(health := self._health(p.name)).available,
                    message=health.message,
                    autoscale=_scale_out(self._scale(p.name)),
                )
                for p in config.pools
            ]
        )


def _scale_out(scale: PoolScale | None) -> PoolScaleOut | None:
    if scale is None:
        return None
    return PoolScaleOut(
        target=scale.target,
        ready=scale.ready,
        provisioning=scale.provisioning,
        draining=scale.draining,
        reason=scale.reason,
    )


def administers(principal: Principal, team: str) -> bool:
    """Platform admins and the team's admins see its budgets."""
    return principal.platform_admin or principal.roles.get(team) == "admin"
