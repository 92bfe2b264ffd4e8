"""Liveness and readiness; no token needed."""

from __future__ import annotations

from fastapi import APIRouter
from fastapi.responses import JSONResponse

from gpupool.server.deps import RuntimeDep
from gpupool.state.db import ping

router = APIRouter(tags=["health"])


@router.get("/healthz")
def healthz() -> dict[str, str]:
    return {"status": "ok"}


@router.get("/readyz")
def readyz(runtime: RuntimeDep) -> JSONResponse:
    try:
        ping(runtime.engine)
    except Exception:
        return JSONResponse({"status": "unavailable", "store": "unreachable"}, status_code=503)
    return JSONResponse({"status": "ok", "store": "ok"})
