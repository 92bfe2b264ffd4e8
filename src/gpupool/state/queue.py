"""The controller's reads and writes of the whole queue: what each cycle needs, fast.

Reads return plain column rows (``ColumnRow``: named tuples, compared by value), not ORM
objects: a cycle over tens of thousands of queued jobs must not pay for loading whole rows
(commands, environments). They run on the session's connection, so they see the session's
transaction. Writes take plain values (never scheduler types: the store knows no policy)
and, like every repository in ``state/``, leave the commit to the caller: the controller
writes each cycle's decisions in one transaction, before acting on them (crash safety, X3).
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime
from typing import Any
from typing import cast as typed

from sqlalchemy import (
    JSON,
    Row,
    String,
    Table,
    Text,
    and_,
    any_,
    case,
    cast,
    func,
    literal,
    or_,
    select,
    update,
)
from sqlalchemy.dialects.postgresql import ARRAY
from sqlalchemy.orm import Session, aliased

from gpupool.core.jobs import ACTIVE, JobStatus
from gpupool.state import changes
from gpupool.state.db import rows_changed as _changed
from gpupool.state.models import AttemptRow, ControllerStateRow, EventRow, JobRow

_ACTIVE = [s.value for s in ACTIVE]

ColumnRow = Row[Any]
_REASONS_CHUNK = 2000  # job ids per statement that writes one set of reasons

# Columns the scheduler needs of a queued job: loading these instead of whole rows keeps a
# cycle over many queued jobs cheap (no JSON decoding of commands and environments).
PENDING_COLUMNS = (
    JobRow.id,
    JobRow.team,
    JobRow.priority,
    JobRow.submitted_at,
    JobRow.gpus,
    JobRow.nodes,
    JobRow.cpus,
    JobRow.memory_gb,
    # As stored (JSON text): decoded only for a row that changed since the last cycle.
    cast(JobRow.gpu_types, Text).label("gpu_types"),
    JobRow.attempt,
    JobRow.max_runtime_s,
    JobRow.backend,
    # When a requeued job re-entered the queue: its last attempt's end. Looked up only for
    # jobs that had an attempt, not for every queued job every cycle.
    case(
        (
            JobRow.attempt > 0,
            select(func.max(AttemptRow.finished_at))
            .where(AttemptRow.job_id == JobRow.id)
            .correlate(JobRow)
            .scalar_subquery(),
        ),
        else_=None,
    ).label("queued_at"),
)
# ... and of an active one (admitted or running), joined with its current attempt.
_EARLIER = aliased(AttemptRow)  # the job's earlier attempts, beside the current one
ACTIVE_COLUMNS = (
    JobRow.id,
    JobRow.team,
    JobRow.priority,
    JobRow.cpus,
    JobRow.memory_gb,
    AttemptRow.gpu_type,
    AttemptRow.pool,
    AttemptRow.placements,
    AttemptRow.admitted_at,
    AttemptRow.started_at,
    JobRow.max_runtime_s,
    JobRow.cancel_requested,
    AttemptRow.cancel_sent,
    AttemptRow.preempted_by,
    # How often the job was preempted before this attempt (the scheduler's cap per job); looked
    # up only for jobs on a later attempt.
    case(
        (
            JobRow.attempt > 1,
            select(func.count(_EARLIER.id))
            .where(
                _EARLIER.job_id == JobRow.id,
                _EARLIER.number < JobRow.attempt,
                _EARLIER.preempted_by.is_not(None),
            )
            .correlate(JobRow)
            .scalar_subquery(),
        ),
        else_=0,
    ).label("preemptions"),
)

_CURRENT_ATTEMPT = and_(AttemptRow.job_id == JobRow.id, AttemptRow.number == JobRow.attempt)


# -- reads for a cycle ----------------------------------------------------------------------


def queued(session: Session) -> Sequence[ColumnRow]:
    """Every queued job as ``PENDING_COLUMNS``, team by team (parking finds each team's jobs
    together), in queue order within a team."""
    return (
        session.connection()
        .execute(
            select(*PENDING_COLUMNS)
            .where(JobRow.status == JobStatus.QUEUED.value)
            .order_by(JobRow.team, JobRow.priority.desc(), JobRow.submitted_at, JobRow.id)
        )
        .all()
    )


def active(session: Session) -> Sequence[ColumnRow]:
    """Every active job as ``ACTIVE_COLUMNS``, in the same order every cycle."""
    return (
        session.connection()
        .execute(
            select(*ACTIVE_COLUMNS)
            .join(AttemptRow, _CURRENT_ATTEMPT)
            .where(JobRow.status.in_(_ACTIVE))
            .order_by(JobRow.id)
        )
        .all()
    )


def queued_among(session: Session, ids: Sequence[str]) -> list[ColumnRow]:
    """The jobs of ``ids`` that are queued, as ``PENDING_COLUMNS`` (no order)."""
    found: list[ColumnRow] = []
    for some in changes.chunks(ids):
        found.extend(
            session.connection().execute(
                select(*PENDING_COLUMNS).where(
                    JobRow.id.in_(some), JobRow.status == JobStatus.QUEUED.value
                )
            )
        )
    return found


def active_among(session: Session, ids: Sequence[str]) -> list[ColumnRow]:
    """The jobs of ``ids`` that are active, as ``ACTIVE_COLUMNS`` (no order)."""
    found: list[ColumnRow] = []
    for some in changes.chunks(ids):
        found.extend(
            session.connection().execute(
                select(*ACTIVE_COLUMNS)
                .join(AttemptRow, _CURRENT_ATTEMPT)
                .where(JobRow.id.in_(some), JobRow.status.in_(_ACTIVE))
            )
        )
    return found


def usage_since(session: Session, horizon: datetime) -> Sequence[ColumnRow]:
    """(team, gpus, nodes, started_at, finished_at) of every attempt that ran after
    ``horizon`` or still runs: the input of fair share's decayed usage."""
    return session.execute(
        select(
            JobRow.team, JobRow.gpus, JobRow.nodes, AttemptRow.started_at, AttemptRow.finished_at
        )
        .join(AttemptRow, AttemptRow.job_id == JobRow.id)
        .where(
            AttemptRow.started_at.is_not(None),
            or_(AttemptRow.finished_at.is_(None), AttemptRow.finished_at > horizon),
        )
    ).all()


def active_usage(session: Session) -> Sequence[ColumnRow]:
    """(team, gpus, nodes, gpu_type, pool, borrowed) of every active job's current attempt."""
    return session.execute(
        select(
            JobRow.team,
            JobRow.gpus,
            JobRow.nodes,
            AttemptRow.gpu_type,
            AttemptRow.pool,
            AttemptRow.borrowed,
        )
        .join(AttemptRow, _CURRENT_ATTEMPT)
        .where(JobRow.status.in_(_ACTIVE))
    ).all()


def open_counts(session: Session) -> dict[tuple[str, str], int]:
    """How many jobs each team has queued or active, per (team, status)."""
    rows = session.execute(
        select(JobRow.team, JobRow.status, func.count())
        .where(JobRow.status.in_([JobStatus.QUEUED.value, *_ACTIVE]))
        .group_by(JobRow.team, JobRow.status)
    ).all()
    return {(team, status): n for team, status, n in rows}


def ahead_of(session: Session, job: JobRow) -> int:
    """How many queued jobs of ``job``'s team come before it in the team's queue: a higher
    priority, or the same priority and submitted earlier (the scheduler's order within a
    team, ``scheduler`` ordering; ties on the id)."""
    earlier = or_(
        JobRow.priority > job.priority,
        and_(
            JobRow.priority == job.priority,
            or_(
                JobRow.submitted_at < job.submitted_at,
                and_(JobRow.submitted_at == job.submitted_at, JobRow.id < job.id),
            ),
        ),
    )
    count = session.scalar(
        select(func.count())
        .select_from(JobRow)
        .where(JobRow.team == job.team, JobRow.status == JobStatus.QUEUED.value, earlier)
    )
    return int(count or 0)


# -- a cycle's decisions --------------------------------------------------------------------


def admit(
    session: Session,
    job_id: str,
    attempt: int,
    *,
    pool: str,
    gpu_type: str,
    placements: list[dict[str, Any]],
    borrowed: int,
    now: datetime,
) -> int | None:
    """Admit the queued job as attempt ``attempt + 1``; the new number, or None when the job
    changed since it was read (a cancel that raced with the cycle wins)."""
    number = attempt + 1
    # Neither flushes the rows added by the cycle's earlier admissions (they go in at commit,
    # together) nor looks for this job among the session's objects (the cycle loads none).
    with session.no_autoflush:
        won = _changed(
            session,
            update(JobRow)
            .where(
                JobRow.id == job_id,
                JobRow.status == JobStatus.QUEUED.value,
                JobRow.attempt == attempt,
            )
            .values(
                status=JobStatus.ADMITTED.value,
                attempt=number,
                pool=pool,
                gpu_type=gpu_type,
                pending_reasons=[],
                reasons_at=now,
                message="",
            )
            .execution_options(synchronize_session=False),
        )
    if not won:
        return None
    changes.touch(session, (job_id,))
    session.add(
        AttemptRow(
            job_id=job_id,
            number=number,
            status=JobStatus.ADMITTED.value,
            pool=pool,
            gpu_type=gpu_type,
            placements=placements,
            borrowed=borrowed,
            admitted_at=now,
            message="",
            cancel_sent=False,
        )
    )
    session.add(
        EventRow(
            job_id=job_id,
            at=now,
            kind="admitted",
            message=f"attempt {number} on {pool} ({gpu_type})",
        )
    )
    return number


def mark_victim(
    session: Session, job_id: str, preemptor_id: str, reason: str, now: datetime
) -> bool:
    """Mark the job's active attempt as yielding to ``preemptor_id`` (once); True if marked."""
    marked = _changed(
        session,
        update(AttemptRow)
        .where(
            AttemptRow.job_id == job_id,
            AttemptRow.status.in_(_ACTIVE),
            AttemptRow.preempted_by.is_(None),
        )
        .values(preempted_by=preemptor_id),
    )
    if marked:
        changes.touch(session, (job_id,))
        session.add(
            EventRow(
                job_id=job_id,
                at=now,
                kind="preempting",
                message=f"yields to {preemptor_id}: {reason}",
            )
        )
    return bool(marked)


def write_reasons(
    session: Session, changed: Sequence[tuple[list[dict[str, str]], Sequence[str]]], now: datetime
) -> None:
    """Store each ``(reasons, job ids)`` on those jobs that are still queued: one statement per
    ``_REASONS_CHUNK`` jobs (most of a long queue waits for a few sets of reasons, so a large
    queue's first cycle, which writes them all, is a few hundred statements)."""
    jobs = typed(Table, JobRow.__table__)
    queued_now = jobs.c.status == JobStatus.QUEUED.value
    for reasons, ids in changed:
        for start in range(0, len(ids), _REASONS_CHUNK):
            # Found by primary key only; a job that left the queue keeps what it had. (With
            # the status in the WHERE, PostgreSQL's generic plan for a repeated statement may
            # scan every queued job through the status index, once per statement.)
            session.execute(
                update(jobs)
                .where(_among(session, jobs.c.id, ids[start : start + _REASONS_CHUNK]))
                .values(
                    pending_reasons=case(
                        (queued_now, literal(reasons, JSON)),
                        else_=jobs.c.pending_reasons,
                    ),
                    reasons_at=case((queued_now, now), else_=jobs.c.reasons_at),
                )
            )


def _among(session: Session, column: Any, ids: Sequence[str]) -> Any:
    """``column IN ids``; on PostgreSQL as ``= ANY(array)``: one parameter, where an IN list
    costs the driver and SQLAlchemy a rewrite of the statement per id."""
    if session.get_bind().dialect.name == "postgresql":
        return column == any_(literal(list(ids), ARRAY(String)))
    return column.in_(ids)


def record_cycle(session: Session, now: datetime) -> None:
    """Note that the scheduler looked at the queue at ``now`` (for ``why`` and health)."""
    state = session.get(ControllerStateRow, 1)
    if state is None:
        session.add(ControllerStateRow(id=1, last_cycle_at=now, holder=""))
    else:
        state.last_cycle_at = now


def last_cycle_at(session: Session) -> datetime | None:
    state = session.get(ControllerStateRow, 1)
    return None if state is None else state.last_cycle_at


# -- dispatch, polls and cancels ------------------------------------------------------------


def to_dispatch(session: Session) -> list[tuple[JobRow, AttemptRow]]:
    """Admitted current attempts no backend has accepted yet, with their jobs."""
    return list(
        session.execute(
            select(JobRow, AttemptRow)
            .join(AttemptRow, _CURRENT_ATTEMPT)
            .where(AttemptRow.status == JobStatus.ADMITTED.value, AttemptRow.handle.is_(None))
        )
        .tuples()
        .all()
    )


def handles_to_poll(session: Session) -> Sequence[ColumnRow]:
    """(pool, handle, status) of every active attempt a backend accepted."""
    return session.execute(
        select(AttemptRow.pool, AttemptRow.handle, AttemptRow.status).where(
            AttemptRow.status.in_(_ACTIVE), AttemptRow.handle.is_not(None)
        )
    ).all()


def handle_of(session: Session, job_id: str, number: int) -> dict[str, Any] | None:
    return session.scalar(
        select(AttemptRow.handle).where(AttemptRow.job_id == job_id, AttemptRow.number == number)
    )


def cancels_due(session: Session) -> Sequence[ColumnRow]:
    """(attempt id, handle, pool) of active attempts to signal and not signalled yet: their
    job was cancelled, or they were chosen as a preemption victim."""
    return session.execute(
        select(AttemptRow.id, AttemptRow.handle, AttemptRow.pool)
        .join(JobRow, and_(JobRow.id == AttemptRow.job_id, JobRow.attempt == AttemptRow.number))
        .where(
            or_(JobRow.cancel_requested.is_(True), AttemptRow.preempted_by.is_not(None)),
            AttemptRow.status.in_(_ACTIVE),
            AttemptRow.handle.is_not(None),
            AttemptRow.cancel_sent.is_(False),
        )
    ).all()


def abandoned_to_stop(session: Session) -> Sequence[ColumnRow]:
    """(attempt id, job id, number, pool) of attempts given up on before any backend accepted
    them (lost without a handle) that were not looked for yet: a submission may still have
    reached the backend unseen."""
    return session.execute(
        select(AttemptRow.id, AttemptRow.job_id, AttemptRow.number, AttemptRow.pool).where(
            AttemptRow.status == JobStatus.LOST.value,
            AttemptRow.handle.is_(None),
            AttemptRow.cancel_sent.is_(False),
        )
    ).all()


def mark_cancel_sent(session: Session, attempt_id: int) -> None:
    session.execute(update(AttemptRow).where(AttemptRow.id == attempt_id).values(cancel_sent=True))
    changes.touch_attempts(session, (attempt_id,))


def position(session: Session, job: JobRow) -> tuple[int, int]:
    """A queued job's place in its team's queue (1: next) and the queue's length, in the
    controller's queue order: priority high first, then submit time, then id."""
    queued = and_(JobRow.team == job.team, JobRow.status == JobStatus.QUEUED.value)
    ahead = or_(
        JobRow.priority > job.priority,
        and_(JobRow.priority == job.priority, JobRow.submitted_at < job.submitted_at),
        and_(
            JobRow.priority == job.priority,
            JobRow.submitted_at == job.submitted_at,
            JobRow.id < job.id,
        ),
    )
    before, length = session.execute(
        select(func.count(case((ahead, 1))), func.count()).select_from(JobRow).where(queued)
    ).one()
    return int(before) + 1, int(length)
