"""Liveness and readiness; no token needed.

``/healthz`` also says what this process is: its role (``all``, ``api``, ``controller``), and,
on PostgreSQL, the current controller lease (its holder, epoch and age, by the database's
clock); a controller adds whether it leads. It carries no secret and no job data.
"""

from __future__ import annotations

from typing import Any

from fastapi import APIRouter
from fastapi.responses import JSONResponse

from gpupool.controller.leader import describe
from gpupool.server.deps import RuntimeDep
from gpupool.server.runtime import is_postgres
from gpupool.state.db import ping

router = APIRouter(tags=["health"])


@router.get("/healthz")
def healthz(runtime: RuntimeDep) -> dict[str, Any]:
    role = runtime.settings.role
    leadership = runtime.controller.leader if role != "api" else None
    detail = describe(role, leadership, runtime.sessions, is_postgres(runtime.settings))
    return {"status": "ok", **detail}


@router.get("/readyz")
def readyz(runtime: RuntimeDep) -> JSONResponse:
    try:
        ping(runtime.engine)
    except Exception:
        return JSONResponse({"status": "unavailable", "store": "unreachable"}, status_code=503)
    return JSONResponse({"status": "ok", "store": "ok"})
