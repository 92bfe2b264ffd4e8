"""The job aggregate: a job row, its attempts and its events (reads and single-row writes).

Every function takes the caller's ``Session`` and neither commits nor rolls back: the caller
owns the transaction (``SessionFactory.begin()``), so several writes land together or not at
all. Rows returned are the ORM rows of ``models.py``, attached to that session; changing their
attributes inside a transaction writes them at commit.

The controller's column queries over the whole queue live in ``queue.py``. A job array's tasks
are stored with one multi-row insert (:func:`add_many`), not one ORM add each: thousands of
tasks in one transaction stay a few statements.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Sequence
from datetime import datetime
from itertools import chain
from typing import Any

from sqlalchemy import (
    JSON,
    ColumnElement,
    String,
    and_,
    cast,
    false,
    func,
    insert,
    or_,
    select,
    update,
)
from sqlalchemy.exc import IntegrityError
from sqlalchemy.orm import Session, aliased

from gpupool.core.jobs import ACTIVE, CANCELLING, JobStatus
from gpupool.data.redaction import redact
from gpupool.state import changes
from gpupool.state.db import rows_changed as _changed
from gpupool.state.models import AttemptRow, EventRow, JobRow

_ACTIVE = [s.value for s in ACTIVE]
_CHUNK = 500  # ids per IN list
_JOBS: Any = JobRow.__table__


def add(session: Session, job: JobRow) -> None:
    """Insert a new job now, with one plain INSERT of the columns ``job`` sets (the others
    take their defaults): a submit's row costs a fraction of the ORM's flush of it. ``job``
    stays out of the session: read it, but a change to it is not written. A second job with
    the same (user, idempotency key) fails with ``IntegrityError`` (see ``state.db``)."""
    values = {c.key: job.__dict__[c.key] for c in _JOBS.columns if c.key in job.__dict__}
    session.connection().execute(_JOBS.insert(), values)
    changes.touch(session, (values["id"],))


def add_many(session: Session, rows: Sequence[dict[str, Any]]) -> None:
    """Insert many new jobs (a job array's tasks), each a mapping of ``JobRow`` columns, in
    one executemany; a duplicate (user, idempotency key) fails at commit as in :func:`add`."""
    if rows:
        _insert_many(session, JobRow.__table__, rows)
        changes.touch(session, (row["id"] for row in rows))


def add_event(session: Session, job_id: str, at: datetime, kind: str, message: str) -> None:
    """Append to the job's history (messages are redacted by the row, D4)."""
    session.add(EventRow(job_id=job_id, at=at, kind=kind, message=message))


def add_events(
    session: Session, job_ids: Sequence[str], at: datetime, kind: str, message: str
) -> None:
    """The same event for many jobs, in one executemany. A bulk insert skips the row's
    validator, so the message is redacted here (D4)."""
    if job_ids:
        text = redact(message) if message else message
        _insert_many(
            session,
            EventRow.__table__,
            [{"job_id": j, "at": at, "kind": kind, "message": text} for j in job_ids],
        )


def _insert_many(session: Session, table: Any, rows: Sequence[dict[str, Any]]) -> None:
    """Insert ``rows`` (all with the same keys) into ``table`` inside the session's
    transaction. On PostgreSQL through COPY: psycopg's executemany costs a round of the
    pipeline per row (about 2,000 rows/s here), COPY streams them (tens of thousands/s).
    Elsewhere one executemany (SQLite runs it in-process, fast enough)."""
    connection = session.connection()
    if connection.dialect.name != "postgresql":
        session.execute(insert(table), list(rows))
        return
    columns = list(rows[0])
    as_json = {c for c in columns if isinstance(table.c[c].type, JSON)}
    quoted = ", ".join(f'"{c}"' for c in columns)
    raw = connection.connection.driver_connection
    assert raw is not None
    texts: dict[int, str] = {}  # an array's tasks share their values: encode each once
    statement = f'COPY "{table.name}" ({quoted}) FROM STDIN'
    try:
        with raw.cursor() as cursor, cursor.copy(statement) as copy:
            for row in rows:
                copy.write_row(
                    [_json_text(row[c], texts) if c in as_json else row[c] for c in columns]
                )
    except connection.dialect.dbapi.IntegrityError as exc:  # type: ignore[union-attr]
        # The driver's own error bypasses SQLAlchemy: raise what callers expect of an insert.
        raise IntegrityError(statement, None, exc) from exc


def _json_text(value: Any, texts: dict[int, str]) -> str:
    text = texts.get(id(value))
    if text is None:
        text = texts[id(value)] = json.dumps(value)
    return text


def get(session: Session, job_id: str) -> JobRow | None:
    return session.get(JobRow, job_id)


def by_idempotency_key(session: Session, user: str, key: str) -> JobRow | None:
    return session.scalar(select(JobRow).where(JobRow.user == user, JobRow.idempotency_key == key))


def _shown_as(job: Any, status: str) -> ColumnElement[bool]:
    """Jobs users see in ``status`` (``core.jobs.shown_status``): an active job being
    cancelled is ``cancelling``, not admitted or running."""
    if status == CANCELLING:
        return and_(job.status.in_(_ACTIVE), job.cancel_requested.is_(True))
    if status in _ACTIVE:
        return and_(job.status == status, job.cancel_requested.is_(False))
    return job.status == status  # type: ignore[no-any-return]


def page(
    session: Session,
    teams: Iterable[str],
    status: str | None,
    after: tuple[datetime, str] | None,
    limit: int,
    grouped: bool = False,
    array_id: str | None = None,
    user: str | None = None,
    gpu_type: str | None = None,
) -> list[JobRow]:
    """Jobs of ``teams``, newest first, at most ``limit``; ``after``: the (submitted_at, id) of
    the last job of the previous page (the order is total, so pages neither skip nor repeat).

    ``grouped``: an array stands as one row, its first task (lowest index) among those that
    match ``status``; ``array_id``: only that array's tasks; ``user``: only theirs;
    ``gpu_type``: jobs placed on that type, or still unplaced and asking for it."""
    query = select(JobRow).where(JobRow.team.in_(list(teams)))
    if user is not None:
        query = query.where(JobRow.user == user)
    if gpu_type is not None:
        # Type names are [a-z0-9-] (spec), so the JSON text match needs no escaping.
        asked = cast(JobRow.gpu_types, String).like(f'%"{gpu_type}"%')
        query = query.where(
            or_(JobRow.gpu_type == gpu_type, and_(JobRow.gpu_type.is_(None), asked))
        )
    if status is not None:
        query = query.where(_shown_as(JobRow, status))
    if array_id is not None:
        query = query.where(JobRow.array_id == array_id)
    if grouped:
        task = aliased(JobRow)
        first = select(func.min(task.array_index)).where(task.array_id == JobRow.array_id)
        if status is not None:
            first = first.where(_shown_as(task, status))
        query = query.where(
            or_(JobRow.array_id.is_(None), JobRow.array_index == first.scalar_subquery())
        )
    if after is not None:
        at, last_id = after
        query = query.where(
            or_(JobRow.submitted_at < at, and_(JobRow.submitted_at == at, JobRow.id < last_id))
        )
    query = query.order_by(JobRow.submitted_at.desc(), JobRow.id.desc()).limit(limit)
    return list(session.scalars(query))


def events(session: Session, job_id: str) -> list[EventRow]:
    """The job's history, oldest first (messages were redacted when written)."""
    return list(
        session.scalars(
            select(EventRow).where(EventRow.job_id == job_id).order_by(EventRow.at, EventRow.id)
        )
    )


def recent_events(
    session: Session, kind: str, teams: Iterable[str], limit: int
) -> list[tuple[EventRow, JobRow]]:
    """The newest ``limit`` events of ``kind`` of jobs of ``teams``, newest first, each with
    its job."""
    rows = session.execute(
        select(EventRow, JobRow)
        .join(JobRow, JobRow.id == EventRow.job_id)
        .where(EventRow.kind == kind, JobRow.team.in_(list(teams)))
        .order_by(EventRow.id.desc())
        .limit(limit)
    )
    return [(event, job) for event, job in rows]


def cancel_if_queued(session: Session, job: JobRow, now: datetime) -> bool:
    """Cancel ``job`` if it is still queued, in one conditional statement (a controller
    admitting it at the same time cannot both win); ``job`` is reloaded either way."""
    cancelled = _changed(
        session,
        update(JobRow)
        .where(JobRow.id == job.id, JobRow.status == JobStatus.QUEUED.value)
        .values(status=JobStatus.CANCELLED.value, finished_at=now, message="cancelled"),
    )
    if cancelled:
        changes.touch(session, (job.id,))
    session.refresh(job)
    return bool(cancelled)


# -- arrays ---------------------------------------------------------------------------------


def array_first(session: Session, array_id: str) -> JobRow | None:
    """The array's task with the lowest index (it carries the array's idempotency key)."""
    return session.scalar(
        select(JobRow).where(JobRow.array_id == array_id).order_by(JobRow.array_index).limit(1)
    )


def array_bounds(session: Session, array_id: str) -> tuple[int, int, int]:
    """``(tasks, lowest index, highest index)`` of the array; ``(0, 0, 0)`` when it has none."""
    row = session.execute(
        select(func.count(), func.min(JobRow.array_index), func.max(JobRow.array_index)).where(
            JobRow.array_id == array_id
        )
    ).one()
    return int(row[0]), int(row[1] or 0), int(row[2] or 0)


def array_counts(session: Session, array_ids: Iterable[str]) -> dict[str, dict[str, int]]:
    """Tasks per status of each array: ``{array id: {status: count}}``."""
    counts: dict[str, dict[str, int]] = {}
    ids = list(array_ids)
    if not ids:
        return counts
    rows = session.execute(
        select(JobRow.array_id, JobRow.status, func.count())
        .where(JobRow.array_id.in_(ids))
        .group_by(JobRow.array_id, JobRow.status)
    )
    for array_id, status, count in rows:
        counts.setdefault(array_id, {})[status] = count
    return counts


def cancel_array(session: Session, array_id: str, now: datetime) -> tuple[list[str], list[str]]:
    """Cancel the array's queued tasks and ask its active ones to stop, each in one
    conditional statement (as :func:`cancel_if_queued`, a task the controller admits at the
    same time is either cancelled here or asked to stop, never neither). Returns the ids
    cancelled and the ids newly asked to stop."""
    cancelled = session.scalars(
        update(JobRow)
        .where(JobRow.array_id == array_id, JobRow.status == JobStatus.QUEUED.value)
        .values(status=JobStatus.CANCELLED.value, finished_at=now, message="cancelled")
        .returning(JobRow.id),
        execution_options={"synchronize_session": False},
    ).all()
    requested = session.scalars(
        update(JobRow)
        .where(
            JobRow.array_id == array_id,
            JobRow.status.in_(_ACTIVE),
            JobRow.cancel_requested == false(),
        )
        .values(cancel_requested=True)
        .returning(JobRow.id),
        execution_options={"synchronize_session": False},
    ).all()
    changes.touch(session, chain(cancelled, requested))
    return list(cancelled), list(requested)


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


def active_attempts(
    session: Session, keys: Sequence[tuple[str, int]]
) -> dict[tuple[str, int], tuple[JobRow, AttemptRow]]:
    """:func:`active_attempt` for many ``(job id, number)`` at once, in two queries per
    ``_CHUNK`` keys (not two per key): the ones still active, by key."""
    found: dict[tuple[str, int], tuple[JobRow, AttemptRow]] = {}
    wanted = set(keys)
    ids = sorted({job_id for job_id, _ in wanted})
    for start in range(0, len(ids), _CHUNK):
        chunk = ids[start : start + _CHUNK]
        by_id = {j.id: j for j in session.scalars(select(JobRow).where(JobRow.id.in_(chunk)))}
        attempts = session.scalars(
            select(AttemptRow).where(AttemptRow.job_id.in_(chunk), AttemptRow.status.in_(_ACTIVE))
        )
        for attempt in attempts:
            key = (attempt.job_id, attempt.number)
            job = by_id.get(attempt.job_id)
            if key in wanted and job is not None:
                found[key] = (job, attempt)
    return found


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
