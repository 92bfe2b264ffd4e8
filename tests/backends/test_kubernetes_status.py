"""What a Job's status means (``kubernetes/status.py``): the state mapping table of
docs/kubernetes-backend.md, case by case."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import pytest

from gpupool.backends.base import BackendStatus, RunState
from gpupool.backends.kubernetes.status import JobView, exit_code_of_pods, verdict


def job(*conditions: tuple[str, str, str], deleting: bool = False, **status: Any) -> JobView:
    """A Job as the API server returns it, with ``(type, reason, message)`` conditions True."""
    meta: dict[str, Any] = {
        "name": "gpupool-j-1-abc",
        "namespace": "team-a",
        "annotations": {"gpupool.io/key": "j.1", "gpupool.io/max-runtime-s": "60"},
    }
    if deleting:
        meta["deletionTimestamp"] = "2026-12-05T07:00:00Z"
    conds = [{"type": t, "status": "True", "reason": r, "message": m} for t, r, m in conditions]
    parallelism = status.pop("parallelism", 1)
    return JobView.from_object(
        {
            "metadata": meta,
            "spec": {"parallelism": parallelism},
            "status": {"conditions": conds, **status},
        }
    )


EXIT_3 = (
    "Container main for pod team-a/p-x failed with exit code 3 matching FailJob rule at index 1"
)
DISRUPTED = "Pod team-a/p-x has condition DisruptionTarget matching FailJob rule at index 0"


@dataclass(frozen=True)
class Case:
    job: JobView | None
    want: BackendStatus
    cancelled: bool = False
    pod_exit_code: int | None = None
    extra: dict[str, Any] = field(default_factory=dict)


@pytest.mark.parametrize(
    "case",
    [
        pytest.param(
            Case(None, BackendStatus(RunState.LOST, None, "its Job is not in the cluster")),
            id="no Job: lost",
        ),
        pytest.param(
            Case(None, BackendStatus(RunState.CANCELLED, None, "cancelled"), True),
            id="no Job after a cancel: cancelled",
        ),
        pytest.param(Case(job(), BackendStatus(RunState.PENDING)), id="created, no pod yet"),
        pytest.param(
            Case(job(active=1), BackendStatus(RunState.PENDING)), id="pod not ready: pending"
        ),
        pytest.param(
            Case(job(active=1, ready=1), BackendStatus(RunState.RUNNING)), id="pod ready: running"
        ),
        pytest.param(
            Case(
                job(active=2, ready=1, parallelism=2),
                BackendStatus(RunState.PENDING, None, "1 of 2 pods ready"),
            ),
            id="gang half ready: pending",
        ),
        pytest.param(
            Case(job(active=2, ready=2, parallelism=2), BackendStatus(RunState.RUNNING)),
            id="gang all ready: running",
        ),
        pytest.param(
            Case(job(("Complete", "CompletionsReached", "")), BackendStatus(RunState.SUCCEEDED, 0)),
            id="complete: succeeded",
        ),
        pytest.param(
            Case(
                job(("Failed", "PodFailurePolicy", EXIT_3)),
                BackendStatus(RunState.FAILED, 3, "exited with code 3"),
            ),
            id="exit code from the policy message",
        ),
        pytest.param(
            Case(
                job(
                    (
                        "Failed",
                        "BackoffLimitExceeded",
                        "Job has reached the specified backoff limit",
                    )
                ),
                BackendStatus(RunState.FAILED, 137, "exited with code 137"),
                pod_exit_code=137,
            ),
            id="exit code from the pod when the message has none",
        ),
        pytest.param(
            Case(
                job(
                    ("Failed", "DeadlineExceeded", "Job was active longer than specified deadline")
                ),
                BackendStatus(RunState.FAILED, None, "exceeded max_runtime_s=60"),
            ),
            id="deadline: failed, max_runtime named",
        ),
        pytest.param(
            Case(
                job(("Failed", "PodFailurePolicy", DISRUPTED)),
                BackendStatus(RunState.LOST, None, f"pod disrupted: {DISRUPTED}"),
            ),
            id="pod disrupted (drain, eviction): lost",
        ),
        pytest.param(
            Case(
                job(("Failed", "SomethingNew", "details")),
                BackendStatus(RunState.FAILED, None, "SomethingNew: details"),
            ),
            id="other failure: reason and message",
        ),
        pytest.param(
            Case(
                job(("FailureTarget", "PodFailurePolicy", EXIT_3), active=1, ready=1),
                BackendStatus(RunState.RUNNING, None, "stopping"),
            ),
            id="failing while pods terminate: not final yet",
        ),
        pytest.param(
            Case(
                job(active=1, ready=1, deleting=True),
                BackendStatus(RunState.RUNNING, None, "stopping"),
                cancelled=True,
            ),
            id="cancelled, pods still terminating: running",
        ),
        pytest.param(
            Case(
                job(("Failed", "PodFailurePolicy", EXIT_3.replace(" 3 ", " 143 ")), deleting=True),
                BackendStatus(RunState.CANCELLED, None, "cancelled"),
                cancelled=True,
            ),
            id="cancelled and ended: cancelled, however it ended",
        ),
        pytest.param(
            Case(job(("Suspended", "JobSuspended", "")), BackendStatus(RunState.PENDING)),
            id="a condition this table does not know: not final",
        ),
    ],
)
def test_job_status_maps_to_run_state(case: Case) -> None:
    got = verdict(case.job, cancelled=case.cancelled, pod_exit_code=case.pod_exit_code)
    assert got == case.want


def pod(index: str, code: int | None, name: str = "main") -> dict[str, Any]:
    state = {"terminated": {"exitCode": code}} if code is not None else {"running": {}}
    return {
        "metadata": {"annotations": {"batch.kubernetes.io/job-completion-index": index}},
        "status": {"containerStatuses": [{"name": name, "state": state}]},
    }


@pytest.mark.parametrize(
    ("pods", "want"),
    [
        pytest.param([pod("0", 0), pod("1", 2)], 2, id="the failed one"),
        pytest.param([pod("3", 9), pod("1", 4)], 4, id="the lowest failed index"),
        pytest.param([pod("0", None), pod("1", 0)], None, id="none failed"),
        pytest.param([pod("0", 5, name="sidecar")], None, id="only the main container counts"),
    ],
)
def test_exit_code_of_pods(pods: list[dict[str, Any]], want: int | None) -> None:
    assert exit_code_of_pods(pods) == want
