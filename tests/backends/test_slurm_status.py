"""Slurm states onto RunState (``slurm/status.py``): the README's table, as named cases."""

from __future__ import annotations

from dataclasses import dataclass

import pytest

from gpupool.backends.base import BackendStatus, RunState
from gpupool.backends.slurm.parsers import ExitRecord, SqueueRow
from gpupool.backends.slurm.status import job_status


@dataclass(frozen=True)
class Case:
    state: str | None  # None: Slurm does not know the job (purged or never submitted)
    want: BackendStatus
    reason: str = "None"
    exit_status: int | None = 0
    exit_record: ExitRecord | None = None
    cancel_requested: bool = False
    submitted: bool = True
    max_runtime_s: int | None = None


S, R = RunState, BackendStatus
CASES = [
    Case("PENDING", R(S.PENDING, message="Resources"), reason="Resources"),
    Case("CONFIGURING", R(S.PENDING)),
    Case("RUNNING", R(S.RUNNING)),
    Case("COMPLETING", R(S.RUNNING)),
    Case("COMPLETED", R(S.SUCCEEDED, 0)),
    Case("FAILED", R(S.FAILED, 3, "exited with code 3"), exit_status=768),
    Case("FAILED", R(S.FAILED, 137, "killed by signal 9"), exit_status=9),
    Case(
        "FAILED",
        R(S.FAILED, 124, "exceeded max_runtime_s=1"),
        exit_status=124 << 8,
        exit_record=ExitRecord(124, "max_runtime", 1),
    ),
    Case("OUT_OF_MEMORY", R(S.FAILED, 0, "out of memory")),
    Case("TIMEOUT", R(S.FAILED, 0, "exceeded max_runtime_s=60"), max_runtime_s=60),
    Case("TIMEOUT", R(S.FAILED, 0, "exceeded its Slurm time limit")),
    Case("CANCELLED", R(S.CANCELLED, 0, "cancelled")),
    Case(
        "FAILED",
        R(S.CANCELLED, 143, "cancelled"),
        exit_status=143 << 8,
        cancel_requested=True,
    ),
    Case("COMPLETED", R(S.CANCELLED, 0, "cancelled"), cancel_requested=True),
    Case("PREEMPTED", R(S.PREEMPTED, 0, "preempted by Slurm")),
    Case("NODE_FAIL", R(S.PREEMPTED, 0, "evicted: its node failed (Slurm NODE_FAIL)")),
    Case("BOOT_FAIL", R(S.LOST, 0, "its node failed to boot")),
    Case("DEADLINE", R(S.FAILED, 0, "reached its Slurm deadline")),
    Case("SOMETHING_NEW", R(S.RUNNING, message="unrecognised Slurm state SOMETHING_NEW")),
    Case(None, R(S.SUCCEEDED, 0), exit_record=ExitRecord(0, "exited")),
    Case(None, R(S.FAILED, 2, "exited with code 2"), exit_record=ExitRecord(2, "exited")),
    Case(
        None,
        R(S.FAILED, 124, "exceeded max_runtime_s=5"),
        exit_record=ExitRecord(124, "max_runtime", 5),
    ),
    Case(
        None,
        R(S.CANCELLED, 143, "cancelled"),
        exit_record=ExitRecord(143, "exited"),
        cancel_requested=True,
    ),
    Case(None, R(S.LOST, message="Slurm no longer knows the job and it left no exit code")),
    Case(None, R(S.LOST, message="no such attempt"), submitted=False),
]


def case_id(case: Case) -> str:
    where = case.state or ("purged" if case.submitted else "never submitted")
    extra = " +cancel" if case.cancel_requested else ""
    extra += f" +exit file {case.exit_record.reason}" if case.exit_record else ""
    return f"{where}{extra} -> {case.want.state.name} {case.want.message}".strip()


@pytest.mark.parametrize("case", [pytest.param(c, id=case_id(c)) for c in CASES])
def test_state_mapping(case: Case) -> None:
    row = None
    if case.state is not None:
        row = SqueueRow("7", case.state, case.reason, case.exit_status, "gpupool-j.1")
    got = job_status(
        row,
        case.exit_record,
        cancel_requested=case.cancel_requested,
        submitted=case.submitted,
        max_runtime_s=case.max_runtime_s,
    )
    assert got == case.want
