"""Azure ML job -> gpupool status: pure functions, no I/O.

The table is in docs/azure.md. Rules beyond a lookup:

* **Final means the process is gone.** ``CancelRequested`` and ``Finalizing`` are not final:
  the job may still hold its node. ``NotResponding``, ``Paused`` and ``Unknown`` are reported
  as they look (running, pending) until Azure ML decides.
* **max_runtime_s** is the command job's ``limits.timeout``: Azure ML stops the job. A job
  that ended ``Failed`` or ``Canceled`` after running at least that long (start and end times
  from the run's details) is FAILED ``exceeded max_runtime_s=N``.
* **The exit code** is not a field of the job: Azure ML puts it in the run's error message
  ("... exited with status code N ..."), from which it is read when present.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from datetime import datetime

from gpupool.backends.base import BackendStatus, RunState

PENDING = frozenset({"NotStarted", "Starting", "Provisioning", "Preparing", "Queued", "Paused"})
RUNNING = frozenset({"Running", "Finalizing", "CancelRequested", "NotResponding"})
NEEDS_DETAILS = frozenset({"Failed", "Canceled"})  # their exit code and run time
_EXIT = re.compile(r"exited with (?:status )?code (-?\d+)")
_MESSAGE_MAX = 300


@dataclass(frozen=True)
class AMLJobView:
    name: str
    status: str
    tags: dict[str, str]
    timeout_s: int | None = None
    # From the run's details (Failed and Canceled jobs only):
    start: datetime | None = None
    end: datetime | None = None
    error: str = ""

    @property
    def exit_code(self) -> int | None:
        found = _EXIT.search(self.error)
        return int(found.group(1)) if found else None


def verdict(job: AMLJobView | None) -> BackendStatus:
    if job is None:
        return BackendStatus(RunState.LOST, message="Azure ML does not know this job")
    if job.status in PENDING:
        return BackendStatus(RunState.PENDING)
    if job.status in RUNNING:
        return BackendStatus(RunState.RUNNING)
    if job.status == "Completed":
        return BackendStatus(RunState.SUCCEEDED, exit_code=0)
    code = job.exit_code
    if job.status in NEEDS_DETAILS and _ran_past_limit(job):
        return BackendStatus(RunState.FAILED, code, f"exceeded max_runtime_s={job.timeout_s}")
    if job.status == "Canceled":
        return BackendStatus(RunState.CANCELLED, code, "cancelled")
    if job.status == "Failed":
        if code is not None:
            return BackendStatus(RunState.FAILED, code, f"exited with code {code}")
        return BackendStatus(RunState.FAILED, None, _first_line(job.error) or "failed")
    # A status of a newer Azure ML: never LOST, which would start a second run.
    return BackendStatus(RunState.PENDING, message=f"Azure ML status {job.status}")


def _ran_past_limit(job: AMLJobView) -> bool:
    if job.timeout_s is None or job.start is None or job.end is None:
        return False
    return (job.end - job.start).total_seconds() >= job.timeout_s


def _first_line(message: str) -> str:
    lines = message.strip().splitlines()
    return lines[0][:_MESSAGE_MAX] if lines else ""
