"""Reads of finished work: runtimes of past attempts (for start forecasts) and the jobs of a
period (for ``gpupool history export``).

Both return plain column rows, never whole job rows: neither a forecast nor an export may
carry a job's command, environment or name, so they are not even read.
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime
from typing import Any

from sqlalchemy import Row, and_, select
from sqlalchemy.orm import Session

from gpupool.core.jobs import JobStatus
from gpupool.state.models import AttemptRow, JobRow

# Attempts that ended by themselves: their run time is the job's (a preempted, lost or
# cancelled attempt was cut short).
_RAN_TO_END = (JobStatus.SUCCEEDED.value, JobStatus.FAILED.value)


def runtime_samples(
    session: Session, since: datetime, limit: int = 20_000
) -> list[tuple[str, str, int, float]]:
    """(team, gpu type, GPUs of the whole job, seconds run) of the newest ``limit`` attempts
    that finished since ``since`` and ran to their end."""
    rows = session.execute(
        select(
            JobRow.team,
            AttemptRow.gpu_type,
            JobRow.gpus,
            JobRow.nodes,
            AttemptRow.started_at,
            AttemptRow.finished_at,
        )
        .join(JobRow, JobRow.id == AttemptRow.job_id)
        .where(
            AttemptRow.status.in_(_RAN_TO_END),
            AttemptRow.started_at.is_not(None),
            AttemptRow.finished_at >= since,
        )
        .order_by(AttemptRow.finished_at.desc(), AttemptRow.id.desc())
        .limit(limit)
    ).all()
    return [
        (team, gpu_type, gpus * nodes, (finished - started).total_seconds())
        for team, gpu_type, gpus, nodes, started, finished in rows
        if started is not None and finished is not None
    ]


# What an export reads of a job and of its current attempt: no command, env, name or user.
EXPORT_COLUMNS = (
    JobRow.id,
    JobRow.team,
    JobRow.priority_class,
    JobRow.submitted_at,
    JobRow.gpus,
    JobRow.nodes,
    JobRow.gpu_types,
    JobRow.checkpoint_interval_s,
    JobRow.status,
    AttemptRow.gpu_type.label("ran_on"),
    AttemptRow.started_at.label("attempt_started_at"),
    AttemptRow.finished_at.label("attempt_finished_at"),
)


def submitted_between(session: Session, start: datetime, end: datetime) -> Sequence[Row[Any]]:
    """Every job submitted in [``start``, ``end``), in submit order, with its current attempt's
    gpu type and times (None for a job that never had one): ``EXPORT_COLUMNS``."""
    current = and_(AttemptRow.job_id == JobRow.id, AttemptRow.number == JobRow.attempt)
    return session.execute(
        select(*EXPORT_COLUMNS)
        .outerjoin(AttemptRow, current)
        .where(JobRow.submitted_at >= start, JobRow.submitted_at < end)
        .order_by(JobRow.submitted_at, JobRow.id)
    ).all()
