"""Batch task -> gpupool status: pure functions, no I/O, the clock passed in.

The table is in ``README.md`` next to this file and in docs/azure.md. Rules beyond a lookup:

* **Preemption is not failure.** A low-priority (spot) node taken back by Azure makes Batch
  requeue its running task (``executionInfo.requeueCount`` grows) and run it again later. gpupool
  wants a new attempt instead, never a second run of the same one: a requeued task is reported
  PREEMPTED with an ``evicted:`` reason, and ``stop=True`` tells the adapter to terminate it so
  Batch does not start it again. It stays PREEMPTED once terminated (the answer never changes
  between polls); only a requeued task that Batch nevertheless finished with success is
  SUCCEEDED, because its work is done.
* **max_runtime_s** is Batch's ``maxWallClockTime``: Batch terminates the task. A task that
  ended in failure after running at least that long is FAILED ``exceeded max_runtime_s=N``.
* **Cancel** is ``terminate``: a task ended by that request is CANCELLED, whatever exit code
  the signal left. Batch says so with failure code ``TaskEnded``.
* **Whose fault.** A failure of category ``servererror`` (Batch's, not the job's) is LOST: the
  controller starts a new attempt. A user error that is not the command's exit code (a
  resource file that cannot be downloaded, an image that cannot be pulled) is FAILED with
  Batch's message.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

from gpupool.backends.base import BackendStatus, RunState, evicted

CANCEL_CODES = frozenset({"TaskEnded"})
_MESSAGE_MAX = 300


@dataclass(frozen=True)
class BatchTaskView:
    """The fields of a Batch task that gpupool reads."""

    id: str
    state: str  # active preparing running completed
    display_name: str | None = None
    exit_code: int | None = None
    result: str | None = None  # success failure
    failure_category: str | None = None  # usererror servererror
    failure_code: str | None = None
    failure_message: str = ""
    start_time: datetime | None = None
    end_time: datetime | None = None
    requeue_count: int = 0
    max_wall_clock: timedelta | None = None
    node_id: str | None = None

    @classmethod
    def from_sdk(cls, task: Any) -> BatchTaskView:
        """From an ``azure.batch.models.BatchTask``."""
        info = getattr(task, "execution_info", None)
        failure = getattr(info, "failure_info", None)
        constraints = getattr(task, "constraints", None)
        node = getattr(task, "node_info", None)
        return cls(
            id=str(task.id),
            state=_text(task.state) or "",
            display_name=getattr(task, "display_name", None),
            exit_code=getattr(info, "exit_code", None),
            result=_text(getattr(info, "result", None)),
            failure_category=_text(getattr(failure, "category", None)),
            failure_code=getattr(failure, "code", None),
            failure_message=str(getattr(failure, "message", "") or ""),
            start_time=getattr(info, "start_time", None),
            end_time=getattr(info, "end_time", None),
            requeue_count=int(getattr(info, "requeue_count", 0) or 0),
            max_wall_clock=getattr(constraints, "max_wall_clock_time", None),
            node_id=getattr(node, "node_id", None),
        )


def _text(value: Any) -> str | None:
    if value is None:
        return None
    return str(getattr(value, "value", value)).lower()


@dataclass(frozen=True)
class Verdict:
    status: BackendStatus
    stop: bool = False  # terminate the task now (a preempted task Batch would rerun)


def _ran_past_limit(task: BatchTaskView) -> bool:
    limit = task.max_wall_clock
    if limit is None or task.start_time is None or task.end_time is None:
        return False
    return task.end_time - task.start_time >= limit


def _limit_s(task: BatchTaskView) -> int:
    assert task.max_wall_clock is not None
    return int(task.max_wall_clock.total_seconds())


def verdict(task: BatchTaskView | None) -> Verdict:
    """The status of ``task`` (``None``: Batch does not know it)."""
    if task is None:
        return Verdict(BackendStatus(RunState.LOST, message="Azure Batch does not know this task"))
    code = task.exit_code
    succeeded = task.state == "completed" and (
        task.result == "success" or (task.result is None and code == 0)
    )
    if succeeded:
        return Verdict(BackendStatus(RunState.SUCCEEDED, exit_code=code if code is not None else 0))
    if task.requeue_count > 0:
        where = f" {task.node_id}" if task.node_id else ""
        why = (
            f"low-priority node{where} preempted by Azure "
            f"(Batch requeued the task {task.requeue_count}x)"
        )
        return Verdict(evicted(why, code), stop=task.state != "completed")
    match task.state:
        case "active" | "preparing":
            return Verdict(BackendStatus(RunState.PENDING))
        case "running":
            return Verdict(BackendStatus(RunState.RUNNING))
        case "completed":
            return Verdict(_completed(task))
        case _:  # a state of a newer Batch: never LOST, which would start a second run
            return Verdict(BackendStatus(RunState.PENDING, message=f"Batch state {task.state}"))


def _completed(task: BatchTaskView) -> BackendStatus:
    code = task.exit_code
    if _ran_past_limit(task):
        return BackendStatus(RunState.FAILED, code, f"exceeded max_runtime_s={_limit_s(task)}")
    if task.failure_code in CANCEL_CODES:
        return BackendStatus(RunState.CANCELLED, code, "cancelled")
    detail = _first_line(task.failure_message)
    if task.failure_category == "servererror":
        return BackendStatus(RunState.LOST, code, f"Azure Batch: {task.failure_code}: {detail}")
    if task.failure_code and task.failure_code != "FailureExitCode":
        return BackendStatus(RunState.FAILED, code, f"{task.failure_code}: {detail}".rstrip(": "))
    return BackendStatus(RunState.FAILED, code, f"exited with code {code}")


def _first_line(message: str) -> str:
    lines = message.strip().splitlines()
    return lines[0][:_MESSAGE_MAX] if lines else ""
