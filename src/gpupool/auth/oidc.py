"""OIDC bearer JWTs (T2): checked against the issuer's published keys (JWKS).

A token is accepted only when all of these hold: its header names an algorithm of the
allow-list (asymmetric only: ``none`` and HMAC are refused whatever the settings say, since
an HMAC "key" from a JWKS is public); its signature verifies with a key of the issuer's
JWKS matching its ``kid``; ``iss`` is the configured issuer; ``aud`` contains the configured
audience; ``exp`` is in the future (``nbf``/``iat`` are honoured when present). Keys are
fetched once and cached; an unknown ``kid`` triggers one refetch, so key rotation works.

Errors never repeat the token or its claims' values beyond the issuer and audience names.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any, Protocol

import httpx
import jwt

from gpupool.auth.posix import ClaimNames, PosixId, from_claims
from gpupool.config import OidcSettings
from gpupool.core.errors import Unauthenticated, Unavailable

LEEWAY_S = 30  # clock skew tolerated between the identity provider and this server
_DISCOVERY = "/.well-known/openid-configuration"


@dataclass(frozen=True)
class OidcIdentity:
    user: str
    groups: frozenset[str]
    token_id: str  # "jwt:<jti>" or "jwt": for the audit trail, never the token itself
    posix: PosixId | None = None  # from the claims GPUPOOL_OIDC_UID_CLAIM ... name, if any
    expires: int | None = None  # the token's exp (unix seconds)


class SigningKeys(Protocol):
    def get_signing_key_from_jwt(self, token: str) -> jwt.PyJWK: ...


def looks_like_jwt(bearer: str) -> bool:
    return bearer.count(".") == 2 and not bearer.startswith("gpt_")


def fetch_json(url: str) -> dict[str, Any]:
    response = httpx.get(url, timeout=10, follow_redirects=False)
    response.raise_for_status()
    body = response.json()
    if not isinstance(body, dict):
        raise ValueError(f"{url} did not answer a JSON object")
    return body


class OidcValidator:
    def __init__(
        self,
        settings: OidcSettings,
        keys: SigningKeys | None = None,
        fetch: Callable[[str], dict[str, Any]] = fetch_json,
    ) -> None:
        self._settings = settings
        self._algorithms = [a for a in settings.algorithms if _asymmetric(a)]
        self._keys = keys
        self._fetch = fetch
        self._lock = threading.Lock()

    def validate(self, token: str) -> OidcIdentity:
        """The identity in ``token``; ``Unauthenticated`` saying why when it is not valid."""
        s = self._settings
        try:
            header = jwt.get_unverified_header(token)
        except jwt.PyJWTError as exc:
            raise Unauthenticated("invalid bearer token: not a well-formed JWT") from exc
        alg = header.get("alg")
        if alg not in self._algorithms:
            allowed = ", ".join(self._algorithms)
            raise Unauthenticated(
                f"OIDC token signed with algorithm {str(alg)[:20]!r}, which is not accepted; "
                f"accepted: {allowed}"
            )
        key = self._signing_key(token)
        try:
            claims: dict[str, Any] = jwt.decode(
                token,
                key.key,
                algorithms=self._algorithms,
                audience=s.audience,
                issuer=s.issuer,
                leeway=LEEWAY_S,
                options={"require": ["exp", "iss", "aud"]},
            )
        except jwt.ExpiredSignatureError as exc:
            raise Unauthenticated("the OIDC token has expired; sign in again") from exc
        except jwt.InvalidAudienceError as exc:
            raise Unauthenticated(
                f"the OIDC token is not meant for this server: its audience is not "
                f"{s.audience!r}; ask the identity provider for a token with that audience"
            ) from exc
        except jwt.InvalidIssuerError as exc:
            raise Unauthenticated(
                f"the OIDC token was not issued by {s.issuer!r}, the issuer this server trusts"
            ) from exc
        except jwt.MissingRequiredClaimError as exc:
            raise Unauthenticated(f"the OIDC token has no {exc.claim!r} claim") from exc
        except jwt.PyJWTError as exc:
            raise Unauthenticated(
                f"invalid OIDC token: {type(exc).__name__.removesuffix('Error')}"
            ) from exc
        return OidcIdentity(
            user=self._user(claims),
            groups=_groups(claims.get(s.groups_claim)),
            token_id=f"jwt:{str(claims['jti'])[:32]}" if claims.get("jti") else "jwt",
            posix=from_claims(claims, ClaimNames(s.uid_claim, s.gid_claim, s.groups_gid_claim)),
            expires=int(claims["exp"]) if isinstance(claims.get("exp"), int | float) else None,
        )

    def _user(self, claims: dict[str, Any]) -> str:
        for claim in (self._settings.username_claim, "sub"):
            value = claims.get(claim)
            if isinstance(value, str) and value.strip():
                return value.strip()
        raise Unauthenticated(
            f"the OIDC token names no user: it has neither a {self._settings.username_claim!r} "
            "nor a 'sub' claim (set GPUPOOL_OIDC_USERNAME_CLAIM to the claim your provider uses)"
        )

    def _signing_key(self, token: str) -> jwt.PyJWK:
        try:
            return self._jwks().get_signing_key_from_jwt(token)
        except jwt.PyJWKClientConnectionError as exc:
            raise Unavailable(
                "the identity provider's keys (JWKS) cannot be fetched now; retry later"
            ) from exc
        except jwt.PyJWTError as exc:
            raise Unauthenticated(
                "the OIDC token's signing key is not one the issuer publishes"
            ) from exc

    def _jwks(self) -> SigningKeys:
        with self._lock:
            if self._keys is None:
                url = self._settings.jwks_url or self._discover_jwks_url()
                self._keys = jwt.PyJWKClient(url, cache_keys=True, lifespan=300, timeout=10)
            return self._keys

    def _discover_jwks_url(self) -> str:
        issuer = self._settings.issuer
        try:
            document = self._fetch(issuer + _DISCOVERY)
        except (httpx.HTTPError, ValueError) as exc:
            raise Unavailable(
                f"the identity provider at {issuer} cannot be reached for its discovery "
                "document now; retry later (or set GPUPOOL_OIDC_JWKS_URL)"
            ) from exc
        if str(document.get("issuer", "")).rstrip("/") != issuer:
            raise Unavailable(
                f"the discovery document at {issuer} names another issuer; set "
                "GPUPOOL_OIDC_ISSUER to exactly the issuer its tokens carry"
            )
        url = document.get("jwks_uri")
        if not isinstance(url, str) or not url:
            raise Unavailable(f"the discovery document at {issuer} has no jwks_uri")
        return url


def _asymmetric(alg: str) -> bool:
    return alg.upper() != "NONE" and not alg.upper().startswith("HS")


def _groups(value: object) -> frozenset[str]:
    """The groups claim as a set: a list of names, or one space-separated string."""
    if isinstance(value, str):
        return frozenset(value.split())
    if isinstance(value, Sequence):
        return frozenset(str(g) for g in value if isinstance(g, str | int))
    return frozenset()
