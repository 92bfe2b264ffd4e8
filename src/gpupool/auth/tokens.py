"""API tokens: ``gpt_<id>_<secret>``; the store keeps only SHA-256 of the secret.

The id part is a lookup key (it may appear in audit records); the secret never leaves
the process that minted it except in the one response that hands it to the user.
"""

from __future__ import annotations

import hashlib
import hmac
import secrets
from dataclasses import dataclass
from datetime import datetime, timedelta

from gpupool.core.errors import NotFound, Unauthenticated
from gpupool.state import tokens
from gpupool.state.db import Session
from gpupool.state.models import TokenRow

PREFIX = "gpt"


@dataclass(frozen=True)
class IssuedToken:
    id: str
    user: str
    secret: str  # the full bearer token; show once, never log
    expires_at: datetime | None


def _hash(secret: str) -> str:
    return hashlib.sha256(secret.encode()).hexdigest()


def create_token(
    session: Session,
    user: str,
    now: datetime,
    *,
    ttl: timedelta | None = None,
    description: str = "",
) -> IssuedToken:
    token_id = secrets.token_hex(6)
    secret = secrets.token_urlsafe(32)
    expires_at = now + ttl if ttl else None
    tokens.add(
        session,
        TokenRow(
            id=token_id,
            user=user,
            secret_hash=_hash(secret),
            description=description,
            created_at=now,
            expires_at=expires_at,
        ),
    )
    return IssuedToken(token_id, user, f"{PREFIX}_{token_id}_{secret}", expires_at)


def verify_token(session: Session, bearer: str, now: datetime) -> TokenRow:
    """The token's row if ``bearer`` is valid now; ``Unauthenticated`` otherwise.

    The message is the same for every failure except expiry and revocation, so a caller
    cannot probe which token ids exist.
    """
    parts = bearer.split("_", 2)
    if len(parts) != 3 or parts[0] != PREFIX:
        raise Unauthenticated("invalid API token")
    row = tokens.get(session, parts[1])
    if row is None or not hmac.compare_digest(row.secret_hash, _hash(parts[2])):
        raise Unauthenticated("invalid API token")
    if row.revoked_at is not None:
        raise Unauthenticated("this API token was revoked; create a new one")
    if row.expires_at is not None and row.expires_at <= now:
        raise Unauthenticated("this API token has expired; create a new one")
    return row


def revoke_token(session: Session, token_id: str, now: datetime) -> None:
    row = tokens.get(session, token_id)
    if row is None:
        raise NotFound(f"no token with id {token_id!r}")
    if row.revoked_at is None:
        row.revoked_at = now


def has_tokens(session: Session) -> bool:
    return tokens.any_exist(session)
