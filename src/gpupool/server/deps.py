"""Request dependencies: the runtime and the authenticated principal."""

from __future__ import annotations

from typing import Annotated

from fastapi import Depends, Request, Security
from fastapi.security import HTTPAuthorizationCredentials, HTTPBearer
from starlette.concurrency import run_in_threadpool

from gpupool.auth.principal import Principal
from gpupool.core.errors import Unauthenticated
from gpupool.server.runtime import Runtime


async def get_runtime(request: Request) -> Runtime:
    # async: no I/O here, and a sync dependency would cost a thread hop per request.
    runtime: Runtime = request.app.state.runtime
    return runtime


# Declared in the OpenAPI document, so the docs pages offer "Authorize" and send the token.
# auto_error=False: a missing token is refused below with gpupool's own error body.
_BEARER = HTTPBearer(
    auto_error=False,
    scheme_name="bearer",
    description="A gpupool API token (gpt_..., from `gpupool token create`) or an OIDC "
    "access token of the configured identity provider.",
)


async def get_principal(
    request: Request,
    runtime: Annotated[Runtime, Depends(get_runtime)],
    credentials: Annotated[HTTPAuthorizationCredentials | None, Security(_BEARER)],
) -> Principal:
    bearer = credentials.credentials.strip() if credentials is not None else ""
    if not bearer:
        raise Unauthenticated("missing bearer token; pass 'Authorization: Bearer <token>'")
    # A token read moments ago is checked here; only one the store must be asked about (or
    # an OIDC token, whose keys may have to be fetched) costs a hop to a worker thread.
    principal = runtime.auth.authenticate_cached(bearer)
    if principal is None:
        principal = await run_in_threadpool(runtime.auth.authenticate, bearer)
    request.state.principal = principal  # the audit trail names who made a mutation
    return principal


RuntimeDep = Annotated[Runtime, Depends(get_runtime)]
PrincipalDep = Annotated[Principal, Depends(get_principal)]
