"""The simulated backend on its virtual clock (what the contract suite does not pin down)."""

from __future__ import annotations

from pathlib import Path

import pytest

from gpupool.backends.base import AdapterContext, JobSpec, RunState
from gpupool.backends.errors import BackendMisconfigured, BackendRejected
from gpupool.backends.fake import FakeBackend, FakeCluster


class Clock:
    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


def spec(**env: str) -> JobSpec:
    return JobSpec(
        job_id="j",
        attempt=1,
        team="team-a",
        user="alice",
        command=("train",),
        pool="p",
        gpu_type="t4",
        gpus_per_node=0,
        env=env,
    )


def test_a_job_is_pending_then_running_then_done_on_the_injected_clock(tmp_path: Path) -> None:
    clock = Clock()
    backend = FakeBackend(AdapterContext("p", "t4", {"clock": clock}, tmp_path))
    handle = backend.submit(spec(GPUPOOL_FAKE_PENDING_S="2", GPUPOOL_FAKE_DURATION_S="10"))

    states = []
    for now in (0, 1.9, 2, 11.9, 12):
        clock.now = now
        states.append(backend.poll([handle])[handle.key].state)

    assert states == [
        RunState.PENDING,
        RunState.PENDING,
        RunState.RUNNING,
        RunState.RUNNING,
        RunState.SUCCEEDED,
    ]


def test_cancelling_a_pending_job_sends_no_signal(tmp_path: Path) -> None:
    cluster = FakeCluster(Clock())
    backend = FakeBackend(AdapterContext("p", "t4", state_dir=tmp_path), cluster=cluster)
    handle = backend.submit(spec(GPUPOOL_FAKE_PENDING_S="5"))

    backend.cancel(handle, grace_s=1)

    run = cluster.run(handle.key)
    assert run is not None and run.signals == []
    assert backend.poll([handle])[handle.key].state == RunState.CANCELLED


def test_logs_appear_once_the_job_starts(tmp_path: Path) -> None:
    clock = Clock()
    backend = FakeBackend(AdapterContext("p", "t4", {"clock": clock}, tmp_path))
    handle = backend.submit(spec(GPUPOOL_FAKE_PENDING_S="1"))
    assert backend.logs(handle).data == b""
    clock.now = 1
    assert backend.logs(handle).data == b"hello from j.1\n"


@pytest.mark.parametrize(
    "options",
    [
        pytest.param({"clock": 3}, id="clock not callable"),
        pytest.param({"cluster": object()}, id="cluster of the wrong type"),
    ],
)
def test_bad_options_are_misconfiguration(tmp_path: Path, options: dict[str, object]) -> None:
    with pytest.raises(BackendMisconfigured):
        FakeBackend(AdapterContext("p", "t4", options, tmp_path))


def test_bad_fake_settings_reject_the_job(tmp_path: Path) -> None:
    backend = FakeBackend(AdapterContext("p", "t4", state_dir=tmp_path))
    with pytest.raises(BackendRejected, match="invalid fake job setting"):
        backend.submit(spec(GPUPOOL_FAKE_DURATION_S="long"))
