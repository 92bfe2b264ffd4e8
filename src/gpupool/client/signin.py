"""Signing in through the identity provider: the OAuth 2.0 Device Authorization Grant (RFC 8628).

``gpupool login`` runs :func:`start` then :func:`poll`: the provider hands out a device code
and a short user code; the user opens the verification page in any browser, signs in there and
approves; meanwhile the CLI polls the token endpoint, no faster than the provider's
``interval`` (raised by 5 s at each ``slow_down``, as §3.5 asks), until the tokens come, the
user denies (``access_denied``) or the code expires (``expired_token``, or its ``expires_in``
passed). The provider's endpoints come from its discovery document, whose issuer must be the
one asked for.

:func:`stored_token` is what the SDK sends when no token is given: the stored credential of the
server, renewed through the provider's refresh token once it has expired (the renewed tokens
are stored again, the rotated refresh token included).

The decision what to do after each answer of the token endpoint is :func:`after_poll`, pure;
everything else here is the HTTP around it. No token is ever part of a message.
"""

from __future__ import annotations

import base64
import binascii
import json
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx

from gpupool.client import credentials, wire
from gpupool.client.credentials import Credential
from gpupool.client.errors import Unauthenticated, map_transport_errors, raise_for_response

DEVICE_GRANT = "urn:ietf:params:oauth:grant-type:device_code"
# What to ask for when the server does not say (the server's GPUPOOL_OIDC_CLI_SCOPE default):
# offline_access asks for a refresh token, so a signed-in user is not asked again every hour.
DEFAULT_SCOPE = "openid profile offline_access"
DEFAULT_INTERVAL_S = 5.0  # RFC 8628 §3.2, when the provider does not say
SLOW_DOWN_S = 5.0  # RFC 8628 §3.5
TIMEOUT_S = 10.0
AGAIN = "run `gpupool login` again"


class SignInFailed(Unauthenticated):
    """Signing in did not give a token: refused, expired, or the provider could not be used."""

    code = "sign_in_failed"


@dataclass(frozen=True)
class SignInConfig:
    """What a server says about signing in to it (``GET /v1/auth/config``)."""

    issuer: str | None = None
    audience: str | None = None
    client_id: str | None = None
    scope: str | None = None


@dataclass(frozen=True)
class Provider:
    issuer: str
    device_authorization_endpoint: str | None
    token_endpoint: str


@dataclass(frozen=True)
class DeviceCode:
    device_code: str = field(repr=False)
    user_code: str
    verification_uri: str
    verification_uri_complete: str | None
    expires_in: float
    interval: float


@dataclass(frozen=True)
class Tokens:
    access_token: str = field(repr=False)
    refresh_token: str | None = field(default=None, repr=False)
    expires_at: float | None = None


def server_config(http: httpx.Client, server_url: str) -> SignInConfig:
    """The identity provider ``server_url`` trusts, and the client to sign in to it as."""
    with map_transport_errors(server_url):
        response = http.get(f"{server_url}{wire.API}/auth/config")
    raise_for_response(response)
    body = _body(response) or {}
    fields = ("issuer", "audience", "client_id", "scope")
    return SignInConfig(**{k: v for k in fields if isinstance(v := body.get(k), str) and v})


def discover(http: httpx.Client, issuer: str) -> Provider:
    """The provider's endpoints, from ``<issuer>/.well-known/openid-configuration``."""
    issuer = issuer.rstrip("/")
    document = _json(http, "GET", f"{issuer}/.well-known/openid-configuration", issuer)
    if str(document.get("issuer", "")).rstrip("/") != issuer:
        raise SignInFailed(
            f"the discovery document at {issuer} names another issuer "
            f"({str(document.get('issuer'))[:200]!r}); use exactly the issuer its tokens carry"
        )
    token_endpoint = document.get("token_endpoint")
    if not isinstance(token_endpoint, str) or not token_endpoint:
        raise SignInFailed(f"the identity provider at {issuer} names no token_endpoint")
    device = document.get("device_authorization_endpoint")
    return Provider(issuer, device if isinstance(device, str) and device else None, token_endpoint)


def start(http: httpx.Client, provider: Provider, client_id: str, scope: str) -> DeviceCode:
    """Ask the provider for a device code and the user code to show (RFC 8628 §3.1)."""
    if provider.device_authorization_endpoint is None:
        raise SignInFailed(
            f"the identity provider at {provider.issuer} does not offer the device flow (its "
            "discovery document has no device_authorization_endpoint); an operator must enable "
            f"the device authorization grant for the client {client_id!r}"
        )
    form = {"client_id": client_id, "scope": scope}
    answer = _json(http, "POST", provider.device_authorization_endpoint, provider.issuer, form)
    try:
        return DeviceCode(
            device_code=str(answer["device_code"]),
            user_code=str(answer["user_code"]),
            # Some providers spell it verification_url (an early draft's name).
            verification_uri=str(answer.get("verification_uri") or answer["verification_url"]),
            verification_uri_complete=answer.get("verification_uri_complete") or None,
            expires_in=float(answer["expires_in"]),
            interval=float(answer.get("interval") or DEFAULT_INTERVAL_S),
        )
    except (KeyError, TypeError, ValueError) as exc:
        raise SignInFailed(
            f"the identity provider at {provider.issuer} answered the device authorization "
            f"request without {exc}"
        ) from exc


def after_poll(error: str, description: str, interval: float) -> float:
    """The seconds to wait before the next poll after the token endpoint answered ``error``;
    ``SignInFailed`` when the sign-in is over."""
    if error == "authorization_pending":
        return interval
    if error == "slow_down":
        return interval + SLOW_DOWN_S
    if error == "access_denied":
        raise SignInFailed(f"the sign-in was denied at the identity provider; {AGAIN} to retry")
    if error == "expired_token":
        raise SignInFailed(f"the code expired before it was approved; {AGAIN}")
    why = f" ({description[:200]})" if description else ""
    raise SignInFailed(f"the identity provider refused the sign-in: {error[:100]}{why}")


def poll(
    http: httpx.Client,
    provider: Provider,
    client_id: str,
    code: DeviceCode,
    sleep: Callable[[float], None] = time.sleep,
    clock: Callable[[], float] = time.monotonic,
) -> Tokens:
    """Poll the token endpoint until the user has answered (RFC 8628 §3.4, §3.5)."""
    deadline = clock() + code.expires_in
    interval = code.interval
    form = {"grant_type": DEVICE_GRANT, "device_code": code.device_code, "client_id": client_id}
    while True:
        if clock() + interval > deadline:
            raise SignInFailed(f"the code expired before it was approved; {AGAIN}")
        sleep(interval)
        response = _post(http, provider.token_endpoint, provider.issuer, form)
        if response.status_code == 200:
            return _tokens(response, provider.issuer)
        error, description = _oauth_error(response, provider.issuer)
        interval = after_poll(error, description, interval)


def refresh(http: httpx.Client, credential: Credential) -> Tokens:
    """New tokens for an expired credential, through its refresh token."""
    if credential.refresh_token is None:
        raise SignInFailed(
            f"your sign-in to {credential.server_url} has expired and the identity provider "
            f"gave no refresh token; {AGAIN}"
        )
    form = {
        "grant_type": "refresh_token",
        "refresh_token": credential.refresh_token,
        "client_id": credential.client_id,
    }
    response = _post(http, credential.token_endpoint, credential.issuer, form)
    if response.status_code != 200:
        error, _ = _oauth_error(response, credential.issuer)
        raise SignInFailed(
            f"your sign-in to {credential.server_url} has expired and could not be renewed "
            f"(the identity provider answered {error[:100]}); {AGAIN}"
        )
    tokens = _tokens(response, credential.issuer)
    # A provider that does not rotate refresh tokens answers without one: keep the old.
    return Tokens(
        tokens.access_token, tokens.refresh_token or credential.refresh_token, tokens.expires_at
    )


def stored_token(
    path: Path,
    server_url: str,
    now: Callable[[], float] = time.time,
    transport: httpx.BaseTransport | None = None,
) -> str | None:
    """The access token stored for ``server_url``, renewed first when it has expired
    (``transport``: the HTTP transport to the provider, for tests)."""
    credential = credentials.load(path, server_url)
    if credential is None:
        return None
    if not credential.expired(now()):
        return credential.access_token
    with httpx.Client(
        timeout=TIMEOUT_S, headers={"User-Agent": wire.USER_AGENT}, transport=transport
    ) as http:
        tokens = refresh(http, credential)
    renewed = Credential(
        server_url=server_url,
        issuer=credential.issuer,
        client_id=credential.client_id,
        token_endpoint=credential.token_endpoint,
        access_token=tokens.access_token,
        refresh_token=tokens.refresh_token,
        expires_at=tokens.expires_at,
    )
    try:
        credentials.save(path, renewed)
    except OSError as exc:
        # The old refresh token may be spent (rotation): going on would fail at the next run.
        raise SignInFailed(
            f"your sign-in to {server_url} was renewed but cannot be written to {path} "
            f"({exc.strerror or exc}); fix the directory's permissions and {AGAIN}"
        ) from exc
    return tokens.access_token


def _post(http: httpx.Client, url: str, issuer: str, form: dict[str, str]) -> httpx.Response:
    try:
        return http.post(url, data=form, headers={"Accept": "application/json"})
    except httpx.HTTPError as exc:
        raise _unreachable(issuer, exc) from exc


def _json(
    http: httpx.Client, method: str, url: str, issuer: str, form: dict[str, str] | None = None
) -> dict[str, Any]:
    try:
        response = http.request(method, url, data=form, headers={"Accept": "application/json"})
    except httpx.HTTPError as exc:
        raise _unreachable(issuer, exc) from exc
    if response.status_code != 200:
        error, description = _oauth_error(response, issuer)
        why = f": {description[:200]}" if description else ""
        raise SignInFailed(
            f"the identity provider at {issuer} refused {url} "
            f"(HTTP {response.status_code}, {error[:100]}{why})"
        )
    body = _body(response)
    if body is None:
        raise SignInFailed(f"the identity provider at {issuer} did not answer JSON at {url}")
    return body


def _tokens(response: httpx.Response, issuer: str) -> Tokens:
    body = _body(response) or {}
    access = body.get("access_token")
    if not isinstance(access, str) or not access:
        raise SignInFailed(f"the identity provider at {issuer} answered without an access token")
    refresh_token = body.get("refresh_token")
    expires_in = body.get("expires_in")
    if isinstance(expires_in, int | float) and not isinstance(expires_in, bool):
        expires_at: float | None = time.time() + float(expires_in)
    else:
        expires_at = _jwt_expiry(access)
    return Tokens(access, refresh_token if isinstance(refresh_token, str) else None, expires_at)


def _jwt_expiry(token: str) -> float | None:
    """``exp`` of a JWT access token, read without verifying it (the server verifies); an
    opaque token's expiry is unknown."""
    parts = token.split(".")
    if len(parts) != 3:
        return None
    try:
        payload = json.loads(base64.urlsafe_b64decode(parts[1] + "=" * (-len(parts[1]) % 4)))
    except (binascii.Error, ValueError):
        return None
    exp = payload.get("exp") if isinstance(payload, dict) else None
    return float(exp) if isinstance(exp, int | float) else None


def _oauth_error(response: httpx.Response, issuer: str) -> tuple[str, str]:
    """The ``error`` and ``error_description`` of an OAuth error answer (RFC 6749 §5.2)."""
    body = _body(response) or {}
    error = body.get("error")
    if not isinstance(error, str):
        return f"HTTP {response.status_code}", ""
    description = body.get("error_description")
    return error, description if isinstance(description, str) else ""


def _body(response: httpx.Response) -> dict[str, Any] | None:
    try:
        body = response.json()
    except ValueError:
        return None
    return body if isinstance(body, dict) else None


def _unreachable(issuer: str, exc: httpx.HTTPError) -> SignInFailed:
    return SignInFailed(
        f"the identity provider at {issuer} cannot be reached ({type(exc).__name__}); check "
        "the network or the issuer URL and retry"
    )
