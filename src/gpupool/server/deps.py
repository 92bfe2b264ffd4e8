"""Request dependencies: the runtime and the authenticated principal."""

from __future__ import annotations

from typing import Annotated

from fastapi import Depends, Request

from gpupool.auth.principal import Principal
from gpupool.core.errors import Unauthenticated
from gpupool.server.runtime import Runtime


async def get_runtime(request: Request) -> Runtime:
    # async: no I/O here, and a sync dependency would cost a thread hop per request.
    runtime: Runtime = request.app.state.runtime
    return runtime


def get_principal(request: Request, runtime: Annotated[Runtime, Depends(get_runtime)]) -> Principal:
    header = request.headers.get("authorization", "")
    scheme, _, bearer = header.partition(" ")
    if scheme.lower() != "bearer" or not bearer.strip():
        raise Unauthenticated("missing bearer token; pass 'Authorization: Bearer <token>'")
    principal = runtime.auth.authenticate(bearer.strip())
    request.state.principal = principal  # the audit trail names who made a mutation
    return principal


RuntimeDep = Annotated[Runtime, Depends(get_runtime)]
PrincipalDep = Annotated[Principal, Depends(get_principal)]
