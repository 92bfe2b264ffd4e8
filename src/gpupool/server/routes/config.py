"""/v1/config: the configuration in force, its versions, diff and apply (platform admins)."""

from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, Query

from gpupool.server.audit import AuditNoteDep
from gpupool.server.config_schemas import (
    ConfigApplyIn,
    ConfigApplyOut,
    ConfigDiffOut,
    ConfigIn,
    ConfigOut,
    ConfigVersionList,
)
from gpupool.server.deps import PrincipalDep, RuntimeDep
from gpupool.server.routes.jobs import ERRORS

router = APIRouter(prefix="/v1/config", tags=["config"])


@router.get("", response_model=ConfigOut, responses=ERRORS, name="config.get")
def get_config(runtime: RuntimeDep, principal: PrincipalDep) -> ConfigOut:
    return runtime.config_service.current(principal)


@router.get("/versions", response_model=ConfigVersionList, responses=ERRORS, name="config.versions")
def list_versions(
    runtime: RuntimeDep,
    principal: PrincipalDep,
    limit: Annotated[int, Query(ge=1, le=500)] = 50,
) -> ConfigVersionList:
    return runtime.config_service.versions(principal, limit)


@router.post("/diff", response_model=ConfigDiffOut, responses=ERRORS, name="config.diff")
def diff_config(body: ConfigIn, runtime: RuntimeDep, principal: PrincipalDep) -> ConfigDiffOut:
    return runtime.config_service.diff(principal, body.yaml, body.source)


@router.post("", response_model=ConfigApplyOut, responses=ERRORS, name="config.apply")
def apply_config(
    body: ConfigApplyIn, runtime: RuntimeDep, principal: PrincipalDep, note: AuditNoteDep
) -> ConfigApplyOut:
    note.target = f"base version {body.base_version}" + (" (force)" if body.force else "")
    out = runtime.config_service.apply(
        principal, body.yaml, body.source, body.base_version, body.force
    )
    note.target = (
        f"version {out.version}: {out.diff.summary}" + (" (force)" if body.force else "")
        if out.applied
        else f"version {out.version}: no changes"
    )
    return out
