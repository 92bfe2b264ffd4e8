"""Self-service API tokens: a user mints, lists and revokes their own (T1).

A token minted here is the caller's: it carries no roles of its own (those come from the
configuration at each request) and always expires (``ttl_days``, at most a year). A user
holds at most ``MAX_ACTIVE`` tokens that are neither revoked nor expired, so a script in a
loop cannot fill the store. A platform admin may list and revoke anyone's; anyone else
sees only their own, and another user's token id is answered as unknown (its existence
does not leak). Operators still mint tokens for others with ``gpupool token create USER``
on the store.
"""

from __future__ import annotations

from datetime import timedelta

from gpupool.auth.principal import Principal
from gpupool.auth.tokens import create_token, revoke_token
from gpupool.controller.clock import Clock
from gpupool.core.errors import Conflict, Forbidden, NotFound
from gpupool.core.tokens import token_id_of
from gpupool.server.token_schemas import TokenCreate, TokenCreated, TokenList, TokenOut
from gpupool.state import tokens
from gpupool.state.db import SessionFactory
from gpupool.state.models import TokenRow

MAX_ACTIVE = 50
MAX_LISTED = 500


def token_out(row: TokenRow) -> TokenOut:
    return TokenOut(
        id=row.id,
        user=row.user,
        description=row.description,
        created_at=row.created_at,
        expires_at=row.expires_at,
        revoked_at=row.revoked_at,
    )


class TokenService:
    def __init__(self, sessions: SessionFactory, clock: Clock) -> None:
        self._sessions = sessions
        self._clock = clock

    def create(self, principal: Principal, body: TokenCreate) -> TokenCreated:
        now = self._clock.now()
        with self._sessions.begin() as session:
            if tokens.count_active(session, principal.user, now) >= MAX_ACTIVE:
                raise Conflict(
                    f"user {principal.user!r} already has {MAX_ACTIVE} active API tokens: "
                    "revoke some (gpupool token list, gpupool token revoke) before creating more"
                )
            issued = create_token(
                session,
                principal.user,
                now,
                ttl=timedelta(days=body.ttl_days),
                description=body.description,
            )
            row = tokens.get(session, issued.id)
            assert row is not None
            out = token_out(row)
        return TokenCreated(**out.model_dump(), token=issued.secret)

    def list(self, principal: Principal, user: str | None) -> TokenList:
        """The caller's tokens, newest first; a platform admin: ``user``'s, or everyone's."""
        if user is not None and user != principal.user and not principal.platform_admin:
            raise Forbidden(f"user {principal.user!r} may list only their own API tokens")
        owner = principal.user if not principal.platform_admin else user
        with self._sessions() as session:
            rows = tokens.listed(session, owner, MAX_LISTED)
        return TokenList(items=[token_out(r) for r in rows])

    def revoke(self, principal: Principal, token: str) -> TokenOut:
        token_id = token_id_of(token)
        now = self._clock.now()
        with self._sessions.begin() as session:
            row = tokens.get(session, token_id)
            if row is None or (row.user != principal.user and not principal.platform_admin):
                raise NotFound(f"no API token with id {token_id!r} among yours")
            revoke_token(session, token_id, now)
            return token_out(row)
