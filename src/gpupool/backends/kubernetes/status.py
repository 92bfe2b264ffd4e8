"""What a Job's status means for gpupool: :func:`verdict`, a pure table (docs/kubernetes-backend.md
has it as a table too).

Invariants:

* Final only when Kubernetes says so: ``Complete`` or ``Failed`` set to ``True``. While a
  failing Job's pods still terminate (``FailureTarget``) or a deleted Job still has pods, the
  attempt is reported as still running, so its GPUs are not handed out twice.
* A cancelled attempt (the adapter's record) is CANCELLED once final, however it ended, and
  stays so after its Job is gone; so the answer for one key never changes once it is final.
* A Job that is not there is LOST (the controller then starts a new attempt), unless cancelled.
* A condition this table does not know is never final: it reads as PENDING or RUNNING.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from gpupool.backends.base import BackendStatus, RunState
from gpupool.backends.kubernetes.naming import (
    CONTAINER,
    INDEX_ANNOTATION,
    KEY_ANNOTATION,
    MAX_RUNTIME_ANNOTATION,
    POOL_ANNOTATION,
)

_EXIT_CODE = re.compile(r"failed with exit code (-?\d+)")
_MESSAGE_MAX = 300


@dataclass(frozen=True)
class Condition:
    status: str
    reason: str = ""
    message: str = ""


@dataclass(frozen=True)
class JobView:
    """The fields of a batch/v1 Job (as the API server's JSON) that gpupool reads."""

    name: str
    namespace: str
    annotations: Mapping[str, str] = field(default_factory=dict)
    conditions: Mapping[str, Condition] = field(default_factory=dict)
    parallelism: int = 1
    active: int = 0
    ready: int = 0
    deleting: bool = False

    @classmethod
    def from_object(cls, obj: Mapping[str, Any]) -> JobView:
        meta = obj.get("metadata") or {}
        spec = obj.get("spec") or {}
        status = obj.get("status") or {}
        conditions = {
            str(c.get("type")): Condition(
                str(c.get("status", "")), str(c.get("reason") or ""), str(c.get("message") or "")
            )
            for c in status.get("conditions") or ()
        }
        return cls(
            name=str(meta.get("name", "")),
            namespace=str(meta.get("namespace", "")),
            annotations={str(k): str(v) for k, v in (meta.get("annotations") or {}).items()},
            conditions=conditions,
            parallelism=int(spec.get("parallelism") or 1),
            active=int(status.get("active") or 0),
            ready=int(status.get("ready") or 0),
            deleting=meta.get("deletionTimestamp") is not None,
        )

    @property
    def key(self) -> str | None:
        return self.annotations.get(KEY_ANNOTATION)

    @property
    def pool(self) -> str | None:
        return self.annotations.get(POOL_ANNOTATION)

    def is_true(self, kind: str) -> Condition | None:
        found = self.conditions.get(kind)
        return found if found is not None and found.status == "True" else None

    @property
    def final(self) -> bool:
        return bool(self.is_true("Complete") or self.is_true("Failed"))


def exit_code_in(message: str) -> int | None:
    """The exit code in a ``podFailurePolicy`` message of the Job controller ("Container main
    for pod ns/p failed with exit code 3 matching FailJob rule at index 1")."""
    found = _EXIT_CODE.search(message)
    return int(found.group(1)) if found else None


def exit_code_of_pods(pods: Sequence[Mapping[str, Any]]) -> int | None:
    """The exit code of the main container of the lowest-indexed pod that failed."""
    codes = []
    for pod in pods:
        meta = pod.get("metadata") or {}
        index = (meta.get("annotations") or {}).get(INDEX_ANNOTATION, "0")
        for status in (pod.get("status") or {}).get("containerStatuses") or ():
            done = (status.get("state") or {}).get("terminated") or {}
            code = done.get("exitCode")
            if status.get("name") == CONTAINER and isinstance(code, int) and code != 0:
                codes.append((int(index) if str(index).isdigit() else 0, code))
    return min(codes)[1] if codes else None


def _short(text: str) -> str:
    line = text.strip().splitlines()[0] if text.strip() else ""
    return line[:_MESSAGE_MAX]


def verdict(
    job: JobView | None, *, cancelled: bool, pod_exit_code: int | None = None
) -> BackendStatus:
    """The status of an attempt whose Job is ``job`` (``None``: not found)."""
    if job is None:
        if cancelled:
            return BackendStatus(RunState.CANCELLED, message="cancelled")
        return BackendStatus(RunState.LOST, message="its Job is not in the cluster")
    if job.final and cancelled:
        return BackendStatus(RunState.CANCELLED, message="cancelled")
    if job.is_true("Complete"):
        return BackendStatus(RunState.SUCCEEDED, exit_code=0)
    failed = job.is_true("Failed")
    if failed is not None:
        return _failure(job, failed, pod_exit_code)
    return _live(job, cancelled)


def _failure(job: JobView, failed: Condition, pod_exit_code: int | None) -> BackendStatus:
    if failed.reason == "DeadlineExceeded":
        limit = job.annotations.get(MAX_RUNTIME_ANNOTATION, "?")
        return BackendStatus(RunState.FAILED, message=f"exceeded max_runtime_s={limit}")
    if failed.reason == "PodFailurePolicy" and "DisruptionTarget" in failed.message:
        # Drained, evicted or preempted by Kubernetes: not the job's doing, so a new attempt.
        return BackendStatus(RunState.LOST, message=f"pod disrupted: {_short(failed.message)}")
    code = exit_code_in(failed.message)
    if code is None:
        code = pod_exit_code
    if code is not None and failed.reason in ("PodFailurePolicy", "BackoffLimitExceeded"):
        return BackendStatus(RunState.FAILED, exit_code=code, message=f"exited with code {code}")
    detail = _short(failed.message) or "failed"
    return BackendStatus(RunState.FAILED, exit_code=code, message=f"{failed.reason}: {detail}")


def _live(job: JobView, cancelled: bool) -> BackendStatus:
    stopping = cancelled or job.deleting or job.is_true("FailureTarget") is not None
    note = "stopping" if stopping else ""
    if job.ready >= job.parallelism or (stopping and job.active):
        return BackendStatus(RunState.RUNNING, message=note)
    if job.parallelism > 1 and job.ready:
        note = note or f"{job.ready} of {job.parallelism} pods ready"
    return BackendStatus(RunState.PENDING, message=note)
