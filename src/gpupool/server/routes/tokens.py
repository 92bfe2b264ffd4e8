"""/v1/tokens: a user's own API tokens (create, list, revoke)."""

from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, Path, Query

from gpupool.server.deps import PrincipalDep, RuntimeDep
from gpupool.server.routes.jobs import ERRORS
from gpupool.server.token_schemas import TokenCreate, TokenCreated, TokenList, TokenOut

router = APIRouter(prefix="/v1/tokens", tags=["tokens"])


@router.post(
    "", status_code=201, response_model=TokenCreated, responses=ERRORS, name="token.create"
)
def create_token(runtime: RuntimeDep, principal: PrincipalDep, body: TokenCreate) -> TokenCreated:
    """Mint an API token for the caller; the response is the only time it is shown."""
    return runtime.tokens.create(principal, body)


@router.get("", response_model=TokenList, responses=ERRORS, name="token.list")
def list_tokens(
    runtime: RuntimeDep,
    principal: PrincipalDep,
    user: Annotated[str | None, Query(max_length=100)] = None,
) -> TokenList:
    """The caller's tokens (never their secrets); a platform admin may ask for any user's."""
    return runtime.tokens.list(principal, user)


@router.delete("/{token_id}", response_model=TokenOut, responses=ERRORS, name="token.revoke")
def revoke_token(
    runtime: RuntimeDep,
    principal: PrincipalDep,
    token_id: Annotated[str, Path(max_length=40, pattern=r"^[A-Za-z0-9]+$")],
) -> TokenOut:
    """Revoke one of the caller's tokens at once (a platform admin: anyone's)."""
    return runtime.tokens.revoke(principal, token_id)
