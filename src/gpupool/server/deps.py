"""Request dependencies: the runtime and the authenticated principal."""

from __future__ import annotations

from typing import Annotated

from fastapi import Depends, Request

from gpupool.auth.principal import Principal, principal_for
from gpupool.auth.tokens import verify_token
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
    with runtime.sessions() as session:
        row = verify_token(session, bearer.strip(), runtime.clock.now())
    config = runtime.config
    if row.user not in config.users:
        raise Unauthenticated(f"user {row.user!r} no longer exists in the configuration")
    principal = principal_for(config, row.user, row.id)
    request.state.principal = principal  # the audit trail names who made a mutation
    return principal


RuntimeDep = Annotated[Runtime, Depends(get_runtime)]
PrincipalDep = Annotated[Principal, Depends(get_principal)]
