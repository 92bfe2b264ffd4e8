"""/v1/teams, /v1/pools, /v1/whoami."""

from __future__ import annotations

from fastapi import APIRouter

from gpupool.server.deps import PrincipalDep, RuntimeDep
from gpupool.server.routes.jobs import ERRORS
from gpupool.server.schemas import PoolList, TeamList, TeamOut, WhoAmI

router = APIRouter(prefix="/v1", tags=["cluster"])


@router.get("/teams", response_model=TeamList, responses=ERRORS)
def list_teams(runtime: RuntimeDep, principal: PrincipalDep) -> TeamList:
    return runtime.teams.list(principal)


@router.get("/teams/{team}", response_model=TeamOut, responses=ERRORS)
def get_team(team: str, runtime: RuntimeDep, principal: PrincipalDep) -> TeamOut:
    return runtime.teams.get(principal, team)


@router.get("/pools", response_model=PoolList, responses=ERRORS)
def list_pools(runtime: RuntimeDep, principal: PrincipalDep) -> PoolList:
    return runtime.teams.pools(principal)


@router.get("/whoami", response_model=WhoAmI, responses=ERRORS)
def whoami(principal: PrincipalDep) -> WhoAmI:
    return WhoAmI(
        user=principal.user,
        platform_admin=principal.platform_admin,
        teams=dict(principal.roles),
        auditor=principal.auditor,
    )
