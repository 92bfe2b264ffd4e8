"""Slurm job states onto gpupool's :class:`RunState` (pure; the table is in ``README.md``).

Inputs: the job's ``squeue`` row (None once Slurm purged it, ``MinJobAge`` after it ended),
the job's own ``exit_code`` record, and whether gpupool asked to cancel it.

Invariants:

* Slurm's word wins while it has one; the job's ``exit_code`` file only fills in what Slurm
  cannot say (the exit code and whether ``timeout`` stopped it) or no longer says (purged).
* A state we do not know is reported as RUNNING, never as final: a new Slurm state must not
  make the controller start a second run while the first may still hold GPUs.
* Once gpupool asked to cancel, any end is CANCELLED: the job was signalled, so however it
  exited (143, 0 after a graceful stop, killed) is the cancellation's doing.
"""

from __future__ import annotations

from gpupool.backends.base import BackendStatus, RunState, evicted
from gpupool.backends.slurm.parsers import ExitRecord, SqueueRow, decode_wait_status

PENDING_STATES = frozenset(
    {"PENDING", "CONFIGURING", "REQUEUED", "REQUEUE_FED", "REQUEUE_HOLD", "RESV_DEL_HOLD"}
)
RUNNING_STATES = frozenset(
    {"RUNNING", "COMPLETING", "SUSPENDED", "STOPPED", "SIGNALING", "STAGE_OUT", "RESIZING"}
)
FAILED_STATES = {
    "FAILED": "",
    "OUT_OF_MEMORY": "out of memory",
    "DEADLINE": "reached its Slurm deadline",
    "SPECIAL_EXIT": "ended in Slurm's SPECIAL_EXIT state",
}
# The node failed to boot, not the job: a new attempt may well succeed (the controller retries
# LOST, a few times).
LOST_STATES = {"BOOT_FAIL": "its node failed to boot"}
# The node went away under the job (set DOWN, powered off, a cloud node reclaimed): an eviction
# (R5), requeued as a new attempt that never counts as lost; ``--no-requeue`` keeps Slurm from
# running it again itself.
EVICTED_STATES = {"NODE_FAIL": "its node failed (Slurm NODE_FAIL)"}


def job_status(
    row: SqueueRow | None,
    exit_record: ExitRecord | None,
    *,
    cancel_requested: bool,
    submitted: bool,
    max_runtime_s: int | None = None,
) -> BackendStatus:
    if row is None:
        return _forgotten(exit_record, cancel_requested=cancel_requested, submitted=submitted)
    state = row.state
    if state in PENDING_STATES:
        return BackendStatus(RunState.PENDING, message=_reason(row))
    if state in RUNNING_STATES:
        return BackendStatus(RunState.RUNNING)
    exit_code = _exit_code(row, exit_record)
    if cancel_requested or state == "CANCELLED":
        return BackendStatus(RunState.CANCELLED, exit_code=exit_code, message="cancelled")
    if state == "COMPLETED":
        return BackendStatus(RunState.SUCCEEDED, exit_code=0)
    if state == "TIMEOUT":
        limit = f"max_runtime_s={max_runtime_s}" if max_runtime_s else "its Slurm time limit"
        return BackendStatus(RunState.FAILED, exit_code=exit_code, message=f"exceeded {limit}")
    if state == "PREEMPTED":
        return BackendStatus(RunState.PREEMPTED, exit_code=exit_code, message="preempted by Slurm")
    if state in EVICTED_STATES:
        return evicted(EVICTED_STATES[state], exit_code=exit_code)
    if state in LOST_STATES:
        return BackendStatus(RunState.LOST, exit_code=exit_code, message=LOST_STATES[state])
    if state in FAILED_STATES:
        if exit_record is not None and exit_record.reason == "max_runtime":
            message = f"exceeded max_runtime_s={exit_record.max_runtime_s}"
        else:
            message = FAILED_STATES[state] or _exit_message(row, exit_code)
        return BackendStatus(RunState.FAILED, exit_code=exit_code, message=message)
    return BackendStatus(RunState.RUNNING, message=f"unrecognised Slurm state {state}")


def _forgotten(
    exit_record: ExitRecord | None, *, cancel_requested: bool, submitted: bool
) -> BackendStatus:
    """Slurm does not know the job (purged after MinJobAge, or never submitted)."""
    if exit_record is None:
        why = (
            "Slurm no longer knows the job and it left no exit code"
            if submitted
            else ("no such attempt")
        )
        return BackendStatus(RunState.LOST, message=why)
    code = exit_record.exit_code
    if cancel_requested:
        return BackendStatus(RunState.CANCELLED, exit_code=code, message="cancelled")
    if exit_record.reason == "max_runtime":
        message = f"exceeded max_runtime_s={exit_record.max_runtime_s}"
        return BackendStatus(RunState.FAILED, exit_code=code, message=message)
    if code == 0:
        return BackendStatus(RunState.SUCCEEDED, exit_code=0)
    return BackendStatus(RunState.FAILED, exit_code=code, message=f"exited with code {code}")


def _exit_code(row: SqueueRow, exit_record: ExitRecord | None) -> int | None:
    if exit_record is not None:
        return exit_record.exit_code  # the command's own, recorded by the batch script
    if row.exit_status is None:
        return None
    return decode_wait_status(row.exit_status)[0]


def _exit_message(row: SqueueRow, exit_code: int | None) -> str:
    if row.exit_status is not None:
        signal = decode_wait_status(row.exit_status)[1]
        if signal is not None:
            return f"killed by signal {signal}"
    if exit_code is not None:
        return f"exited with code {exit_code}"
    return f"failed ({row.reason})"


def _reason(row: SqueueRow) -> str:
    return "" if row.reason in ("", "None") else row.reason
