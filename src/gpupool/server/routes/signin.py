"""/v1/auth/config: how a user signs in here (no token needed; it is what gets one).

``gpupool login`` reads it to run the identity provider's device flow without being told the
issuer or client: the issuer this server trusts, the audience its tokens must carry, the public
client the CLI signs in as, and the scope to ask for. Every field is ``null`` when the server
accepts API tokens only. It carries nothing secret: a public client has no secret.
"""

from __future__ import annotations

from fastapi import APIRouter
from pydantic import BaseModel

from gpupool.server.deps import RuntimeDep

router = APIRouter(prefix="/v1/auth", tags=["auth"])


class SignInConfig(BaseModel):
    issuer: str | None = None
    audience: str | None = None
    client_id: str | None = None
    scope: str | None = None


@router.get("/config", response_model=SignInConfig, name="auth.config")
def sign_in_config(runtime: RuntimeDep) -> SignInConfig:
    """The identity provider `gpupool login` signs in with; all null without one."""
    oidc = runtime.settings.oidc
    if oidc is None:
        return SignInConfig()
    return SignInConfig(
        issuer=oidc.issuer, audience=oidc.audience, client_id=oidc.client_id, scope=oidc.cli_scope
    )
