"""Apply what a backend reports about an attempt to the attempt and its job.

The job mirrors its current attempt. A preempted or lost attempt sends the job back to the
queue for a new attempt (keeping its submit time, so it keeps its place), until
``MAX_LOST_ATTEMPTS`` attempts were lost (preemptions never count).

The usage ledger moves with the status, in the same transaction: an attempt's row opens when
it is first seen running and closes, with its outcome, when it ends (``accounting.py``).
"""

from __future__ import annotations

from datetime import datetime

from gpupool.backends.base import BackendStatus, RunState
from gpupool.controller import accounting
from gpupool.core.jobs import JobStatus
from gpupool.spec.models import ClusterConfig
from gpupool.state import jobs
from gpupool.state.db import Session
from gpupool.state.models import AttemptRow, JobRow

MAX_LOST_ATTEMPTS = 5

_FINAL_JOB_STATUS = {
    RunState.SUCCEEDED: JobStatus.SUCCEEDED,
    RunState.FAILED: JobStatus.FAILED,
    RunState.CANCELLED: JobStatus.CANCELLED,
}


def apply_status(
    session: Session,
    job: JobRow,
    attempt: AttemptRow,
    status: BackendStatus,
    now: datetime,
    config: ClusterConfig | None = None,
) -> None:
    """Record what the backend reported; ``config``: the pools' node types for the ledger
    (each pool counts as dedicated without it)."""
    state = status.state
    if state is RunState.PENDING:
        return
    if state is RunState.RUNNING:
        if attempt.status == JobStatus.ADMITTED:
            attempt.status = JobStatus.RUNNING.value
            attempt.started_at = now
            job.status = JobStatus.RUNNING.value
            job.started_at = job.started_at or now
            accounting.attempt_started(session, config, job, attempt, now)
            jobs.add_event(
                session, job.id, now, "running", f"attempt {attempt.number} on {attempt.pool}"
            )
        return
    was = attempt.status
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
        accounting.attempt_ended(session, config, job, attempt, now, was)
        finish_job(session, job, final, now, status.exit_code, status.message)
        return
    attempt.status = (JobStatus.PREEMPTED if state is RunState.PREEMPTED else JobStatus.LOST).value
    accounting.attempt_ended(session, config, job, attempt, now, was)
    requeue(session, job, now, f"attempt {attempt.number} {attempt.status}: {attempt.message}")


def abandon(
    session: Session,
    job: JobRow,
    attempt: AttemptRow,
    now: datetime,
    why: str,
    config: ClusterConfig | None = None,
) -> None:
    """Give up on an admitted attempt that no backend accepted (its pool stayed unreachable):
    it ends lost, its GPUs and quota are free, and the job goes back to the queue. The attempt
    keeps no handle and ``cancel_sent`` unset, so the sync loop later looks for a run under its
    key and stops it (``BackendSync``): a submission may have got through unseen."""
    was = attempt.status
    attempt.status = JobStatus.LOST.value
    attempt.finished_at = now
    attempt.message = why
    accounting.attempt_ended(session, config, job, attempt, now, was)
    requeue(session, job, now, f"attempt {attempt.number} lost: {why}")


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
    jobs.add_event(session, job.id, now, final.value, f"{message or final.value}{detail}")


def requeue(session: Session, job: JobRow, now: datetime, why: str) -> None:
    """Put the job back in the queue for a new attempt, or end it if it cannot go on."""
    lost = jobs.lost_attempts(session, job.id)  # the attempt's new status counts
    if job.cancel_requested:
        finish_job(session, job, JobStatus.CANCELLED, now, None, "cancelled")
    elif lost >= MAX_LOST_ATTEMPTS:
        # Preemptions never count: only attempts lost to failures of the machinery.
        reason = f"gave up after {lost} lost attempts; last: {why}"
        finish_job(session, job, JobStatus.FAILED, now, None, reason)
    else:
        job.status = JobStatus.QUEUED.value
        job.pool = None
        job.gpu_type = None
        jobs.add_event(session, job.id, now, "requeued", why)
