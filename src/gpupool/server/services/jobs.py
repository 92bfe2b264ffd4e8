"""Job use cases: submit, list, read, cancel, explain, logs.

Invariants: a submit either stores one complete job row or nothing; the same
(user, idempotency key) never creates a second job, and answers only the request it was
first used with (the same body again: the original job; another body: 422 naming the key);
a submit past a size limit (``ServerLimits``) is refused before anything is stored; a cancel
of a queued job is an atomic conditional update, so it cannot race with the controller
admitting the same job.
"""

from __future__ import annotations

import secrets
from collections.abc import Callable, Sequence

from gpupool.auth.principal import Action, Principal, authorize
from gpupool.config import ServerLimits
from gpupool.controller.clock import Clock
from gpupool.core.errors import Conflict, Forbidden, InvalidRequest, NotFound
from gpupool.core.jobs import ACTIVE, TERMINAL, JobStatus
from gpupool.server.cursors import decode_job_cursor, encode_job_cursor
from gpupool.server.schemas import JobOut, JobPage, JobSubmit, ReasonOut, WhyOut
from gpupool.server.services.submit_checks import (
    check_against_config,
    check_data_paths,
    check_sizes,
    request_digest,
    resolve_team,
)
from gpupool.server.views import job_out
from gpupool.spec.models import ClusterConfig
from gpupool.state import jobs, queue
from gpupool.state.db import IntegrityError, Session, SessionFactory
from gpupool.state.models import AttemptRow, JobRow

MAX_PAGE = 500


class JobService:
    def __init__(
        self,
        sessions: SessionFactory,
        config: Callable[[], ClusterConfig],
        clock: Clock,
        wake: Callable[[], None] = lambda: None,
        limits: ServerLimits = ServerLimits(),
    ) -> None:
        self._sessions = sessions
        self._config = config
        self._clock = clock
        self._wake = wake
        self._limits = limits

    # -- submit ---------------------------------------------------------------------------

    def submit(
        self, principal: Principal, body: JobSubmit, header_key: str | None
    ) -> tuple[JobOut, bool]:
        """Store a new job; returns it and whether it was created (False: idempotent replay)."""
        if header_key and body.idempotency_key and header_key != body.idempotency_key:
            raise InvalidRequest(
                "two different idempotency keys",
                [
                    {
                        "field": "idempotency_key",
                        "message": "differs from the Idempotency-Key header",
                    }
                ],
            )
        key = header_key or body.idempotency_key
        key_field = "Idempotency-Key" if header_key else "idempotency_key"
        check_sizes(body, self._limits)
        config = self._config()
        team = resolve_team(body, principal, config)
        authorize(principal, Action.MUTATE, team)
        if principal.user not in config.users:
            # Team membership may come from identity-provider groups alone, but a job must
            # run as someone: without a POSIX identity it would run as the server's user.
            raise Forbidden(
                f"user {principal.user!r} has no POSIX identity: an operator must add them "
                "under users: (uid, gid) in the configuration before they can submit jobs"
            )
        gpu_types = check_against_config(body, team, config)
        inputs, outputs = check_data_paths(body, principal.user)
        digest = request_digest(body, team)
        if key is not None:
            existing = self._replay(principal.user, key, key_field, digest)
            if existing is not None:
                return existing, False
        priority_class = body.priority_class or config.default_priority_class(team)
        job_id = "j-" + secrets.token_hex(6)
        row = JobRow(
            id=job_id,
            name=body.name or f"{body.kind}-{job_id[2:]}",
            team=team,
            user=principal.user,
            status=JobStatus.QUEUED.value,
            priority_class=priority_class,
            priority=config.priority_classes[priority_class].value,
            kind=body.kind,
            backend=body.backend,
            command=list(body.command),
            env=dict(body.env),
            gpus=body.resources.gpus,
            nodes=body.resources.nodes,
            cpus=body.resources.cpus,
            memory_gb=body.resources.memory_gb,
            gpu_types=gpu_types,
            inputs=inputs,
            outputs=outputs,
            max_runtime_s=body.max_runtime_s,
            idempotency_key=key,
            idempotency_digest=None if key is None else digest,
            submitted_at=self._clock.now(),
            attempt=0,
            message="",
            cancel_requested=False,
            pending_reasons=[],
        )
        try:
            with self._sessions.begin() as session:
                jobs.add(session, row)
                jobs.add_event(
                    session, job_id, row.submitted_at, "submitted", f"by {principal.user}"
                )
        except IntegrityError:
            # A concurrent request with the same key won the race: return its job.
            if key is not None:
                existing = self._replay(principal.user, key, key_field, digest)
                if existing is not None:
                    return existing, False
            raise
        self._wake()
        return job_out(row), True

    def _replay(self, user: str, key: str, key_field: str, digest: str) -> JobOut | None:
        """The job ``user`` already submitted with ``key`` (None: none yet). A key names one
        request: used again with a different one it is refused, not silently answered with
        the first job (jobs stored before digests were kept cannot be compared)."""
        with self._sessions() as session:
            row = jobs.by_idempotency_key(session, user, key)
            if row is None:
                return None
            if row.idempotency_digest is not None and row.idempotency_digest != digest:
                raise InvalidRequest(
                    f"{key_field} was already used for a different job",
                    [
                        {
                            "field": key_field,
                            "message": f"already used by job {row.id} with another request; "
                            "use a new key for a new job, or resend the same request",
                        }
                    ],
                )
            return job_out(row)

    # -- read -----------------------------------------------------------------------------

    def list(
        self,
        principal: Principal,
        team: str | None,
        status: str | None,
        limit: int,
        cursor: str | None,
    ) -> JobPage:
        config = self._config()
        if team is not None:
            if team not in config.teams:
                raise NotFound(f"no team named {team!r}")
            authorize(principal, Action.READ, team)
            teams = [team]
        else:
            teams = principal.readable_teams(sorted(config.teams))
        if status is not None and status not in {s.value for s in JobStatus}:
            known = ", ".join(s.value for s in JobStatus)
            raise InvalidRequest(
                "unknown status", [{"field": "status", "message": f"use one of: {known}"}]
            )
        limit = max(1, min(limit, MAX_PAGE))
        after = None if cursor is None else decode_job_cursor(cursor)
        with self._sessions() as session:
            rows = jobs.page(session, teams, status, after, limit + 1)
        more = len(rows) > limit
        rows = rows[:limit]
        next_cursor = encode_job_cursor(rows[-1].submitted_at, rows[-1].id) if more else None
        return JobPage(items=[job_out(r) for r in rows], next_cursor=next_cursor)

    def get(self, principal: Principal, job_id: str) -> JobOut:
        with self._sessions() as session:
            row = self._readable(session, principal, job_id)
            return job_out(row, jobs.attempts(session, job_id))

    def _readable(self, session: Session, principal: Principal, job_id: str) -> JobRow:
        row = jobs.get(session, job_id)
        if row is None:
            raise NotFound(f"no job with id {job_id!r}")
        authorize(principal, Action.READ, row.team)
        return row

    def why(self, principal: Principal, job_id: str) -> WhyOut:
        with self._sessions() as session:
            row = self._readable(session, principal, job_id)
            last_cycle = queue.last_cycle_at(session)
        reasons = [ReasonOut(**r) for r in row.pending_reasons]
        considered = row.reasons_at
        if row.status == JobStatus.QUEUED and last_cycle:
            considered = max(filter(None, [considered, last_cycle]))
        return WhyOut(
            job_id=row.id,
            status=row.status,
            last_considered_at=considered if row.status == JobStatus.QUEUED else row.reasons_at,
            summary=_why_summary(row, reasons),
            reasons=reasons if row.status == JobStatus.QUEUED else [],
        )

    # -- mutate ---------------------------------------------------------------------------

    def cancel(self, principal: Principal, job_id: str) -> JobOut:
        now = self._clock.now()
        with self._sessions.begin() as session:
            row = jobs.get(session, job_id)
            if row is None:
                raise NotFound(f"no job with id {job_id!r}")
            authorize(principal, Action.MUTATE, row.team)
            if jobs.cancel_if_queued(session, row, now):
                jobs.add_event(
                    session, job_id, now, "cancelled", f"by {principal.user} while queued"
                )
            elif row.status in ACTIVE:
                if not row.cancel_requested:
                    row.cancel_requested = True
                    jobs.add_event(session, job_id, now, "cancel_requested", f"by {principal.user}")
            elif row.status in TERMINAL and row.status != JobStatus.CANCELLED:
                raise Conflict(f"job {job_id} already {row.status}; nothing to cancel")
            out = job_out(row, jobs.attempts(session, job_id))
        self._wake()
        return out

    # -- logs -----------------------------------------------------------------------------

    def log_target(self, principal: Principal, job_id: str) -> tuple[str, AttemptRow | None]:
        """The job's status and its newest attempt with a handle (None: no output yet)."""
        with self._sessions() as session:
            row = self._readable(session, principal, job_id)
            return row.status, jobs.newest_attempt_with_handle(session, job_id)

    def status(self, job_id: str) -> str:
        with self._sessions() as session:
            row = jobs.get(session, job_id)
            return "" if row is None else row.status


def _why_summary(row: JobRow, reasons: Sequence[ReasonOut]) -> str:
    if row.status != JobStatus.QUEUED:
        where = f" on {row.pool}" if row.pool else ""
        return f"job is {row.status}{where}; it is not waiting"
    if not reasons:
        return "job is queued and has not been considered by the scheduler yet"
    return "waiting: " + "; ".join(f"{r.gpu_type}: {r.message}" for r in reasons)
