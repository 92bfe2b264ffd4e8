"""Local grants: HMAC-signed, method- and path-scoped, expiring URLs to the API's artifact
endpoints (``/v1/artifacts/{team}/{path}``), each made out to one user.

A URL carries ``gp_m`` (the one method it allows), ``gp_scope`` (the path it covers),
``gp_user`` (the job's user, whose permissions the server applies on disk), ``gp_exp``
(expiry, Unix seconds) and ``gp_sig``, the HMAC-SHA256 of those and the team under the
server's signing key. Rules, checked by :meth:`Signer.check`:

* the signature must match (compared in constant time): any edit of method, team, user,
  scope or expiry breaks it; the signed message is versioned (``gpupool-grant-v2``, which
  added the user), so a URL of an older version is refused, not misread;
* the request's method is ``gp_m``; a ``GET`` may read the scope itself or below it, a
  ``PUT`` may write only strictly below it (the scope is the attempt's output prefix);
* now is before ``gp_exp``.

Denials say which rule failed and never repeat the signature. The key is 32 random bytes
kept in ``<GPUPOOL_HOME>/grant.key`` (created 0600 on first start), or ``GPUPOOL_GRANT_KEY``
when set (several API replicas must share it).
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import json
import os
import secrets
from collections.abc import Mapping, Sequence
from datetime import UTC, datetime
from pathlib import Path
from typing import Literal
from urllib.parse import quote, urlencode

from gpupool.data.grants.base import Grant, GrantScope, OutputTarget
from gpupool.data.paths import within

KEY_FILE = "grant.key"
MIN_KEY_CHARS = 32
ARTIFACTS_PATH = "/v1/artifacts"
SIG, EXP, METHOD, SCOPE, USER = "gp_sig", "gp_exp", "gp_m", "gp_scope", "gp_user"
VERSION = "gpupool-grant-v2"

Method = Literal["GET", "PUT"]


class GrantDenied(Exception):
    """A request the URL does not allow; the message is safe to return to the caller."""


def signing_key(home: Path, configured: str | None = None) -> bytes:
    """``configured`` (GPUPOOL_GRANT_KEY) or the key file under ``home``, made on first use."""
    if configured is not None:
        if len(configured) < MIN_KEY_CHARS:
            raise ValueError(
                f"GPUPOOL_GRANT_KEY is too short: use at least {MIN_KEY_CHARS} random "
                "characters, e.g. the output of: python -c 'import secrets; "
                "print(secrets.token_hex(32))'"
            )
        return configured.encode()
    path = home / KEY_FILE
    home.mkdir(parents=True, exist_ok=True)
    try:
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    except FileExistsError:
        return bytes.fromhex(path.read_text(encoding="ascii").strip())
    with os.fdopen(fd, "w", encoding="ascii") as out:
        out.write(secrets.token_hex(32) + "\n")
    return bytes.fromhex(path.read_text(encoding="ascii").strip())


class Signer:
    def __init__(self, key: bytes) -> None:
        self._key = key

    def __repr__(self) -> str:
        return "Signer(<key hidden>)"

    def derived_key(self, purpose: bytes) -> bytes:
        """A key for another use (the dashboard's sessions), from this one and ``purpose``:
        every replica that shares the grant key derives the same, and neither key's
        signatures pass for the other's."""
        return hmac.new(self._key, b"derived:" + purpose, hashlib.sha256).digest()

    def signature(self, method: str, team: str, user: str, scope: str, expires: int) -> str:
        # JSON: one unambiguous encoding whatever the fields hold (a user name from an
        # identity provider may contain any character).
        message = json.dumps([VERSION, method, team, user, scope, expires]).encode()
        digest = hmac.new(self._key, message, hashlib.sha256).digest()
        return base64.urlsafe_b64encode(digest).rstrip(b"=").decode()

    def query(self, method: Method, team: str, user: str, scope: str, expires: int) -> str:
        params = {METHOD: method, SCOPE: scope, USER: user, EXP: str(expires)}
        params[SIG] = self.signature(method, team, user, scope, expires)
        return urlencode(params)

    def check(
        self, method: str, team: str, path: str, params: Mapping[str, str], now: datetime
    ) -> str:
        """The user the URL was made out to, or :class:`GrantDenied` unless ``params``
        allow ``method`` on ``team``/``path``."""
        missing = [p for p in (METHOD, SCOPE, USER, EXP, SIG) if not params.get(p)]
        if missing:
            raise GrantDenied(
                f"not a signed URL: missing {', '.join(missing)}; use the URL the job was given"
            )
        try:
            expires = int(params[EXP])
        except ValueError:
            raise GrantDenied(f"{EXP} is not a number: the URL was altered") from None
        expected = self.signature(params[METHOD], team, params[USER], params[SCOPE], expires)
        if not hmac.compare_digest(expected.encode(), params[SIG].encode()):
            raise GrantDenied(
                "signature does not match: the URL was altered, or is for another team"
            )
        if method != params[METHOD]:
            raise GrantDenied(f"this URL allows {params[METHOD]} only, not {method}")
        scope = params[SCOPE]
        inside = path != scope and within(path, scope) if method == "PUT" else within(path, scope)
        if not inside:
            where = f"below {scope}/" if method == "PUT" else f"{scope} or below it"
            raise GrantDenied(f"path {path} is outside this URL's scope ({where})")
        if now.timestamp() >= expires:
            at = datetime.fromtimestamp(expires, UTC).isoformat()
            raise GrantDenied(f"this URL expired at {at}; a new attempt gets new URLs")
        return params[USER]


class LocalMinter:
    """Grants to a team root on the API host's file system, served by the artifact API."""

    kind: Literal["local"] = "local"

    def __init__(self, signer: Signer, base_url: str) -> None:
        self._signer = signer
        self._base = base_url.rstrip("/")

    def url(self, method: Method, team: str, user: str, path: str, expires: int) -> str:
        where = f"{self._base}{ARTIFACTS_PATH}/{quote(team)}/{quote(path)}"
        return f"{where}?{self._signer.query(method, team, user, path, expires)}"

    def mint(self, scope: GrantScope, outputs: Sequence[str]) -> Grant:
        expires = int(scope.expires_at.timestamp())
        return Grant(
            kind="local",
            scope=scope,
            inputs={p: self.url("GET", scope.team, scope.user, p, expires) for p in scope.reads},
            outputs={
                o: OutputTarget(self.url("PUT", scope.team, scope.user, w, expires))
                for o, w in zip(outputs, scope.writes, strict=True)
            },
        )
