"""Job and attempt states and the transitions between them.

A job has one or more attempts. The job's status mirrors its current attempt, except
that a preempted or lost attempt puts the job back to ``queued`` for a new attempt.
Terminal states never change again.
"""

from __future__ import annotations

from enum import StrEnum


class JobStatus(StrEnum):
    QUEUED = "queued"
    ADMITTED = "admitted"
    RUNNING = "running"
    SUCCEEDED = "succeeded"
    FAILED = "failed"
    CANCELLED = "cancelled"
    PREEMPTED = "preempted"
    LOST = "lost"
    # An attempt whose node the provider took back (spot eviction, a node set down): its job
    # is requeued; unlike LOST it never counts towards giving up on the job. Attempts only.
    EVICTED = "evicted"


TERMINAL = frozenset({JobStatus.SUCCEEDED, JobStatus.FAILED, JobStatus.CANCELLED})
ACTIVE = frozenset({JobStatus.ADMITTED, JobStatus.RUNNING})

# What users are shown for an active job whose cancel was asked for, until its attempt ends
# (it has its grace period to stop). Not a state of the machine above: the store keeps the
# job admitted or running, with ``cancel_requested`` set.
CANCELLING = "cancelling"
SHOWN_STATUSES = (*(s.value for s in JobStatus), CANCELLING)


def shown_status(status: str, cancel_requested: bool) -> str:
    """The status users see (API, SDK, CLI): ``cancelling`` for an active job being
    cancelled, else the job's own status."""
    return CANCELLING if cancel_requested and status in ACTIVE else status


_ALLOWED: dict[JobStatus, frozenset[JobStatus]] = {
    JobStatus.QUEUED: frozenset({JobStatus.ADMITTED, JobStatus.CANCELLED, JobStatus.FAILED}),
    JobStatus.ADMITTED: frozenset(
        {
            JobStatus.RUNNING,
            JobStatus.SUCCEEDED,
            JobStatus.FAILED,
            JobStatus.CANCELLED,
            JobStatus.PREEMPTED,
            JobStatus.LOST,
            JobStatus.EVICTED,
            JobStatus.QUEUED,
        }
    ),
    JobStatus.RUNNING: frozenset(
        {
            JobStatus.SUCCEEDED,
            JobStatus.FAILED,
            JobStatus.CANCELLED,
            JobStatus.PREEMPTED,
            JobStatus.LOST,
            JobStatus.EVICTED,
        }
    ),
    JobStatus.PREEMPTED: frozenset({JobStatus.QUEUED, JobStatus.CANCELLED}),
    JobStatus.EVICTED: frozenset({JobStatus.QUEUED, JobStatus.CANCELLED}),
    JobStatus.LOST: frozenset({JobStatus.QUEUED, JobStatus.CANCELLED, JobStatus.FAILED}),
    JobStatus.SUCCEEDED: frozenset(),
    JobStatus.FAILED: frozenset(),
    JobStatus.CANCELLED: frozenset(),
}


def can_transition(current: JobStatus, target: JobStatus) -> bool:
    """True when ``current -> target`` is a legal move of the state machine."""
    return target in _ALLOWED[current]


def attempt_key(job_id: str, attempt: int) -> str:
    """The idempotency key of one attempt: backends run each key at most once."""
    return f"{job_id}.{attempt}"
