"""Which jobs each transaction changed, numbered in commit order: how the controller reads only
what changed since its last read instead of the whole queue.

Every transaction that changes a job or one of its attempts takes, just before it commits, the
next number of the single-row ``job_changes`` counter and logs the ids of those jobs under it
in ``job_change_log``. Taking the number locks the counter's row until the commit, so numbers
are handed out in commit order: a reader that sees number N committed sees every change
numbered N or less. A reader therefore reads the counter (:func:`current`), then the jobs (all
of them, or those logged above its last number: :func:`changed_since`), and keeps the number:
it misses nothing, and may read a change twice (harmless: a job's view is replaced, not added
to). Only the counter is locked, and only once everything else of the transaction is written,
so two transactions never wait on each other in opposite orders.

Found without help: ORM rows of jobs and attempts added, changed or deleted in the session
(``before_flush``). Told with :func:`touch` / :func:`touch_attempts`: bulk UPDATEs and INSERTs,
which the ORM does not track (the repositories of ``state/`` call them beside each such
statement). Not a change: the pending reasons the controller writes on queued jobs each cycle
(the scheduler reads none of them).

The log is pruned by the controller that read it (:func:`prune`), inside its fenced transaction.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from itertools import chain
from typing import Any, cast

from sqlalchemy import String, Table, bindparam, delete, event, func, insert, select, text, update
from sqlalchemy.orm import Session, sessionmaker

from gpupool.state.models import AttemptRow, JobChangeLogRow, JobChangesRow, JobRow

_COUNTER = cast(Table, JobChangesRow.__table__)
_LOG_TABLE = cast(Table, JobChangeLogRow.__table__)
# Core statements, compiled once: a submit's transaction pays two small statements (one on
# PostgreSQL), not the ORM's bulk-update machinery.
_TAKE = update(_COUNTER).where(_COUNTER.c.id == 1).values(seq=_COUNTER.c.seq + 1)
_LOG = insert(_LOG_TABLE).from_select(
    ["seq", "job_id"],
    select(_COUNTER.c.seq, bindparam("job_id", type_=String)).where(_COUNTER.c.id == 1),
)
# Take the next number and log the jobs under it in one statement.
_PG_LOG = text(
    "WITH taken AS (UPDATE job_changes SET seq = seq + 1 WHERE id = 1 RETURNING seq) "
    "INSERT INTO job_change_log (seq, job_id) SELECT taken.seq, changed.id "
    "FROM taken, unnest(CAST(:ids AS varchar[])) AS changed(id)"
)
_JOBS = "gpupool.changed_jobs"
_ATTEMPTS = "gpupool.changed_attempts"
_CHUNK = 500  # ids per IN list (SQLite's bound on parameters is far above)


def track(factory: sessionmaker[Session]) -> None:
    """Log the job changes of every session ``factory`` makes."""
    event.listen(factory, "before_flush", _collect)
    event.listen(factory, "before_commit", _log)
    event.listen(factory, "after_rollback", _forget)


def touch(session: Session, job_ids: Iterable[str]) -> None:
    """Note jobs changed by a statement the ORM does not track."""
    session.info.setdefault(_JOBS, set()).update(job_ids)


def touch_attempts(session: Session, attempt_ids: Iterable[int]) -> None:
    """Note the jobs of attempts changed by a statement the ORM does not track."""
    session.info.setdefault(_ATTEMPTS, set()).update(attempt_ids)


def current(session: Session) -> int:
    """The number of the last committed transaction that changed jobs."""
    return int(session.scalar(select(JobChangesRow.seq).where(JobChangesRow.id == 1)) or 0)


def changed_since(session: Session, seq: int) -> tuple[int, list[str]]:
    """``(number, ids)``: the current number, then the jobs changed after ``seq`` (read in
    that order, so nothing numbered up to ``number`` is missed)."""
    now = current(session)
    if now <= seq:
        return now, []
    ids = session.scalars(
        select(JobChangeLogRow.job_id).where(JobChangeLogRow.seq > seq).distinct()
    ).all()
    return now, sorted(ids)


def prune(session: Session, upto: int) -> None:
    """Forget the log up to ``upto`` (a reader that has read it; a new reader reads all)."""
    session.execute(delete(JobChangeLogRow).where(JobChangeLogRow.seq <= upto))


def chunks(ids: Sequence[Any]) -> Iterable[Sequence[Any]]:
    return (ids[i : i + _CHUNK] for i in range(0, len(ids), _CHUNK))


def _collect(session: Session, _context: Any, _instances: Any) -> None:
    jobs: set[str] | None = None
    for row in chain(session.new, session.dirty, session.deleted):
        if isinstance(row, JobRow):
            job_id = row.id
        elif isinstance(row, AttemptRow):
            job_id = row.job_id
        else:
            continue
        if jobs is None:
            jobs = session.info.setdefault(_JOBS, set())
        jobs.add(job_id)


def _log(session: Session) -> None:
    if session.new or session.dirty or session.deleted:
        session.flush()  # what a last flush would change is logged too
    jobs: set[str] = session.info.pop(_JOBS, set())
    attempts: set[int] = session.info.pop(_ATTEMPTS, set())
    if attempts:
        for some in chunks(sorted(attempts)):
            jobs.update(
                session.scalars(select(AttemptRow.job_id).where(AttemptRow.id.in_(some))).all()
            )
    if not jobs:
        return
    connection = session.connection()
    ids = sorted(jobs)
    if connection.dialect.name == "postgresql":
        connection.execute(_PG_LOG, {"ids": ids})
    else:  # one writer at a time: taking the number first is enough
        connection.execute(_TAKE)
        connection.execute(_LOG, [{"job_id": j} for j in ids])


def _forget(session: Session) -> None:
    session.info.pop(_JOBS, None)
    session.info.pop(_ATTEMPTS, None)


def highest(session: Session) -> int:
    """The highest number logged (0 when the log is empty): for tests and health."""
    return int(session.scalar(select(func.max(JobChangeLogRow.seq))) or 0)
