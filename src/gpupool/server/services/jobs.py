"""Job use cases: submit (one job or a job array), list, read, cancel, explain, logs.

Invariants: a submit either stores one complete job row or nothing, an array submit all its
tasks or none (one transaction, one multi-row insert); the same
(user, idempotency key) never creates a second job, and answers only the request it was
first used with (the same body again: the original job; another body: 422 naming the key);
a submit past a size limit (``ServerLimits``) is refused before anything is stored; a cancel
of a queued job is an atomic conditional update, so it cannot race with the controller
admitting the same job.
"""

from __future__ import annotations

import secrets
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from gpupool.auth.principal import Action, Principal, authorize
from gpupool.config import ServerLimits
from gpupool.controller.backoff import PoolHealth
from gpupool.controller.clock import Clock
from gpupool.core.arrays import parse_array, task_id
from gpupool.core.errors import Conflict, Forbidden, InvalidRequest, NotFound
from gpupool.core.jobs import ACTIVE, SHOWN_STATUSES, TERMINAL, JobStatus, shown_status
from gpupool.server.cursors import decode_job_cursor, encode_job_cursor
from gpupool.server.schemas import (
    ArrayOut,
    ArraySubmit,
    EventOut,
    JobEventOut,
    JobOut,
    JobPage,
    JobSubmit,
    ReasonOut,
    WhyOut,
)
from gpupool.server.services.forecasts import ForecastService
from gpupool.server.services.image_checks import check_image
from gpupool.server.services.submit_checks import (
    check_against_config,
    check_data_paths,
    check_sizes,
    request_digest,
    resolve_team,
)
from gpupool.server.views import job_out
from gpupool.spec.models import ClusterConfig
from gpupool.state import identities, jobs, queue
from gpupool.state.db import IntegrityError, Session, SessionFactory
from gpupool.state.group_commit import GroupCommit
from gpupool.state.models import AttemptRow, JobRow

MAX_PAGE = 500

# Adds the audit entry of the request that creates (job id, team) to the caller's session.
AuditWriter = Callable[[Session, str, str], None]


class JobService:
    def __init__(
        self,
        sessions: SessionFactory,
        config: Callable[[], ClusterConfig],
        clock: Clock,
        wake: Callable[[], None] = lambda: None,
        limits: ServerLimits = ServerLimits(),
        pool_health: Callable[[str], PoolHealth] | None = None,
        forecasts: ForecastService | None = None,
    ) -> None:
        self._sessions = sessions
        self._config = config
        self._clock = clock
        self._wake = wake
        self._limits = limits
        self._group = GroupCommit(sessions)
        self._pool_health = pool_health
        self._forecasts = forecasts

    # -- submit ---------------------------------------------------------------------------

    def submit(
        self,
        principal: Principal,
        body: JobSubmit,
        header_key: str | None,
        audit: AuditWriter | None = None,
    ) -> tuple[JobOut, bool]:
        """Store a new job; returns it and whether it was created (False: idempotent replay).
        ``audit`` adds the request's audit entry to the job's own transaction (one commit per
        submit, not two); it is not called for a replay, which stores nothing."""
        checked = self._check(principal, body, header_key)
        if checked.key is not None:
            existing = self._replay(principal.user, checked)
            if existing is not None:
                return self._single(existing, checked), False
        job_id = "j-" + secrets.token_hex(6)
        row = JobRow(
            **self._columns(principal, body, checked, job_id),
            id=job_id,
            idempotency_key=checked.key,
            idempotency_digest=None if checked.key is None else checked.digest,
        )

        def write(session: Session) -> None:
            self._remember_identity(session, principal)
            jobs.add(session, row)
            jobs.add_events(
                session, [job_id], row.submitted_at, "submitted", f"by {principal.user}"
            )
            if audit is not None:
                audit(session, job_id, checked.team)

        try:
            self._group.run(write)  # one commit for the submits that arrive together
        except IntegrityError:
            # A concurrent request with the same key won the race: return its job.
            if checked.key is not None:
                existing = self._replay(principal.user, checked)
                if existing is not None:
                    return self._single(existing, checked), False
            raise
        self._wake()
        return job_out(row), True

    def submit_array(
        self, principal: Principal, body: ArraySubmit, header_key: str | None
    ) -> tuple[ArrayOut, bool]:
        """Store one job per index of ``body.array``, all in one transaction (all or none);
        returns the array and whether it was created (False: idempotent replay). The key
        names the whole array; it is kept on the first task."""
        indices = parse_array(body.array, self._limits.max_array_tasks)
        checked = self._check(principal, body, header_key)
        if checked.key is not None:
            existing = self._replay(principal.user, checked)
            if existing is not None:
                return self._array_of(existing, checked), False
        array_id = "a-" + secrets.token_hex(6)
        common = self._columns(principal, body, checked, array_id)
        rows = [
            {
                **common,
                "id": task_id(array_id, index),
                "array_id": array_id,
                "array_index": index,
                "idempotency_key": checked.key if n == 0 else None,
                "idempotency_digest": checked.digest if n == 0 and checked.key else None,
            }
            for n, index in enumerate(indices)
        ]
        at = common["submitted_at"]
        try:
            with self._sessions.begin() as session:
                self._remember_identity(session, principal)
                jobs.add_many(session, rows)
                jobs.add_events(
                    session,
                    [r["id"] for r in rows],
                    at,
                    "submitted",
                    f"by {principal.user} in array {array_id}",
                )
        except IntegrityError:
            if checked.key is not None:
                existing = self._replay(principal.user, checked)
                if existing is not None:
                    return self._array_of(existing, checked), False
            raise
        self._wake()
        out = ArrayOut(
            id=array_id,
            name=common["name"],
            team=checked.team,
            user=principal.user,
            count=len(indices),
            first_index=indices[0],
            last_index=indices[-1],
            submitted_at=at,
            counts={JobStatus.QUEUED.value: len(indices)},
        )
        return out, True

    def _check(self, principal: Principal, body: JobSubmit, header_key: str | None) -> _Checked:
        """Every check of a submit that needs no write; what the store needs from them."""
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
        check_sizes(body, self._limits)
        config = self._config()
        team = resolve_team(body, principal, config)
        authorize(principal, Action.MUTATE, team)
        if principal.user not in config.users and principal.posix is None:
            # Team membership may come from identity-provider groups alone, but a job must
            # run as someone: without a POSIX identity it would run as the server's user.
            raise Forbidden(
                f"user {principal.user!r} has no POSIX identity (uid, gid): an operator must "
                "add them under users: in the configuration or to the directory file, or "
                "have the identity provider send it (GPUPOOL_OIDC_UID_CLAIM)"
            )
        gpu_types = check_against_config(body, team, config)
        inputs, outputs = check_data_paths(body, principal.user)
        container = check_image(body, team, principal.user, config)
        priority_class = body.priority_class or config.default_priority_class(team)
        key = header_key or body.idempotency_key
        return _Checked(
            key=key,
            key_field="Idempotency-Key" if header_key else "idempotency_key",
            team=team,
            gpu_types=gpu_types,
            inputs=inputs,
            outputs=outputs,
            digest="" if key is None else request_digest(body, team),  # only a key needs it
            priority_class=priority_class,
            priority=config.priority_classes[priority_class].value,
            container=container,
        )

    def _remember_identity(self, session: Session, principal: Principal) -> None:
        """The identity a user not under ``users:`` submits with, for the controller to run
        the job as (``auth.posix``), in the submit's own transaction."""
        if principal.posix is not None:
            identities.remember(
                session, principal.user, principal.posix, principal.posix_source, self._clock.now()
            )

    def _columns(
        self, principal: Principal, body: JobSubmit, checked: _Checked, id_: str
    ) -> dict[str, Any]:
        """The columns of a new queued job (of every task of a new array), but its id and key."""
        return {
            "name": body.name or f"{body.kind}-{id_[2:]}",
            "team": checked.team,
            "user": principal.user,
            "status": JobStatus.QUEUED.value,
            "priority_class": checked.priority_class,
            "priority": checked.priority,
            "kind": body.kind,
            "backend": body.backend,
            "command": list(body.command),
            "env": dict(body.env),
            "gpus": body.resources.gpus,
            "nodes": body.resources.nodes,
            "cpus": body.resources.cpus,
            "memory_gb": body.resources.memory_gb,
            "gpu_types": checked.gpu_types,
            "inputs": checked.inputs,
            "outputs": checked.outputs,
            "max_runtime_s": body.max_runtime_s,
            "checkpoint_interval_s": body.checkpoint_interval_s,
            "container": checked.container,
            "submitted_at": self._clock.now(),
            "attempt": 0,
            "message": "",
            "cancel_requested": False,
            "pending_reasons": [],
        }

    def _replay(self, user: str, checked: _Checked) -> JobRow | None:
        """The job ``user`` already submitted with the key (None: none yet; for an array,
        its first task). A key names one request: used again with a different one it is
        refused, not silently answered with the first job (jobs stored before digests were
        kept cannot be compared)."""
        assert checked.key is not None
        with self._sessions() as session:
            row = jobs.by_idempotency_key(session, user, checked.key)
            if row is None:
                return None
            if row.idempotency_digest is not None and row.idempotency_digest != checked.digest:
                shown = f"job array {row.array_id}" if row.array_id else f"job {row.id}"
                raise InvalidRequest(
                    f"{checked.key_field} was already used for a different job",
                    [
                        {
                            "field": checked.key_field,
                            "message": f"already used by {shown} with another request; "
                            "use a new key for a new job, or resend the same request",
                        }
                    ],
                )
            session.expunge(row)
            return row

    def _single(self, row: JobRow, checked: _Checked) -> JobOut:
        if row.array_id is not None:  # a digest-less row of an array: still another request
            raise InvalidRequest(
                f"{checked.key_field} was already used for job array {row.array_id}",
                [{"field": checked.key_field, "message": "use a new key for a new job"}],
            )
        return job_out(row)

    def _array_of(self, row: JobRow, checked: _Checked) -> ArrayOut:
        if row.array_id is None:
            raise InvalidRequest(
                f"{checked.key_field} was already used for job {row.id}",
                [{"field": checked.key_field, "message": "use a new key for a new job array"}],
            )
        with self._sessions() as session:
            return _array_out(session, row)

    # -- read -----------------------------------------------------------------------------

    def list(
        self,
        principal: Principal,
        team: str | None,
        status: str | None,
        limit: int,
        cursor: str | None,
        group: bool = False,
        array: str | None = None,
        user: str | None = None,
        gpu_type: str | None = None,
    ) -> JobPage:
        """A page of jobs, newest first. ``group``: an array stands as one job (its first task)
        and the page lists each array's tasks per status; ``array``: only that array's tasks."""
        config = self._config()
        if team is not None:
            if team not in config.teams:
                raise NotFound(f"no team named {team!r}")
            authorize(principal, Action.READ, team)
            teams = [team]
        else:
            teams = principal.readable_teams(sorted(config.teams))
        if status is not None and status not in SHOWN_STATUSES:
            known = ", ".join(SHOWN_STATUSES)
            raise InvalidRequest(
                "unknown status", [{"field": "status", "message": f"use one of: {known}"}]
            )
        limit = max(1, min(limit, MAX_PAGE))
        after = None if cursor is None else decode_job_cursor(cursor)
        with self._sessions() as session:
            rows = jobs.page(session, teams, status, after, limit + 1, group, array, user, gpu_type)
            more = len(rows) > limit
            rows = rows[:limit]
            arrays = {r.array_id for r in rows if r.array_id is not None} if group else set()
            counts = jobs.array_counts(session, sorted(arrays))
        next_cursor = encode_job_cursor(rows[-1].submitted_at, rows[-1].id) if more else None
        return JobPage(items=[job_out(r) for r in rows], next_cursor=next_cursor, arrays=counts)

    def get(self, principal: Principal, job_id: str) -> JobOut:
        with self._sessions() as session:
            row = self._readable(session, principal, job_id)
            return job_out(row, jobs.attempts(session, job_id))

    def timeline(self, principal: Principal, job_id: str) -> Sequence[EventOut]:
        """The job's events, oldest first."""
        with self._sessions() as session:
            self._readable(session, principal, job_id)
            return [
                EventOut(at=e.at, kind=e.kind, message=e.message)
                for e in jobs.events(session, job_id)
            ]

    def recent(self, principal: Principal, kind: str, limit: int = 10) -> Sequence[JobEventOut]:
        """The newest events of ``kind`` (say ``preempting``) of the jobs ``principal`` reads."""
        teams = principal.readable_teams(sorted(self._config().teams))
        with self._sessions() as session:
            found = jobs.recent_events(session, kind, teams, limit)
            return [
                JobEventOut(
                    at=e.at, kind=e.kind, message=e.message, job_id=j.id, team=j.team, name=j.name
                )
                for e, j in found
            ]

    def _readable(self, session: Session, principal: Principal, job_id: str) -> JobRow:
        row = jobs.get(session, job_id)
        if row is None:
            raise NotFound(f"no job with id {job_id!r}")
        authorize(principal, Action.READ, row.team)
        return row

    def why(self, principal: Principal, job_id: str) -> WhyOut:
        position = length = None
        with self._sessions() as session:
            row = self._readable(session, principal, job_id)
            last_cycle = queue.last_cycle_at(session)
            if row.status == JobStatus.QUEUED:
                position, length = queue.position(session, row)
        reasons = [ReasonOut(**r) for r in row.pending_reasons]
        considered = row.reasons_at
        if row.status == JobStatus.QUEUED and last_cycle:
            considered = max(filter(None, [considered, last_cycle]))
        out = WhyOut(
            job_id=row.id,
            status=row.status,
            last_considered_at=considered if row.status == JobStatus.QUEUED else row.reasons_at,
            summary=self._backend_wait(row) or self._pools_away(row) or _why_summary(row, reasons),
            reasons=reasons if row.status == JobStatus.QUEUED else [],
            queue_position=position,
            queue_length=length,
        )
        if position is not None and self._forecasts is not None:
            found, seen = self._forecasts.forecast(row.id)
            out.estimate = self._forecasts.estimate(found, seen)
            out.waits_for = self._forecasts.waits_for(
                principal, row.team, position, reasons, found, seen
            )
        return out

    def ahead(self, principal: Principal, job_id: str) -> int | None:
        """How many queued jobs of its team come before a queued job (None: not queued)."""
        with self._sessions() as session:
            row = self._readable(session, principal, job_id)
            return queue.ahead_of(session, row) if row.status == JobStatus.QUEUED else None

    def _backend_wait(self, row: JobRow) -> str | None:
        """For an admitted job whose pool's backend cannot be reached: that, and when it is
        tried again (None otherwise). It keeps its place and its GPUs meanwhile."""
        if row.status != JobStatus.ADMITTED or row.pool is None or self._pool_health is None:
            return None
        health = self._pool_health(row.pool)
        if health.available:
            return None
        now = self._clock.monotonic()
        retry = ""
        if health.retry_at is not None:
            retry = f"; tried again in {max(0.0, health.retry_at - now):.0f} s"
        keeps = "the job keeps its place and GPUs"
        after = self._config().scheduler.requeue_unreachable_after_s
        if after is not None and health.down_since is not None:
            left = max(0.0, after - (now - health.down_since))
            keeps += f"; it goes back to the queue if the backend is still away in {left:.0f} s"
        return (
            f"admitted on {row.pool}, whose backend cannot be reached: "
            f"{health.message or 'no reason given'}{retry} ({keeps})"
        )

    def _pools_away(self, row: JobRow) -> str | None:
        """For a queued job whose every pool is unavailable (its probe or its dispatches
        fail): that, with each pool's reason (None otherwise). Nothing is admitted there
        until the pool answers again."""
        if row.status != JobStatus.QUEUED or self._pool_health is None:
            return None
        types = set(row.gpu_types or [])
        candidates = [
            p.name
            for p in self._config().pools
            if (not types or p.gpu_type in types) and (row.backend in (None, "auto", p.backend))
        ]
        if not candidates:
            return None
        away = {name: self._pool_health(name) for name in candidates}
        if any(health.available for health in away.values()):
            return None
        said = "; ".join(f"{name}: {h.message or 'no reason given'}" for name, h in away.items())
        return f"waiting: no pool it may use is available now ({said})"

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

    def get_array(self, principal: Principal, array_id: str) -> ArrayOut:
        with self._sessions() as session:
            first = jobs.array_first(session, array_id)
            if first is None:
                raise NotFound(f"no job array with id {array_id!r}")
            authorize(principal, Action.READ, first.team)
            return _array_out(session, first)

    def cancel_array(self, principal: Principal, array_id: str) -> ArrayOut:
        """Cancel every task of the array: queued ones now, running ones are asked to stop
        (as a cancel of each task would). Tasks already finished are left as they are."""
        now = self._clock.now()
        with self._sessions.begin() as session:
            first = jobs.array_first(session, array_id)
            if first is None:
                raise NotFound(f"no job array with id {array_id!r}")
            authorize(principal, Action.MUTATE, first.team)
            cancelled, requested = jobs.cancel_array(session, array_id, now)
            who = f"by {principal.user} (array {array_id})"
            jobs.add_events(session, cancelled, now, "cancelled", f"{who} while queued")
            jobs.add_events(session, requested, now, "cancel_requested", who)
            out = _array_out(session, first)
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


@dataclass(frozen=True, slots=True)
class _Checked:
    """A submit that passed its checks: what storing it needs."""

    key: str | None
    key_field: str
    team: str
    gpu_types: list[str]
    inputs: list[str]
    outputs: list[str]
    digest: str
    priority_class: str
    priority: int
    container: dict[str, Any] | None = None  # the image and its settings (image_checks)


def _array_out(session: Session, first: JobRow) -> ArrayOut:
    assert first.array_id is not None
    count, low, high = jobs.array_bounds(session, first.array_id)
    return ArrayOut(
        id=first.array_id,
        name=first.name,
        team=first.team,
        user=first.user,
        count=count,
        first_index=low,
        last_index=high,
        submitted_at=first.submitted_at,
        counts=jobs.array_counts(session, [first.array_id]).get(first.array_id, {}),
    )


def _why_summary(row: JobRow, reasons: Sequence[ReasonOut]) -> str:
    if row.status != JobStatus.QUEUED:
        where = f" on {row.pool}" if row.pool else ""
        return f"job is {shown_status(row.status, row.cancel_requested)}{where}; it is not waiting"
    if not reasons:
        return "job is queued and has not been considered by the scheduler yet"
    return "waiting: " + "; ".join(f"{r.gpu_type}: {r.message}" for r in reasons)
