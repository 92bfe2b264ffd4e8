"""Jobs from an image on the real Slurm test cluster, podman form (scripts/slurm/up.sh and
scripts/podman/up.sh): cancel and max_runtime_s stop the container, which is then removed.
Output parity with the local backend is in test_backend_parity.py."""

from __future__ import annotations

import subprocess
import time
from dataclasses import dataclass, replace
from pathlib import Path

import pytest

from gpupool.backends.base import ContainerPolicy, RunState
from support.podman import TEST_IMAGE, podman_problem

pytestmark = pytest.mark.timeout(240)


@dataclass(frozen=True)
class Stop:
    command: str
    max_runtime_s: int | None
    cancel_grace_s: float | None
    want_state: RunState
    want_log: str  # the job's own lines (Slurm adds lines of its own to a cancelled job's)


STOPS = [
    pytest.param(
        Stop(
            "trap 'echo got TERM; exit 7' TERM; echo up; while :; do sleep 0.1; done",
            None,
            30,
            RunState.CANCELLED,
            "up\ngot TERM\n",
        ),
        id="cancel: the container gets SIGTERM and exits in its grace",
    ),
    pytest.param(
        Stop(
            "trap 'echo got TERM' TERM; echo up; while :; do sleep 0.1; done",
            3,
            None,
            RunState.FAILED,
            "up\ngot TERM\n",
        ),
        id="max_runtime_s: SIGTERM, then SIGKILL after the grace",
    ),
]


def named(name: str) -> list[str]:
    out = subprocess.run(
        ["podman", "ps", "-a", "--filter", f"name={name}", "--format", "{{.Names}}"],
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    return out.split()


@pytest.mark.parametrize("case", STOPS)
def test_stopping_a_slurm_container(slurm, case: Stop) -> None:  # type: ignore[no-untyped-def]
    if problem := podman_problem():
        pytest.skip(problem)
    slurm.ctx = replace(
        slurm.ctx,
        container=ContainerPolicy(runtime="podman", allowed_images=("localhost/gpupool-test/*",)),
    )
    backend = slurm.restart()
    spec = replace(
        slurm.spec("ctr-stop"),
        command=("sh", "-c", case.command),
        image=TEST_IMAGE,
        max_runtime_s=case.max_runtime_s,
    )
    handle = backend.submit(spec)
    log = Path(handle.data["workdir"]) / "output.log"
    deadline = time.monotonic() + 120
    while b"up" not in (log.read_bytes() if log.exists() else b""):
        assert time.monotonic() < deadline, "the job did not start"
        time.sleep(0.1)
    if case.cancel_grace_s is not None:
        backend.cancel(handle, case.cancel_grace_s)
    status = slurm.wait(handle)

    assert status.state == case.want_state, status
    own = [line for line in log.read_text().splitlines(keepends=True) if "slurm" not in line]
    assert "".join(own) == case.want_log  # SIGTERM reached the job exactly once
    assert named(handle.data["job_name"]) == []  # stopped and removed
