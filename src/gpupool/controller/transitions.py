"""Apply what a backend reports about an attempt to the attempt and its job.

The job mirrors its current attempt. A preempted or lost attempt sends the job back to the
queue for a new attempt (keeping its submit time, so it keeps its place), until
``MAX_LOST_ATTEMPTS`` attempts were lost (preemptions never count).
"""

from __future__ import annotations

from datetime import datetime

from sqlalchemy import func, select
from sqlalchemy.orm import Session

from gpupool.backends.base import BackendStatus, RunState
from gpupool.core.jobs import JobStatus
from gpupool.state.models import AttemptRow, EventRow, JobRow

MAX_LOST_ATTEMPTS = 5

_FINAL_JOB_STATUS = {
    RunState.SUCCEEDED: JobStatus.SUCCEEDED,
    RunState.FAILED: JobStatus.FAILED,
    RunState.CANCELLED: JobStatus.CANCELLED,
}


def apply_status(
    session: Session, job: JobRow, attempt: AttemptRow, status: BackendStatus, now: datetime
) -> None:
    state = status.state
    if state is RunState.PENDING:
        return
    if state is RunState.RUNNING:
        if attempt.status == JobStatus.ADMITTED:
            attempt.status = JobStatus.RUNNING.value
            attempt.started_at = now
            job.status = JobStatus.RUNNING.value
            job.started_at = job.started_at or now
            session.add(_event(job, now, "running", f"attempt {attempt.number} on {attempt.pool}"))
        return
    attempt.finished_at = now
    attempt.exit_code = status.exit_code
    attempt.message = status.message
    if attempt.preempted_by and state is not RunState.SUCCEEDED and not job.cancel_requested:
        # It ended because we signalled it for a preemptor: not a failure of the job.
        state = RunState.PREEMPTED
        attempt.message = f"preempted for {attempt.preempted_by}"
    if state in _FINAL_JOB_STATUS:
        final = _FINAL_JOB_STATUS[state]
        attempt.status = final.value
        finish_job(session, job, final, now, status.exit_code, status.message)
        return
    attempt.status = (JobStatus.PREEMPTED if state is RunState.PREEMPTED else JobStatus.LOST).value
    requeue(session, job, now, f"attempt {attempt.number} {attempt.status}: {attempt.message}")


def finish_job(
    session: Session,
    job: JobRow,
    final: JobStatus,
    now: datetime,
    exit_code: int | None,
    message: str,
) -> None:
    job.status = final.value
    job.finished_at = now
    job.exit_code = exit_code
    job.message = message or final.value
    detail = f" (exit code {exit_code})" if exit_code is not None else ""
    session.add(_event(job, now, final.value, f"{message or final.value}{detail}"))


def requeue(session: Session, job: JobRow, now: datetime, why: str) -> None:
    """Put the job back in the queue for a new attempt, or end it if it cannot go on."""
    session.flush()  # the attempt's new status must count below
    lost = session.scalar(
        select(func.count())
        .select_from(AttemptRow)
        .where(AttemptRow.job_id == job.id, AttemptRow.status == JobStatus.LOST.value)
    )
    if job.cancel_requested:
        finish_job(session, job, JobStatus.CANCELLED, now, None, "cancelled")
    elif (lost or 0) >= MAX_LOST_ATTEMPTS:
        # Preemptions never count: only attempts lost to failures of the machinery.
        reason = f"gave up after {lost} lost attempts; last: {why}"
        finish_job(session, job, JobStatus.FAILED, now, None, reason)
    else:
        job.status = JobStatus.QUEUED.value
        job.pool = None
        job.gpu_type = None
        session.add(_event(job, now, "requeued", why))


def _event(job: JobRow, at: datetime, kind: str, message: str) -> EventRow:
    return EventRow(job_id=job.id, at=at, kind=kind, message=message)
