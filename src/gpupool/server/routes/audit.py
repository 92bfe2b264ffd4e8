"""/v1/audit: the audit trail, newest first (platform admins; team admins: their teams)."""

from __future__ import annotations

from datetime import datetime
from typing import Annotated

from fastapi import APIRouter, Query

from gpupool.server.deps import PrincipalDep, RuntimeDep
from gpupool.server.routes.jobs import ERRORS
from gpupool.server.schemas import AuditPage
from gpupool.server.services.audit import AuditFilter

router = APIRouter(prefix="/v1", tags=["audit"])


@router.get("/audit", response_model=AuditPage, responses=ERRORS, name="audit.list")
def list_audit(
    runtime: RuntimeDep,
    principal: PrincipalDep,
    team: Annotated[str | None, Query(max_length=100)] = None,
    actor: Annotated[str | None, Query(max_length=200)] = None,
    action: Annotated[str | None, Query(max_length=100)] = None,
    outcome: Annotated[str | None, Query(max_length=40)] = None,
    since: datetime | None = None,
    until: datetime | None = None,
    limit: Annotated[int, Query(ge=1, le=500)] = 50,
    cursor: Annotated[str | None, Query(max_length=200)] = None,
) -> AuditPage:
    where = AuditFilter(team, actor, action, outcome, since, until)
    return runtime.audit.list(principal, where, limit, cursor)
