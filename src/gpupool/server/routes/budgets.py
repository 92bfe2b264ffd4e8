"""/v1/budgets (how budgets stand; set one) and /v1/webhooks/deliveries (the delivery log)."""

from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, Query

from gpupool.server.audit import AuditNoteDep
from gpupool.server.budget_schemas import BudgetIn, BudgetList, BudgetSetOut, DeliveryList
from gpupool.server.deps import PrincipalDep, RuntimeDep
from gpupool.server.routes.jobs import ERRORS

router = APIRouter(prefix="/v1", tags=["budgets"])


@router.get("/budgets", response_model=BudgetList, responses=ERRORS, name="budget.list")
def list_budgets(
    runtime: RuntimeDep, principal: PrincipalDep, team: str | None = None
) -> BudgetList:
    return runtime.budgets.show(principal, team)


@router.put(
    "/budgets/{team}/{name}", response_model=BudgetSetOut, responses=ERRORS, name="budget.set"
)
def set_budget(
    team: str,
    name: str,
    body: BudgetIn,
    runtime: RuntimeDep,
    principal: PrincipalDep,
    note: AuditNoteDep,
) -> BudgetSetOut:
    note.team = team
    out = runtime.budgets.set(principal, team, name, body)
    note.target = f"{team}/{name}: version {out.version}" + ("" if out.applied else " (no change)")
    return out


@router.get(
    "/webhooks/deliveries",
    response_model=DeliveryList,
    responses=ERRORS,
    name="webhook.deliveries",
)
def list_deliveries(
    runtime: RuntimeDep,
    principal: PrincipalDep,
    webhook: str | None = None,
    limit: Annotated[int, Query(ge=1, le=500)] = 50,
    before_id: Annotated[int | None, Query(ge=1)] = None,
) -> DeliveryList:
    return runtime.budgets.deliveries(principal, limit, webhook, before_id)
