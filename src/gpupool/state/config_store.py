"""Configuration versions and the jobs a configuration change affects (repository).

Every applied cluster configuration is a numbered row of ``config_versions``; the highest
number is the running one. Every function takes the caller's ``Session`` and neither commits
nor rolls back: the caller owns the transaction.

Invariants:

* Versions are only appended, numbered 1, 2, 3, ... without gaps.
* :func:`append` stores version ``base + 1`` only while ``base`` is still the newest version
  (an optimistic check). The number is the primary key, so two applies based on the same
  version cannot both be stored, even on PostgreSQL where the check and the insert of two
  transactions may interleave: the later insert collides, and the same ``Conflict`` is raised
  (:func:`stale_version`).
* :func:`current_version` reads one indexed value, so processes can poll it cheaply to
  notice a change made by another process.
"""

from __future__ import annotations

import hashlib
from collections.abc import Collection
from dataclasses import dataclass
from datetime import datetime

from sqlalchemy import func, or_, select, update
from sqlalchemy.exc import IntegrityError
from sqlalchemy.orm import Session

from gpupool.core.errors import Conflict
from gpupool.core.jobs import ACTIVE, JobStatus
from gpupool.state import changes
from gpupool.state.db import rows_changed as _changed
from gpupool.state.models import ConfigVersionRow, EventRow, JobRow

_ACTIVE = [s.value for s in ACTIVE]
_SUMMARY_MAX = 500
_SOURCE_MAX = 500
_ACTOR_MAX = 200


def stale_version(base: int, current: int) -> Conflict:
    """The configuration changed since the version a change was based on (HTTP 409)."""
    return Conflict(
        f"the configuration changed since version {base} (now version {current}); "
        "run the diff again and apply against the new version",
        details={"reason": "stale_version", "base_version": base, "current_version": current},
    )


@dataclass(frozen=True)
class JobInUse:
    """A queued or active job that a removal would leave without its team or pool."""

    id: str
    team: str
    status: str
    pool: str | None


def digest(text: str) -> str:
    return hashlib.sha256(text.encode("utf-8")).hexdigest()


def current_version(session: Session) -> int:
    """The newest version number; 0 while nothing is stored."""
    return int(session.scalar(select(func.max(ConfigVersionRow.version))) or 0)


def current(session: Session) -> ConfigVersionRow | None:
    return session.scalar(
        select(ConfigVersionRow).order_by(ConfigVersionRow.version.desc()).limit(1)
    )


def get(session: Session, version: int) -> ConfigVersionRow | None:
    return session.get(ConfigVersionRow, version)


def history(session: Session, limit: int = 50) -> list[ConfigVersionRow]:
    """The newest ``limit`` versions, newest first."""
    return list(
        session.scalars(
            select(ConfigVersionRow).order_by(ConfigVersionRow.version.desc()).limit(limit)
        )
    )


def append(
    session: Session,
    *,
    base: int,
    text: str,
    at: datetime,
    applied_by: str,
    source: str,
    summary: str,
) -> ConfigVersionRow:
    """Store ``text`` as version ``base + 1``; ``Conflict`` (:func:`stale_version`) unless
    ``base`` is the newest version. The row is flushed here: a collision surfaces now, not
    at commit."""
    now = current_version(session)
    if now != base:
        raise stale_version(base, now)
    row = ConfigVersionRow(
        version=base + 1,
        applied_at=at,
        applied_by=applied_by[:_ACTOR_MAX],
        source=source[:_SOURCE_MAX],
        digest=digest(text),
        summary=summary[:_SUMMARY_MAX],
        text=text,
    )
    session.add(row)
    try:
        session.flush()
    except IntegrityError:
        raise stale_version(base, base + 1) from None
    return row


def jobs_in_use(
    session: Session, teams: Collection[str], pools: Collection[str], limit: int | None = 1000
) -> list[JobInUse]:
    """Queued or active jobs of ``teams``, and active jobs on ``pools`` (queued jobs have no
    pool yet), oldest first; the first ``limit`` of them (None: all)."""
    if not teams and not pools:
        return []
    rows = session.execute(
        select(JobRow.id, JobRow.team, JobRow.status, JobRow.pool)
        .where(
            or_(
                JobRow.team.in_(list(teams))
                & JobRow.status.in_([JobStatus.QUEUED.value, *_ACTIVE]),
                JobRow.pool.in_(list(pools)) & JobRow.status.in_(_ACTIVE),
            )
        )
        .order_by(JobRow.submitted_at, JobRow.id)
        .limit(limit)
    ).all()
    return [JobInUse(row.id, row.team, row.status, row.pool) for row in rows]


def retire_jobs(
    session: Session,
    jobs: Collection[JobInUse],
    removed_teams: Collection[str],
    version: int,
    at: datetime,
) -> tuple[int, int]:
    """Settle the jobs a forced removal leaves behind: a queued job of a removed team fails at
    once (nothing could ever admit it again); an active job is cancelled through the
    controller, as any cancel is (a removed pool's backend stays reachable for that).
    Returns (failed, cancelled)."""
    failed = cancelled = 0
    for job in jobs:
        gone = f"team {job.team!r}" if job.team in removed_teams else f"pool {job.pool!r}"
        why = f"{gone} was removed by configuration version {version} (applied with --force)"
        if job.status == JobStatus.QUEUED.value:
            done = _changed(
                session,
                update(JobRow)
                .where(JobRow.id == job.id, JobRow.status == JobStatus.QUEUED.value)
                .values(status=JobStatus.FAILED.value, finished_at=at, message=why),
            )
            if done:
                failed += 1
                changes.touch(session, (job.id,))
                session.add(EventRow(job_id=job.id, at=at, kind="failed", message=why))
            continue
        done = _changed(
            session,
            update(JobRow)
            .where(
                JobRow.id == job.id,
                JobRow.status.in_(_ACTIVE),
                JobRow.cancel_requested.is_(False),
            )
            .values(cancel_requested=True, message=why),
        )
        if done:
            cancelled += 1
            changes.touch(session, (job.id,))
            session.add(EventRow(job_id=job.id, at=at, kind="cancel_requested", message=why))
    return failed, cancelled
