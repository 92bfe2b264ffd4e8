"""The dashboard as an OIDC client: authorization code with PKCE (RFC 7636, S256).

The browser is sent to the provider's authorization endpoint with a fresh ``state`` and the
S256 challenge of a fresh verifier; both stay in a signed HttpOnly cookie of the browser
(``sessions.SessionCodec.oidc_flow``), never in a page or a URL of ours. The callback checks
``state``, then this server exchanges the code with the verifier at the token endpoint (a
public client: no secret) and checks the access token as any bearer is checked
(``auth.oidc``): issuer, audience, signature, expiry.

Errors of the provider are translated here (one place): it cannot be reached → ``Unavailable``
(retry later); it refuses the code → ``Unauthenticated`` (sign in again). Messages never repeat
a code, verifier or token.
"""

from __future__ import annotations

import base64
import hashlib
import secrets
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any
from urllib.parse import urlencode

import httpx

from gpupool.config import OidcSettings
from gpupool.core.errors import Unauthenticated, Unavailable

SCOPE = "openid profile"
_DISCOVERY = "/.well-known/openid-configuration"


def challenge_of(verifier: str) -> str:
    digest = hashlib.sha256(verifier.encode("ascii")).digest()
    return base64.urlsafe_b64encode(digest).rstrip(b"=").decode()


def new_verifier() -> str:
    return secrets.token_urlsafe(48)  # 64 characters of [A-Za-z0-9_-], within RFC 7636's 43-128


@contextmanager
def map_oidc_errors(issuer: str) -> Iterator[None]:
    """The provider's failures as gpupool errors: unreachable is retryable, a refusal is not."""
    try:
        yield
    except httpx.HTTPStatusError as exc:
        if exc.response.status_code >= 500:
            raise Unavailable(
                f"the identity provider at {issuer} answered {exc.response.status_code}; "
                "retry later"
            ) from exc
        raise Unauthenticated(
            f"the identity provider refused the sign-in ({exc.response.status_code}); sign in again"
        ) from exc
    except (httpx.HTTPError, ValueError) as exc:
        raise Unavailable(
            f"the identity provider at {issuer} cannot be reached now ({type(exc).__name__}); "
            "retry later"
        ) from exc


class OidcWebClient:
    def __init__(
        self, settings: OidcSettings, post: Callable[..., httpx.Response] = httpx.post
    ) -> None:
        self._settings = settings
        self._post = post
        self._document: dict[str, Any] | None = None
        self._lock = threading.Lock()

    @property
    def client_id(self) -> str:
        if not self._settings.client_id:
            raise Unavailable(
                "OIDC sign-in to the dashboard needs GPUPOOL_OIDC_CLIENT_ID: the public client "
                "registered at the identity provider for gpupool"
            )
        return self._settings.client_id

    def _endpoints(self) -> dict[str, Any]:
        with self._lock:
            if self._document is None:
                issuer = self._settings.issuer
                with map_oidc_errors(issuer):
                    answer = httpx.get(issuer + _DISCOVERY, timeout=10, follow_redirects=False)
                    answer.raise_for_status()
                    document = answer.json()
                if not isinstance(document, dict) or not document.get("authorization_endpoint"):
                    raise Unavailable(
                        f"the discovery document at {issuer} names no authorization_endpoint"
                    )
                self._document = document
            return self._document

    def authorization_url(self, redirect_uri: str, state: str, verifier: str) -> str:
        query = urlencode(
            {
                "response_type": "code",
                "client_id": self.client_id,
                "redirect_uri": redirect_uri,
                "scope": SCOPE,
                "state": state,
                "code_challenge": challenge_of(verifier),
                "code_challenge_method": "S256",
            }
        )
        return f"{self._endpoints()['authorization_endpoint']}?{query}"

    def exchange(self, code: str, verifier: str, redirect_uri: str) -> str:
        """The access token the provider gives for ``code`` and its verifier."""
        endpoint = self._endpoints().get("token_endpoint")
        if not endpoint:
            raise Unavailable(
                f"the discovery document at {self._settings.issuer} has no token_endpoint"
            )
        with map_oidc_errors(self._settings.issuer):
            answer = self._post(
                endpoint,
                data={
                    "grant_type": "authorization_code",
                    "code": code,
                    "redirect_uri": redirect_uri,
                    "client_id": self.client_id,
                    "code_verifier": verifier,
                },
                timeout=10,
            )
            answer.raise_for_status()
            body = answer.json()
        token = body.get("access_token") if isinstance(body, dict) else None
        if not isinstance(token, str) or not token:
            raise Unauthenticated("the identity provider gave no access token; sign in again")
        return token
