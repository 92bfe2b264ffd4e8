"""Dashboard sessions: a signed cookie that names who signed in, and the CSRF token of it.

Why a signed cookie and not the token itself: the cookie never holds a bearer. An API-token
session carries the token's *id* (a lookup key, not a secret: it appears in audit records);
each request re-reads that token's row, so revoking or expiring the token ends every
dashboard session made with it within the token cache's window. An OIDC session carries
the user and the groups of the access token it was made from, and ends when that token
would have expired (at most ``MAX_AGE_S``).

Invariants:

* **Integrity.** The cookie is ``base64url(json).base64url(HMAC-SHA256)`` under a key derived
  from the server's grant key (shared by every API replica), with a purpose label so a
  grant signature can never pass as a session or the reverse. Anything that does not
  verify, or has expired, is no session at all.
* **CSRF.** Every session has a random id; its CSRF token is ``HMAC(key, "csrf" + id)``, so it
  is tied to that one session (a synchronizer token that needs no store). Forms carry it in a
  hidden field and every mutating route compares it in constant time. The sign-in form,
  which has no session yet, is tied the same way to a short-lived pre-session cookie.
* **Logout** forgets the session id in this process (``Revoked``) and clears the cookie; the
  id stays refused until the session would have expired anyway. Another API replica
  honours a copied cookie until then: sessions are short for that reason.
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import json
import secrets
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field

MAX_AGE_S = 8 * 3600  # the longest a dashboard session lives, whatever made it
PRE_AGE_S = 15 * 60  # a sign-in form (and an OIDC round trip) must finish within this
COOKIE = "gpupool_session"
PRE_COOKIE = "gpupool_signin"
OIDC_COOKIE = "gpupool_oidc"
_PURPOSE = b"gpupool dashboard session v1"


@dataclass(frozen=True)
class UiSession:
    sid: str
    user: str
    kind: str  # "token": made from an API token; "oidc": from an identity provider's token
    token_id: str  # the API token's id, or "jwt:<jti>" of the OIDC token (never a secret)
    expires: int  # unix seconds
    groups: tuple[str, ...] = field(default=())  # OIDC sessions: the token's groups claim


class Revoked:
    """Session ids logged out in this process, until they would have expired."""

    def __init__(self) -> None:
        self._ids: dict[str, int] = {}
        self._lock = threading.Lock()

    def add(self, sid: str, expires: int) -> None:
        with self._lock:
            now = int(time.time())
            self._ids = {s: e for s, e in self._ids.items() if e > now}
            self._ids[sid] = expires

    def __contains__(self, sid: object) -> bool:
        with self._lock:
            return sid in self._ids


def _b64(data: bytes) -> str:
    return base64.urlsafe_b64encode(data).rstrip(b"=").decode()


def _unb64(text: str) -> bytes:
    return base64.urlsafe_b64decode(text + "=" * (-len(text) % 4))


class SessionCodec:
    """Signs and reads the dashboard's cookies; derives CSRF tokens."""

    def __init__(self, server_key: bytes, now: Callable[[], float] = time.time) -> None:
        self._key = hmac.new(server_key, _PURPOSE, hashlib.sha256).digest()
        self._now = now
        self.revoked = Revoked()

    def __repr__(self) -> str:
        return "SessionCodec(<key hidden>)"

    def _time(self) -> int:
        return int(self._now())

    def _sign(self, label: str, payload: dict[str, object]) -> str:
        body = _b64(json.dumps([label, payload], separators=(",", ":")).encode())
        mac = hmac.new(self._key, body.encode(), hashlib.sha256).digest()
        return f"{body}.{_b64(mac)}"

    def _open(self, label: str, cookie: str | None) -> dict[str, object] | None:
        if not cookie or cookie.count(".") != 1 or len(cookie) > 8192:
            return None
        body, mac = cookie.split(".")
        want = _b64(hmac.new(self._key, body.encode(), hashlib.sha256).digest())
        if not hmac.compare_digest(want, mac):
            return None
        try:
            found, payload = json.loads(_unb64(body))
        except (ValueError, TypeError):
            return None
        if found != label or not isinstance(payload, dict):
            return None
        expires = payload.get("exp")
        if not isinstance(expires, int) or expires <= self._time():
            return None
        return payload

    # -- sessions ----------------------------------------------------------------------------

    def new(
        self, user: str, kind: str, token_id: str, groups: tuple[str, ...], expires: int | None
    ) -> UiSession:
        latest = self._time() + MAX_AGE_S
        return UiSession(
            sid=secrets.token_urlsafe(18),
            user=user,
            kind=kind,
            token_id=token_id,
            expires=latest if expires is None else min(expires, latest),
            groups=groups,
        )

    def dump(self, session: UiSession) -> str:
        return self._sign(
            "session",
            {
                "sid": session.sid,
                "u": session.user,
                "k": session.kind,
                "t": session.token_id,
                "g": list(session.groups),
                "exp": session.expires,
            },
        )

    def load(self, cookie: str | None) -> UiSession | None:
        payload = self._open("session", cookie)
        if payload is None:
            return None
        try:
            session = UiSession(
                sid=str(payload["sid"]),
                user=str(payload["u"]),
                kind=str(payload["k"]),
                token_id=str(payload["t"]),
                expires=int(payload["exp"]),  # type: ignore[call-overload]
                groups=tuple(str(g) for g in payload.get("g") or ()),  # type: ignore[attr-defined]
            )
        except (KeyError, TypeError, ValueError):
            return None
        return None if session.sid in self.revoked else session

    def csrf(self, sid: str) -> str:
        return _b64(hmac.new(self._key, b"csrf:" + sid.encode(), hashlib.sha256).digest())

    def csrf_ok(self, sid: str, given: str | None) -> bool:
        return bool(given) and hmac.compare_digest(self.csrf(sid), str(given))

    # -- before a session: the sign-in form and the OIDC round trip ------------------------------

    def pre_session(self) -> tuple[str, str]:
        """A new pre-session cookie value and its id (for the sign-in form's CSRF token)."""
        sid = secrets.token_urlsafe(18)
        return self._sign("pre", {"sid": sid, "exp": self._time() + PRE_AGE_S}), sid

    def pre_session_id(self, cookie: str | None) -> str | None:
        payload = self._open("pre", cookie)
        return None if payload is None else str(payload.get("sid"))

    def oidc_flow(self, state: str, verifier: str, next_path: str) -> str:
        """The OIDC round trip's secrets, kept by the browser (HttpOnly) and signed."""
        return self._sign(
            "oidc",
            {
                "state": state,
                "verifier": verifier,
                "next": next_path,
                "exp": self._time() + PRE_AGE_S,
            },
        )

    def oidc_flow_of(self, cookie: str | None) -> dict[str, object] | None:
        return self._open("oidc", cookie)
