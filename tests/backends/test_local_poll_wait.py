"""The local backend reports ends at once: runners announce starts and ends in the pool's
events file, the runner notices its job's exit through a pidfd, and a poll with nothing new
to report waits for such an announcement instead of answering "still running"."""

from __future__ import annotations

import os
import threading
import time
from pathlib import Path

import pytest

from gpupool.backends.base import AdapterContext, JobHandle, JobSpec, RunState
from gpupool.backends.local.adapter import LocalBackend
from gpupool.backends.local.runner import LogPump, events_file

pytestmark = pytest.mark.timeout(60)

POOL = "test-shared-dev-t4-pool"


def backend(state: Path, **options: object) -> LocalBackend:
    ctx = AdapterContext(
        pool=POOL,
        gpu_type="t4",
        state_dir=state,
        options={"run_without_identity": True, **options},
    )
    return LocalBackend(ctx)


def spec(job_id: str, *command: str) -> JobSpec:
    return JobSpec(
        job_id=job_id,
        attempt=1,
        team="team-a",
        user="alice",
        command=command,
        pool=POOL,
        gpu_type="t4",
        gpus_per_node=0,
    )


def wait_state(adapter: LocalBackend, handle: JobHandle, state: RunState) -> None:
    deadline = time.monotonic() + 20
    while adapter.poll([handle])[handle.key].state is not state:
        assert time.monotonic() < deadline, f"never {state}"


def test_a_runner_announces_its_start_and_its_end(tmp_path: Path) -> None:
    adapter = backend(tmp_path / "state")
    handle = adapter.submit(spec("j", "true"))
    wait_state(adapter, handle, RunState.SUCCEEDED)
    pool_dir = tmp_path / "state" / "local" / POOL
    assert events_file(pool_dir).read_bytes() == b".."
    assert sorted(p.name for p in pool_dir.iterdir()) == ["j.1"]  # only attempt dirs there


def test_a_poll_with_nothing_new_waits_for_the_end(tmp_path: Path) -> None:
    adapter = backend(tmp_path / "state", poll_wait_s=30)
    go = tmp_path / "go"
    handle = adapter.submit(spec("j", "sh", "-c", f"while [ ! -e {go} ]; do sleep 0.01; done"))
    wait_state(adapter, handle, RunState.RUNNING)  # reported running once
    threading.Timer(0.2, go.touch).start()
    assert adapter.poll([handle])[handle.key].state is RunState.SUCCEEDED


def test_without_a_wait_a_poll_answers_running_at_once(tmp_path: Path) -> None:
    adapter = backend(tmp_path / "state", poll_wait_s=0)
    go = tmp_path / "go"
    handle = adapter.submit(spec("j", "sh", "-c", f"while [ ! -e {go} ]; do sleep 0.01; done"))
    try:
        wait_state(adapter, handle, RunState.RUNNING)
        assert adapter.poll([handle])[handle.key].state is RunState.RUNNING
    finally:
        go.touch()
    wait_state(adapter, handle, RunState.SUCCEEDED)


def test_the_log_pump_returns_when_woken(tmp_path: Path) -> None:
    """The runner's wait for output also ends when the job's leader exits (its pidfd turns
    readable), even while a descendant keeps the output pipe open."""
    out_r, out_w = os.pipe()
    wake_r, wake_w = os.pipe()
    pump = LogPump(out_r, tmp_path / "output.log", None)
    try:
        os.write(wake_w, b"x")
        pump.pump(3600, wake_r)  # returns at once: the pytest timeout would end it otherwise
        pump.eof = True
        pump.pump(3600, wake_r)
    finally:
        pump.close()
        for fd in (out_w, wake_r, wake_w):
            os.close(fd)
