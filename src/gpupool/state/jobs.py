"""The job aggregate: a job row, its attempts and its events (reads and single-row writes).

Every function takes the caller's ``Session`` and neither commits nor rolls back: the caller
owns the transaction (``SessionFactory.begin()``), so several writes land together or not at
all. Rows returned are the ORM rows of ``models.py``, attached to that session; changing their
attributes inside a transaction writes them at commit.

The controller's column queries over the whole queue live in ``queue.py``.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from datetime import datetime

from sqlalchemy import and_, func, or_, select, update
from sqlalchemy.orm import Session

from gpupool.core.jobs import ACTIVE, JobStatus
from gpupool.state.db import rows_changed as _changed
from gpupool.state.models import AttemptRow, EventRow, JobRow

_ACTIVE = [s.value for s in ACTIVE]


def add(session: Session, job: JobRow) -> None:
    """Add a new job; a second job with the same (user, idempotency key) fails at commit with
    ``IntegrityError`` (see ``state.db``)."""
    session.add(job)


def add_event(session: Session, job_id: str, at: datetime, kind: str, message: str) -> None:
    """Append to the job's history (messages are redacted by the row, D4)."""
    session.add(EventRow(job_id=job_id, at=at, kind=kind, message=message))


def get(session: Session, job_id: str) -> JobRow | None:
    return session.get(JobRow, job_id)


def by_idempotency_key(session: Session, user: str, key: str) -> JobRow | None:
    return session.scalar(select(JobRow).where(JobRow.user == user, JobRow.idempotency_key == key))


def page(
    session: Session,
    teams: Iterable[str],
    status: str | None,
    after: tuple[datetime, str] | None,
    limit: int,
) -> list[JobRow]:
    """Jobs of ``teams``, newest first, at most ``limit``; ``after``: the (submitted_at, id) of
    the last job of the previous page (the order is total, so pages neither skip nor repeat)."""
    query = select(JobRow).where(JobRow.team.in_(list(teams)))
    if status is not None:
        query = query.where(JobRow.status == status)
    if after is not None:
        at, last_id = after
        query = query.where(
            or_(JobRow.submitted_at < at, and_(JobRow.submitted_at == at, JobRow.id < last_id))
        )
    query = query.order_by(JobRow.submitted_at.desc(), JobRow.id.desc()).limit(limit)
    return list(session.scalars(query))


def cancel_if_queued(session: Session, job: JobRow, now: datetime) -> bool:
    """Cancel ``job`` if it is still queued, in one conditional statement (a controller
    admitting it at the same time cannot both win); ``job`` is reloaded either way."""
    cancelled = _changed(
        session,
        update(JobRow)
        .where(JobRow.id == job.id, JobRow.status == JobStatus.QUEUED.value)
        .values(status=JobStatus.CANCELLED.value, finished_at=now, message="cancelled"),
    )
    session.refresh(job)
    return bool(cancelled)


# -- attempts -------------------------------------------------------------------------------


def attempts(session: Session, job_id: str) -> Sequence[AttemptRow]:
    """The job's attempts, first to last."""
    return list(
        session.scalars(
            select(AttemptRow).where(AttemptRow.job_id == job_id).order_by(AttemptRow.number)
        )
    )


def attempt(session: Session, attempt_id: int) -> AttemptRow | None:
    return session.get(AttemptRow, attempt_id)


def newest_attempt_with_handle(session: Session, job_id: str) -> AttemptRow | None:
    """The last attempt a backend accepted (the one whose output there is to read)."""
    return session.scalar(
        select(AttemptRow)
        .where(AttemptRow.job_id == job_id, AttemptRow.handle.is_not(None))
        .order_by(AttemptRow.number.desc())
        .limit(1)
    )


def active_attempt(session: Session, job_id: str, number: int) -> tuple[JobRow, AttemptRow] | None:
    """The job and its attempt ``number`` if that attempt is still active (admitted or
    running); None when either is gone or the attempt already ended."""
    job = session.get(JobRow, job_id)
    found = session.scalar(
        select(AttemptRow).where(AttemptRow.job_id == job_id, AttemptRow.number == number)
    )
    if job is None or found is None or found.status not in _ACTIVE:
        return None
    return job, found


def lost_attempts(session: Session, job_id: str) -> int:
    """How many of the job's attempts were lost, counting changes not yet flushed."""
    session.flush()
    lost = session.scalar(
        select(func.count())
        .select_from(AttemptRow)
        .where(AttemptRow.job_id == job_id, AttemptRow.status == JobStatus.LOST.value)
    )
    return lost or 0
