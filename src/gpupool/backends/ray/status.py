"""Ray job details -> gpupool status: pure functions, no I/O, the clock passed in.

The table is in ``README.md`` next to this file. Two rules need more than a lookup:

* **max_runtime_s.** Ray Jobs have no timeout, so the adapter enforces it while polling: a
  job still PENDING or RUNNING past ``start_time + max_runtime_s`` gets ``stop=True`` (the
  adapter then calls ``stop_job``) and stays reported as it is until Ray has actually stopped
  it, so its GPUs are never handed out while the process may still hold them. A STOPPED job
  that ran at least ``max_runtime_s`` is FAILED ``exceeded max_runtime_s=N``; one stopped
  earlier is CANCELLED. This needs no state of the adapter's own, so it survives restarts.
  Ray's ``start_time`` is the submission time: time spent PENDING counts.
* **Who failed.** A FAILED job whose supervisor died (its node died, Ray lost the actor) did
  not fail by itself: that is LOST, and the controller starts a new attempt. Every other
  failure (the command's exit code, a runtime env that cannot be set up) is FAILED.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from gpupool.backends.base import BackendStatus, RunState

# Job metadata the adapter writes at submit and reads back when polling.
META_KEY = "gpupool_key"
META_POOL = "gpupool_pool"
META_MAX_RUNTIME = "gpupool_max_runtime_s"

# Ray's JobErrorType values that mean the infrastructure, not the job, failed.
_LOST_ERRORS = frozenset({"JOB_SUPERVISOR_ACTOR_DIED", "JOB_SUPERVISOR_ACTOR_UNKNOWN_FAILURE"})
_MESSAGE_MAX = 300
# Rays before ``driver_exit_code`` existed only said it in the message.
_EXIT_IN_MESSAGE = re.compile(r"failed with exit code (-?\d+)")


@dataclass(frozen=True)
class RayJob:
    """The fields of Ray's ``JobDetails`` that gpupool uses. Times are Unix milliseconds."""

    submission_id: str
    status: str  # PENDING RUNNING STOPPED SUCCEEDED FAILED
    message: str = ""
    error_type: str | None = None
    start_time_ms: int | None = None
    end_time_ms: int | None = None
    driver_exit_code: int | None = None
    metadata: Mapping[str, str] = field(default_factory=dict)

    @classmethod
    def from_details(cls, details: Any) -> RayJob:
        """From a ``JobDetails`` (or anything with its attributes)."""
        status = getattr(details, "status", "")
        error_type = getattr(details, "error_type", None)
        code = getattr(details, "driver_exit_code", None)
        message = str(getattr(details, "message", "") or "")
        if code is None and (found := _EXIT_IN_MESSAGE.search(message)):
            code = int(found.group(1))
        return cls(
            submission_id=str(getattr(details, "submission_id", "") or ""),
            status=str(getattr(status, "value", status)),
            message=message,
            error_type=str(getattr(error_type, "value", error_type)) if error_type else None,
            start_time_ms=getattr(details, "start_time", None),
            end_time_ms=getattr(details, "end_time", None),
            driver_exit_code=code if isinstance(code, int) else None,
            metadata=dict(getattr(details, "metadata", None) or {}),
        )

    @property
    def max_runtime_s(self) -> int | None:
        raw = self.metadata.get(META_MAX_RUNTIME)
        try:
            return int(raw) if raw else None
        except ValueError:
            return None


@dataclass(frozen=True)
class Verdict:
    """What to report for one job, and whether the adapter must stop it now."""

    status: BackendStatus
    stop: bool = False


def _first_line(message: str) -> str:
    line = message.strip().splitlines()[0] if message.strip() else ""
    return line[:_MESSAGE_MAX]


def _ran_past_limit(job: RayJob, now_ms: float) -> bool:
    limit = job.max_runtime_s
    if limit is None or job.start_time_ms is None:
        return False
    end = job.end_time_ms if job.end_time_ms is not None else now_ms
    return end - job.start_time_ms >= limit * 1000


def verdict(job: RayJob | None, *, now: float) -> Verdict:
    """The status of ``job`` (``None``: Ray does not know it) at wall-clock ``now`` seconds."""
    if job is None:
        return Verdict(BackendStatus(RunState.LOST, message="Ray does not know this job"))
    now_ms = now * 1000
    exceeded = f"exceeded max_runtime_s={job.max_runtime_s}"
    match job.status:
        case "PENDING" | "RUNNING":
            state = RunState.PENDING if job.status == "PENDING" else RunState.RUNNING
            if _ran_past_limit(job, now_ms):
                return Verdict(BackendStatus(state, message=f"stopping: {exceeded}"), stop=True)
            return Verdict(BackendStatus(state))
        case "SUCCEEDED":
            return Verdict(BackendStatus(RunState.SUCCEEDED, exit_code=0))
        case "STOPPED":
            if _ran_past_limit(job, now_ms):
                return Verdict(
                    BackendStatus(RunState.FAILED, job.driver_exit_code, message=exceeded)
                )
            return Verdict(BackendStatus(RunState.CANCELLED, job.driver_exit_code, "cancelled"))
        case "FAILED":
            code = job.driver_exit_code
            if job.error_type in _LOST_ERRORS:
                message = f"{job.error_type}: {_first_line(job.message)}"
                return Verdict(BackendStatus(RunState.LOST, code, message))
            if code is not None and job.error_type in (None, "JOB_ENTRYPOINT_COMMAND_ERROR"):
                return Verdict(BackendStatus(RunState.FAILED, code, f"exited with code {code}"))
            detail = _first_line(job.message) or "failed"
            message = f"{job.error_type}: {detail}" if job.error_type else detail
            return Verdict(BackendStatus(RunState.FAILED, code, message))
        case _:  # a status of a newer Ray: never LOST, which would start a second run
            return Verdict(BackendStatus(RunState.PENDING, message=f"Ray status {job.status}"))
