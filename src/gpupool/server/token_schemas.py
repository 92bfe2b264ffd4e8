"""Wire models of ``/v1/tokens``: a user's own API tokens (self-service)."""

from __future__ import annotations

from datetime import datetime

from pydantic import BaseModel, Field

from gpupool.server.schemas import _Write

DEFAULT_TTL_DAYS = 90.0
MAX_TTL_DAYS = 365.0


class TokenCreate(_Write):
    description: str = Field(default="", max_length=200, description="Why the token exists.")
    ttl_days: float = Field(
        default=DEFAULT_TTL_DAYS,
        gt=0,
        le=MAX_TTL_DAYS,
        description="Days until it expires; a token made through the API always expires.",
    )


class TokenOut(BaseModel):
    id: str
    user: str
    description: str
    created_at: datetime
    expires_at: datetime | None
    revoked_at: datetime | None


class TokenCreated(TokenOut):
    token: str = Field(description="The bearer token, shown this once: keep it safe.")


class TokenList(BaseModel):
    items: list[TokenOut]
