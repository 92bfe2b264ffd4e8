"""Who is behind a bearer token: a gpupool API token or an OIDC JWT, and their groups.

``gpt_...`` bearers are API tokens checked against the store; anything shaped like a JWT
is an OIDC token when OIDC is configured. Either way the user's groups (the token's groups
claim, plus the directory file's groups) are resolved on every request and turned into
team roles by :func:`principal_for`, so membership changes apply at the next request; so is
the POSIX identity of a user not under ``users:`` (``auth.posix``).

Failure messages say what is wrong and how to fix it, and never repeat the bearer.
"""

from __future__ import annotations

from collections.abc import Callable

from gpupool.auth.directory import Directory
from gpupool.auth.oidc import OidcIdentity, OidcValidator, looks_like_jwt
from gpupool.auth.posix import PosixId
from gpupool.auth.principal import Principal, principal_for
from gpupool.auth.tokens import PREFIX, verify_cached_token, verify_token, verify_token_id
from gpupool.controller.clock import Clock
from gpupool.core.errors import Unauthenticated
from gpupool.spec.models import ClusterConfig
from gpupool.state.db import SessionFactory


class Authenticator:
    def __init__(
        self,
        sessions: SessionFactory,
        clock: Clock,
        config: Callable[[], ClusterConfig],
        oidc: OidcValidator | None = None,
        directory: Directory | None = None,
    ) -> None:
        self._sessions = sessions
        self._clock = clock
        self._config = config
        self._oidc = oidc
        self._directory = directory

    def authenticate_cached(self, bearer: str) -> Principal | None:
        """:meth:`authenticate` when it needs no I/O but the directory file's ``stat`` (an
        API token whose row was read less than ``tokens.CACHE_S`` ago), else None: the
        event loop's fast path, which spares a request the hop to a worker thread."""
        if not bearer.startswith(PREFIX + "_") and looks_like_jwt(bearer):
            return None
        row = verify_cached_token(bearer, self._clock.now())
        if row is None:
            return None
        return self._principal(self._config(), row.user, row.id, frozenset(), True, None)

    def authenticate(self, bearer: str) -> Principal:
        config = self._config()
        if bearer.startswith(PREFIX + "_") or not looks_like_jwt(bearer):
            with self._sessions() as session:
                row = verify_token(session, bearer, self._clock.now())
            user, token_id, claimed, api_token = row.user, row.id, frozenset[str](), True
            claimed_posix = None
        elif self._oidc is None:
            raise Unauthenticated(
                "this server accepts gpupool API tokens (gpt_...) only: OIDC is not set up "
                "(GPUPOOL_OIDC_ISSUER)"
            )
        else:
            identity = self._oidc.validate(bearer)
            user, token_id, claimed = identity.user, identity.token_id, identity.groups
            api_token, claimed_posix = False, identity.posix
        return self._principal(config, user, token_id, claimed, api_token, claimed_posix)

    def oidc_identity(self, token: str) -> OidcIdentity:
        """Who an OIDC access token names (the dashboard's sign-in); refused as a bearer is."""
        if self._oidc is None:
            raise Unauthenticated("OIDC is not set up on this server (GPUPOOL_OIDC_ISSUER)")
        return self._oidc.validate(token)

    def for_session(self, kind: str, user: str, token_id: str, groups: frozenset[str]) -> Principal:
        """The principal of a dashboard session (``server.ui.sessions``): an API-token session
        is checked against its token's row on every request (revoked or expired: refused);
        an OIDC session keeps the groups its token carried when it was made."""
        config = self._config()
        if kind == "token":
            with self._sessions() as session:
                verify_token_id(session, token_id, user, self._clock.now())
            return self._principal(config, user, token_id, frozenset(), True, None)
        if kind == "oidc" and self._oidc is not None:
            return self._principal(config, user, token_id, groups, False, None)
        raise Unauthenticated("this session is no longer valid here; sign in again")

    def _principal(
        self,
        config: ClusterConfig,
        user: str,
        token_id: str,
        claimed: frozenset[str],
        api_token: bool,
        claimed_posix: PosixId | None,
    ) -> Principal:
        listed = self._directory.groups_of(user) if self._directory else frozenset[str]()
        if api_token and user not in config.users and not listed:
            # An API token of someone no longer in the configuration nor in any directory group.
            raise Unauthenticated(f"user {user!r} no longer exists in the configuration")
        # The POSIX identity of a user not under users: the directory's, else the token's.
        posix = self._directory.identity_of(user) if self._directory else None
        source = "directory"
        if posix is None:
            posix, source = claimed_posix, "token"
        return principal_for(config, user, token_id, claimed | listed, posix, source)
