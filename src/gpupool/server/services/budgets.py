"""Budgets over the API: how they stand (team admins, their teams) and setting one (platform
admins), which stores a new configuration version through the configuration's apply path.

``set`` edits the stored configuration text in place (``spec.edit``: the rest of the text
stays as written) and applies it like ``gpupool config apply`` would: validated, against the
version it read (409 when another change came first), recorded with who and when. Webhook
delivery logs are for platform admins only: their errors may name receivers' hosts.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from pydantic import ValidationError

from gpupool.accounting.budgets import BudgetState
from gpupool.auth.principal import Principal
from gpupool.controller.budgets import budget_states
from gpupool.controller.clock import Clock
from gpupool.core.errors import ConfigInvalid, Conflict, Forbidden, NotFound
from gpupool.server.budget_schemas import (
    BudgetIn,
    BudgetList,
    BudgetOut,
    BudgetSetOut,
    DeliveryList,
    DeliveryOut,
)
from gpupool.server.services.config import ConfigService
from gpupool.server.services.teams import administers
from gpupool.spec.edit import set_budget
from gpupool.spec.models import Budget, ClusterConfig
from gpupool.spec.problems import Problem
from gpupool.state import budgets as store
from gpupool.state import config_store


class BudgetService:
    def __init__(
        self,
        sessions: Any,  # the runtime's session factory
        config: Callable[[], ClusterConfig],
        clock: Clock,
        config_service: ConfigService,
    ) -> None:
        self._sessions = sessions
        self._config = config
        self._clock = clock
        self._config_service = config_service

    def show(self, principal: Principal, team: str | None) -> BudgetList:
        """The budgets of ``team`` (its admins, platform admins and auditors), or of every team
        the principal may read them of."""
        config = self._config()
        if team is not None:
            if team not in config.teams:
                raise NotFound(f"no team named {team!r}")
            if not reads_budgets_of(principal, team):
                raise Forbidden(
                    f"user {principal.user!r} may not read team {team!r}'s budgets: "
                    "its admins, platform admins and auditors only"
                )
            teams = {team}
        else:
            teams = {name for name in config.teams if reads_budgets_of(principal, name)}
        with self._sessions() as session:
            states = budget_states(session, config, self._clock.now())
        return BudgetList(items=[budget_out(s) for s in states if s.team in teams])

    def set(self, principal: Principal, team: str, name: str, body: BudgetIn) -> BudgetSetOut:
        if not principal.platform_admin:
            raise Forbidden(f"user {principal.user!r} may not set budgets: platform admins only")
        fields = body.model_dump(exclude={"base_version"}, exclude_none=True)
        try:
            budget = Budget(name=name, **fields)
        except ValidationError as exc:
            problems = [
                {"path": ".".join(str(p) for p in e["loc"]), "message": e["msg"]}
                for e in exc.errors()
            ]
            raise ConfigInvalid(
                f"invalid budget {name!r}: "
                + "; ".join(f"{p['path']}: {p['message']}" for p in problems),
                details=problems,
            ) from None
        with self._sessions() as session:
            row = config_store.current(session)
        if row is None:
            raise Conflict(
                "no configuration version is stored yet; start the server with --config FILE "
                "or run `gpupool config apply FILE` first"
            )
        base = row.version if body.base_version is None else body.base_version
        if base != row.version:
            raise config_store.stale_version(base, row.version)
        try:
            text, _ = set_budget(row.text, f"configuration version {row.version}", team, budget)
        except ConfigInvalid as exc:  # the problems of the edited text, with their lines
            details = [p.as_dict() if isinstance(p, Problem) else p for p in exc.details or ()]
            raise ConfigInvalid(exc.message + "; nothing was changed", details=details) from None
        out = self._config_service.apply(
            principal, text, f"gpupool budget set {team} {name}", base, force=False
        )
        return BudgetSetOut(version=out.version, applied=out.applied, summary=out.diff.summary)

    def deliveries(
        self, principal: Principal, limit: int, webhook: str | None, before_id: int | None
    ) -> DeliveryList:
        if not principal.platform_admin:
            raise Forbidden(
                f"user {principal.user!r} may not read webhook deliveries: platform admins only"
            )
        with self._sessions() as session:
            rows = store.deliveries(session, limit=limit, webhook=webhook, before_id=before_id)
            items = [
                DeliveryOut(
                    id=r.id,
                    message_id=r.message_id,
                    webhook=r.webhook,
                    event=r.event,
                    try_number=r.try_number,
                    at=r.at,
                    outcome=r.outcome,  # type: ignore[arg-type]
                    status_code=r.status_code,
                    error=r.error,
                    duration_ms=r.duration_ms,
                )
                for r in rows
            ]
        return DeliveryList(items=items)


def reads_budgets_of(principal: Principal, team: str) -> bool:
    """Budgets are read by the team's admins and by whoever reads every team's usage."""
    return principal.reads_all_usage or administers(principal, team)


def budget_out(state: BudgetState) -> BudgetOut:
    return BudgetOut(
        team=state.team,
        name=state.name,
        period=state.budget.period,
        period_label=state.period.label,
        period_start=state.period.start,
        period_end=state.period.end,
        gpu_type=state.budget.gpu_type,
        unit=state.unit,
        used=round(state.used, 6),
        limit=state.limit,
        remaining=round(state.remaining, 6),
        percent=round(state.percent, 3),
        status=state.status,  # type: ignore[arg-type]
        enforcement=state.budget.enforcement,
        enforced=state.enforced,
        thresholds=list(state.budget.thresholds),
        reached=list(state.reached),
    )
