"""Records every mutating request in the audit trail (T4), whatever its outcome.

A pure ASGI middleware, so that requests refused before any route code runs (a bad token,
a body that fails validation, a 403) are recorded like successful ones. It acts only on
requests that matched a route with a mutating method (POST, PUT, PATCH, DELETE); reads
pass straight through, untouched and unbuffered.

Invariant: the audit row is written *before* the response is sent, so a client that got
an answer can rely on the entry being there. Mutation answers are small JSON bodies, so
holding them until the row is stored costs nothing noticeable.

Routes may say more than the middleware can see (the id of a job just created, the team a
submit was for) through :class:`AuditNote` (``AuditNoteDep``). Without a note the target
is the path parameters and the team is looked up from a ``job_id`` or ``team`` parameter.
"""

from __future__ import annotations

import json
import logging
from dataclasses import dataclass
from typing import Annotated, Any

from fastapi import Depends, Request
from starlette.concurrency import run_in_threadpool
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from gpupool.auth.audit import ANONYMOUS, OK, AuditEntry, record
from gpupool.state.models import JobRow

log = logging.getLogger(__name__)

MUTATING = frozenset({"POST", "PUT", "PATCH", "DELETE"})
_ERROR_BODY_MAX = 64 * 1024
_STATE_KEY = "audit_note"
# What the server's last-resort handler answers for an unhandled exception.
_INTERNAL = b'{"error": {"code": "internal"}}'


@dataclass
class AuditNote:
    """What a route knows about the mutation that the request line does not say."""

    target: str | None = None
    team: str | None = None


def audit_note(request: Request) -> AuditNote:
    note = getattr(request.state, _STATE_KEY, None)
    if note is None:
        note = AuditNote()
        setattr(request.state, _STATE_KEY, note)
    return note


AuditNoteDep = Annotated[AuditNote, Depends(audit_note)]


class AuditMiddleware:
    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http" or scope["method"] not in MUTATING:
            await self.app(scope, receive, send)
            return
        held: list[Message] = []
        status = 500
        error_body = bytearray()

        async def hold(message: Message) -> None:
            nonlocal status
            if message["type"] == "http.response.start":
                status = int(message["status"])
            elif (
                message["type"] == "http.response.body"
                and status >= 400
                and len(error_body) < _ERROR_BODY_MAX
            ):
                error_body.extend(message.get("body", b""))
            held.append(message)
            if message["type"] == "http.response.body" and not message.get("more_body", False):
                await self._record(scope, status, bytes(error_body))
                for queued in held:
                    await send(queued)
                held.clear()

        try:
            await self.app(scope, receive, hold)
        except Exception:
            if not held:  # nothing answered yet: the outer error handler will answer 500
                await self._record(scope, 500, _INTERNAL)
            raise

    async def _record(self, scope: Scope, status: int, error_body: bytes) -> None:
        route = scope.get("route")
        if route is None or scope["method"] not in (getattr(route, "methods", None) or ()):
            return  # no route took the request (404/405): nothing was mutated
        try:
            await run_in_threadpool(self._write, scope, route, status, error_body)
        except Exception as exc:
            # The mutation already happened; failing the answer now would hide that.
            log.error("could not write the audit entry: %s", type(exc).__name__, exc_info=exc)

    def _write(self, scope: Scope, route: Any, status: int, error_body: bytes) -> None:
        runtime = scope["app"].state.runtime
        state: dict[str, Any] = scope.get("state", {})
        principal = state.get("principal")
        note: AuditNote = state.get(_STATE_KEY) or AuditNote()
        params: dict[str, Any] = scope.get("path_params", {})
        target = note.target or ",".join(str(v) for v in params.values())
        with runtime.sessions.begin() as session:
            team = note.team or _team_of(session, params)
            record(
                session,
                AuditEntry(
                    at=runtime.clock.now(),
                    actor=principal.user if principal is not None else ANONYMOUS,
                    token_id=principal.token_id if principal is not None else None,
                    action=str(getattr(route, "name", "") or scope["path"]),
                    target=target,
                    team=team,
                    outcome=OK if status < 400 else _error_code(status, error_body),
                    status=status,
                ),
            )


def _team_of(session: Any, params: dict[str, Any]) -> str | None:
    if "team" in params:
        return str(params["team"])
    if "job_id" in params:
        row = session.get(JobRow, str(params["job_id"]))
        return None if row is None else str(row.team)
    return None


def _error_code(status: int, body: bytes) -> str:
    try:
        code = json.loads(body)["error"]["code"]
    except (ValueError, KeyError, TypeError):
        return f"http_{status}"
    return str(code) if isinstance(code, str) else f"http_{status}"
