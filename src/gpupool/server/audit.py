"""Records every mutating request in the audit trail (T4), whatever its outcome.

A pure ASGI middleware, so that requests refused before any route code runs (a bad token,
a body that fails validation, a 403) are recorded like successful ones. It acts only on
requests that matched a route with a mutating method (POST, PUT, PATCH, DELETE); reads
pass straight through, untouched and unbuffered.

Invariant: the audit row is written *before* the response is sent, so a client that got
an answer can rely on the entry being there. Mutation answers are small JSON bodies, so
holding them until the row is stored costs nothing noticeable.

Requests refused without any identity (no token or a bad one: 401; a bad signed URL: 403
without a principal) are the exception: anyone can send them, as fast as they like, so they
are counted per route, outcome and status (:class:`RefusalCounts`) and written as one
summary row per key every ``audit_summary_s`` (and at shutdown), with the count in
``target``. Requests with a principal, refused or not, are recorded one by one as before,
and so are anonymous requests that succeed (an artifact written through a signed URL).

Routes may say more than the middleware can see (the id of a job just created, the team a
submit was for) through :class:`AuditNote` (``AuditNoteDep``). Without a note the target
is the path parameters and the team is looked up from a ``job_id`` or ``team`` parameter.

A route whose service writes in one transaction may record its entry in that transaction
(:func:`audit_in`, for the status it answers on success): one commit instead of two, and the
entry is stored exactly when the mutation is. The middleware then writes nothing, unless the
request ends with another status (an error after all), which it records as usual.
"""

from __future__ import annotations

import asyncio
import json
import logging
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import datetime
from typing import Annotated, Any

from fastapi import Depends, Request
from starlette.concurrency import run_in_threadpool
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from gpupool.auth.audit import ANONYMOUS, OK, AuditEntry, record
from gpupool.state import jobs
from gpupool.state.db import Session, store_outage

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
    recorded: int | None = None  # the status of the entry already written by the route


def audit_note(request: Request) -> AuditNote:
    note = getattr(request.state, _STATE_KEY, None)
    if note is None:
        note = AuditNote()
        setattr(request.state, _STATE_KEY, note)
    return note


async def _audit_note_dep(request: Request) -> AuditNote:
    # async: no I/O, and a sync dependency would cost a hop to a worker thread per request.
    return audit_note(request)


AuditNoteDep = Annotated[AuditNote, Depends(_audit_note_dep)]


def audit_in(request: Request, status: int) -> Callable[[Session, str, str], None]:
    """What a service calls inside its transaction to add this request's entry (it succeeded
    with ``status``; the target and team are the ones it created the mutation for)."""

    def write(session: Session, target: str, team: str) -> None:
        note = audit_note(request)
        note.target, note.team = target, team
        record(session, _entry(request.scope, request.scope["route"], status, b"", note))
        note.recorded = status

    return write


# (action, outcome, status) of an anonymous refusal
RefusalKey = tuple[str, str, int]


@dataclass
class RefusalCounts:
    """Anonymous refusals since ``since``, not yet written."""

    counts: Counter[RefusalKey] = field(default_factory=Counter)
    since: datetime | None = None

    def take(self) -> RefusalCounts:
        taken = RefusalCounts(self.counts, self.since)
        self.counts, self.since = Counter(), None
        return taken


class AuditMiddleware:
    def __init__(self, app: ASGIApp, summary_every_s: float = 60.0) -> None:
        self.app = app
        self.summary_every_s = summary_every_s
        self.refusals = RefusalCounts()
        self._flush: asyncio.TimerHandle | None = None
        self._flush_loop: asyncio.AbstractEventLoop | None = None
        self._tasks: set[asyncio.Task[None]] = set()  # kept until done (the loop keeps weak refs)

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "lifespan":
            await self.app(scope, self._flushing_at_shutdown(scope, receive), send)
            return
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
        note = scope.get("state", {}).get(_STATE_KEY)
        if note is not None and note.recorded == status:
            return  # written in the mutation's own transaction
        if status >= 400 and scope.get("state", {}).get("principal") is None:
            self._count(scope, route, status, error_body)
            return
        try:
            await run_in_threadpool(self._write, scope, route, status, error_body)
        except Exception as exc:
            # The mutation already happened; failing the answer now would hide that.
            outage = store_outage(exc)
            if outage is not None:  # the store is away (no traceback: it is not a bug)
                log.error("could not write the audit entry: %s", outage.message)
                return
            log.error("could not write the audit entry: %s", type(exc).__name__, exc_info=exc)

    def _write(self, scope: Scope, route: Any, status: int, error_body: bytes) -> None:
        runtime = scope["app"].state.runtime
        note: AuditNote = scope.get("state", {}).get(_STATE_KEY) or AuditNote()
        with runtime.sessions.begin() as session:
            if note.team is None:
                note = AuditNote(note.target, _team_of(session, scope.get("path_params", {})))
            record(session, _entry(scope, route, status, error_body, note))

    def _count(self, scope: Scope, route: Any, status: int, error_body: bytes) -> None:
        runtime = scope["app"].state.runtime
        if self.refusals.since is None:
            self.refusals.since = runtime.clock.now()
        key = (_action(scope, route), _error_code(status, error_body), status)
        self.refusals.counts[key] += 1
        loop = asyncio.get_running_loop()
        # Armed once per window; again if the loop that held the timer is gone (test clients
        # run each request on a loop of its own).
        if self._flush is None or self._flush_loop is not loop:
            self._flush_loop = loop
            self._flush = loop.call_later(self.summary_every_s, self._start_flush, runtime)

    def _start_flush(self, runtime: Any) -> None:
        self._flush = None
        task = asyncio.get_running_loop().create_task(
            run_in_threadpool(self._write_summary, runtime, self.refusals.take())
        )
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    def _flushing_at_shutdown(self, scope: Scope, receive: Receive) -> Receive:
        async def flushing() -> Message:
            message = await receive()
            if message["type"] == "lifespan.shutdown":
                if self._flush is not None:
                    self._flush.cancel()
                    self._flush = None
                if self._tasks:
                    await asyncio.gather(*self._tasks, return_exceptions=True)
                runtime = scope["app"].state.runtime
                await run_in_threadpool(self._write_summary, runtime, self.refusals.take())
            return message

        return flushing

    @staticmethod
    def _write_summary(runtime: Any, refusals: RefusalCounts) -> None:
        if not refusals.counts or refusals.since is None:
            return
        since = refusals.since.strftime("%Y-%m-%dT%H:%M:%SZ")
        try:
            with runtime.sessions.begin() as session:
                now = runtime.clock.now()
                for (action, outcome, status), count in sorted(refusals.counts.items()):
                    target = f"{count} anonymous request(s) refused since {since} (counted)"
                    record(
                        session,
                        AuditEntry(now, ANONYMOUS, action, outcome, None, target, None, status),
                    )
        except Exception as exc:
            log.error("could not write the audit summary: %s", type(exc).__name__, exc_info=exc)
        total = sum(refusals.counts.values())
        log.warning("%d anonymous mutating request(s) refused since %s", total, since)


def _entry(scope: Scope, route: Any, status: int, error_body: bytes, note: AuditNote) -> AuditEntry:
    """The entry of a request that ended with ``status`` (``note.team`` as the team)."""
    runtime = scope["app"].state.runtime
    principal = scope.get("state", {}).get("principal")
    params: dict[str, Any] = scope.get("path_params", {})
    return AuditEntry(
        at=runtime.clock.now(),
        actor=principal.user if principal is not None else ANONYMOUS,
        token_id=principal.token_id if principal is not None else None,
        action=_action(scope, route),
        target=note.target or ",".join(str(v) for v in params.values()),
        team=note.team,
        outcome=OK if status < 400 else _error_code(status, error_body),
        status=status,
    )


def _action(scope: Scope, route: Any) -> str:
    return str(getattr(route, "name", "") or scope["path"])


def _team_of(session: Any, params: dict[str, Any]) -> str | None:
    if "team" in params:
        return str(params["team"])
    if "job_id" in params:
        row = jobs.get(session, str(params["job_id"]))
        return None if row is None else str(row.team)
    return None


def _error_code(status: int, body: bytes) -> str:
    try:
        code = json.loads(body)["error"]["code"]
    except (ValueError, KeyError, TypeError):
        return f"http_{status}"
    return str(code) if isinstance(code, str) else f"http_{status}"
