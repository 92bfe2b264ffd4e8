"""API tokens: ``gpt_<id>_<secret>``; the store keeps only SHA-256 of the secret.

The id part is a lookup key (it may appear in audit records); the secret never leaves
the process that minted it except in the one response that hands it to the user.

A valid token's row is kept in memory for ``CACHE_S`` after it is read (the store is asked
once per token and window, not once per request). The secret, expiry and revocation are
still checked on every request against what was read, so a revocation made by another
process (``gpupool token revoke``, another server) stops the token within ``CACHE_S``
seconds; :func:`revoke_token` also forgets it in its own process.
"""

from __future__ import annotations

import hashlib
import hmac
import secrets
import time
from dataclasses import dataclass
from datetime import datetime, timedelta

from gpupool.core.errors import NotFound, Unauthenticated
from gpupool.core.tokens import PREFIX, token_id_of
from gpupool.state import tokens
from gpupool.state.db import Session
from gpupool.state.models import TokenRow

CACHE_S = 2.0  # the longest a token revoked elsewhere still works in this process
_CACHE_MAX = 10_000  # tokens kept at once; all are dropped when it is full


@dataclass(frozen=True, slots=True)
class _Cached:
    row: TokenRow  # detached copy: id, user, secret_hash, revoked_at, expires_at
    read_at: float  # monotonic


_cache: dict[str, _Cached] = {}


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
    token_id, secret = _parts(bearer)
    return _checked(_lookup(session, token_id), secret, now)


def verify_cached_token(bearer: str, now: datetime) -> TokenRow | None:
    """:func:`verify_token` without the store: the row if the token's row is in memory and
    the token is valid now, ``Unauthenticated`` if it is not, None if only the store can
    tell (nothing read within ``CACHE_S``). What an event loop may call without blocking."""
    token_id, secret = _parts(bearer)
    cached = _cache.get(token_id)
    if cached is None or time.monotonic() - cached.read_at >= CACHE_S:
        return None
    return _checked(cached.row, secret, now)


def _parts(bearer: str) -> tuple[str, str]:
    parts = bearer.split("_", 2)
    if len(parts) != 3 or parts[0] != PREFIX:
        raise Unauthenticated("invalid API token")
    return parts[1], parts[2]


def _checked(row: TokenRow | None, secret: str, now: datetime) -> TokenRow:
    if row is None or not hmac.compare_digest(row.secret_hash, _hash(secret)):
        raise Unauthenticated("invalid API token")
    if row.revoked_at is not None:
        raise Unauthenticated("this API token was revoked; create a new one")
    if row.expires_at is not None and row.expires_at <= now:
        raise Unauthenticated("this API token has expired; create a new one")
    return row


def verify_token_id(session: Session, token_id: str, user: str, now: datetime) -> TokenRow:
    """The row of the token ``token_id`` of ``user`` while it is still valid (a dashboard
    session keeps a token's id, never its secret); ``Unauthenticated`` otherwise."""
    row = _lookup(session, token_id)
    if row is None or row.user != user:
        raise Unauthenticated("the API token this session was made with no longer exists")
    if row.revoked_at is not None:
        raise Unauthenticated("the API token this session was made with was revoked")
    if row.expires_at is not None and row.expires_at <= now:
        raise Unauthenticated("the API token this session was made with has expired")
    return row


def _lookup(session: Session, token_id: str) -> TokenRow | None:
    """The token's row, from memory when read less than ``CACHE_S`` ago. Only rows of tokens
    not revoked are kept (a revoked one is read again, and refused, every time)."""
    at = time.monotonic()
    cached = _cache.get(token_id)
    if cached is not None and at - cached.read_at < CACHE_S:
        return cached.row
    row = tokens.get(session, token_id)
    if row is None or row.revoked_at is not None:
        _cache.pop(token_id, None)
        return row
    if len(_cache) >= _CACHE_MAX:
        _cache.clear()
    copy = TokenRow(
        id=row.id,
        user=row.user,
        secret_hash=row.secret_hash,
        description=row.description,
        created_at=row.created_at,
        expires_at=row.expires_at,
        revoked_at=None,
    )
    _cache[token_id] = _Cached(copy, at)
    return row


def revoke_token(session: Session, token: str, now: datetime) -> str:
    """Revoke the token that ``token`` names (see :func:`token_id_of`); returns its id."""
    token_id = token_id_of(token)
    row = tokens.get(session, token_id)
    if row is None:
        raise NotFound(f"no token with id {token_id!r}")
    if row.revoked_at is None:
        row.revoked_at = now
    _cache.pop(token_id, None)  # this process refuses it from now on
    return token_id


def has_tokens(session: Session) -> bool:
    return tokens.any_exist(session)
