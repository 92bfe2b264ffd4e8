"""The backend contract (docs/architecture.md §6, X3-X5), run against every adapter in
``HARNESSES``."""

from __future__ import annotations

import json
import os
import threading
from dataclasses import dataclass
from typing import TYPE_CHECKING

import pytest

from gpupool.backends.base import Backend, Capability, Finder, JobHandle, LogChunk, RunState
from gpupool.backends.errors import BackendRejected

if TYPE_CHECKING:
    from conftest import Harness

POOL = "test-shared-dev-t4-pool"
pytestmark = pytest.mark.timeout(60)


def read_all_logs(backend: Backend, handle: JobHandle) -> tuple[bytes, LogChunk]:
    data, offset = b"", 0
    for _ in range(100):
        chunk = backend.logs(handle, offset)
        data += chunk.data
        offset = chunk.next_offset
        if chunk.complete:
            return data, chunk
    pytest.fail("logs never completed")


def test_adapter_satisfies_the_protocol(harness: Harness) -> None:
    assert isinstance(harness.backend, Backend)
    assert harness.backend.name == harness.name


def test_submit_runs_to_success(harness: Harness) -> None:
    spec = harness.spec("ok")
    handle = harness.backend.submit(spec)

    status = harness.wait(handle)

    assert (status.state, status.exit_code) == (RunState.SUCCEEDED, 0)
    assert handle.key == spec.key == "ok.1"
    assert (handle.backend, handle.pool) == (harness.name, POOL)
    assert harness.runs(spec) == 1


def test_failure_reports_the_exit_code(harness: Harness) -> None:
    spec = harness.spec("fails", exit_code=3)
    status = harness.wait(harness.backend.submit(spec))
    assert (status.state, status.exit_code) == (RunState.FAILED, 3)


def test_resubmitting_a_key_returns_its_handle_and_never_runs_twice(harness: Harness) -> None:
    spec = harness.spec("once", duration_s=0.5)
    first = harness.backend.submit(spec)
    again = harness.backend.submit(spec)
    after_restart = harness.restart().submit(spec)

    harness.wait(first)

    assert again == first
    assert after_restart == first
    assert harness.backend.submit(spec) == first  # also once it has finished
    assert harness.runs(spec) == 1


def test_concurrent_submits_of_one_key_start_one_run(harness: Harness) -> None:
    spec = harness.spec("racy", duration_s=0.3)
    handles: list[JobHandle] = []
    barrier = threading.Barrier(4)

    def submit() -> None:
        barrier.wait()
        handles.append(harness.backend.submit(spec))

    threads = [threading.Thread(target=submit) for _ in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    harness.wait(handles[0])

    assert len(handles) == 4 and all(h == handles[0] for h in handles)
    assert harness.runs(spec) == 1


def test_cancel_signals_the_job_and_is_idempotent(harness: Harness) -> None:
    spec = harness.spec("stop", duration_s=30, trap_term="exit")
    handle = harness.backend.submit(spec)
    harness.wait_started(handle, spec)

    harness.backend.cancel(handle, grace_s=5)
    harness.backend.cancel(handle, grace_s=5)
    status = harness.wait(handle)
    harness.backend.cancel(handle, grace_s=5)  # after the end: still no error

    assert status.state == RunState.CANCELLED
    assert harness.sigterm_seen(spec)
    assert harness.backend.poll([handle])[handle.key].state == RunState.CANCELLED


def test_cancel_after_success_changes_nothing(harness: Harness) -> None:
    spec = harness.spec("done")
    handle = harness.backend.submit(spec)
    harness.wait(handle)

    harness.backend.cancel(handle, grace_s=0)

    assert harness.backend.poll([handle])[handle.key].state == RunState.SUCCEEDED


def test_logs_are_complete_once_the_attempt_is_final(harness: Harness) -> None:
    spec = harness.spec("talks")
    handle = harness.backend.submit(spec)
    harness.wait(handle)

    data, last = read_all_logs(harness.backend, handle)
    tail = harness.backend.logs(handle, last.next_offset)

    assert f"hello from {spec.key}".encode() in data
    assert (tail.data, tail.next_offset, tail.complete) == (b"", last.next_offset, True)


def test_logs_stream_while_the_job_runs(harness: Harness) -> None:
    spec = harness.spec("streams", duration_s=30)
    handle = harness.backend.submit(spec)
    harness.wait_started(handle, spec)

    chunk = harness.backend.logs(handle, 0)

    if Capability.LOG_STREAM in harness.backend.capabilities:
        assert f"hello from {spec.key}".encode() in chunk.data
    assert not chunk.complete
    assert harness.backend.poll([handle])[handle.key].state == RunState.RUNNING
    harness.backend.cancel(handle, grace_s=0)
    harness.wait(handle)


def test_the_job_sees_the_environment_contract(harness: Harness) -> None:
    spec = harness.spec(
        "env",
        attempt=2,
        env={"MY_SETTING": "from-user", "GPUPOOL_TEAM": "not-my-team"},
    )
    harness.wait(harness.backend.submit(spec))

    seen = harness.env_seen(spec)

    assert seen["GPUPOOL_JOB_ID"] == "env"
    assert seen["GPUPOOL_ATTEMPT"] == "2"
    assert seen["GPUPOOL_TEAM"] == "team-a"  # the contract wins over the user's env
    assert seen["GPUPOOL_USER"] == "alice"
    assert seen["GPUPOOL_GPU_TYPE"] == "t4"
    dirs = [seen["GPUPOOL_JOB_WORKDIR"], seen["GPUPOOL_INPUTS"], seen["GPUPOOL_OUTPUTS"]]
    assert all(dirs) and len(set(dirs)) == 3
    if harness.real_processes:
        assert seen["cwd"] == seen["GPUPOOL_JOB_WORKDIR"]
        assert all(os.path.isdir(d) for d in dirs)
        assert seen["CT_OBS"]  # the user's env arrives (MY_SETTING is not captured by prefix)


def test_a_job_that_checkpoints_sees_its_interval(harness: Harness) -> None:
    checkpoints = harness.spec("ckpt", checkpoint_interval_s=900)
    plain = harness.spec("plain")
    harness.wait(harness.backend.submit(checkpoints))
    harness.wait(harness.backend.submit(plain))

    seen, alone = harness.env_seen(checkpoints), harness.env_seen(plain)

    assert seen["GPUPOOL_CHECKPOINT_INTERVAL_S"] == "900"
    assert "GPUPOOL_CHECKPOINT_INTERVAL_S" not in alone


def test_a_task_of_a_job_array_sees_its_array_and_index(harness: Harness) -> None:
    task = harness.spec("arr_7", array_id="a-0123456789ab", array_index=7)
    single = harness.spec("single")
    harness.wait(harness.backend.submit(task))
    harness.wait(harness.backend.submit(single))

    seen, alone = harness.env_seen(task), harness.env_seen(single)

    assert (seen["GPUPOOL_ARRAY_JOB_ID"], seen["GPUPOOL_ARRAY_INDEX"]) == ("a-0123456789ab", "7")
    assert "GPUPOOL_ARRAY_JOB_ID" not in alone and "GPUPOOL_ARRAY_INDEX" not in alone


@dataclass(frozen=True)
class DevicesCase:
    gpus: int
    devices: tuple[tuple[int, ...], ...]
    want: str


@pytest.mark.parametrize(
    "case",
    [
        pytest.param(DevicesCase(0, (), ""), id="no GPUs: empty CUDA_VISIBLE_DEVICES"),
        pytest.param(DevicesCase(1, ((2,),), "2"), id="one GPU: the scheduler's device"),
        pytest.param(DevicesCase(2, ((1, 3),), "1,3"), id="two GPUs in the given order"),
    ],
)
def test_cuda_visible_devices_are_the_assigned_devices(harness: Harness, case: DevicesCase) -> None:
    spec = harness.spec("gpus", gpus_per_node=case.gpus, devices=case.devices)
    harness.wait(harness.backend.submit(spec))
    seen = harness.env_seen(spec)["CUDA_VISIBLE_DEVICES"]
    if getattr(harness, "backend_chooses_devices", False):
        # Slurm allocates the GPUs of a gres request itself: the job sees as many as it asked
        # for, distinct, and which ones is Slurm's choice.
        devices = [d for d in seen.split(",") if d]
        assert len(devices) == len(set(devices)) == case.gpus, seen
    else:
        assert seen == case.want


def test_max_runtime_is_enforced(harness: Harness) -> None:
    spec = harness.spec("slow", duration_s=30, max_runtime_s=1)
    status = harness.wait(harness.backend.submit(spec))
    assert status.state == RunState.FAILED
    assert "exceeded max_runtime_s=1" in status.message


def test_a_handle_outlives_the_adapter_instance(harness: Harness) -> None:
    spec = harness.spec("durable", duration_s=0.3)
    stored = json.dumps(harness.backend.submit(spec).to_dict())  # what the store keeps

    backend = harness.restart()
    handle = JobHandle.from_dict(json.loads(stored))
    status = harness.wait(handle)
    data, _ = read_all_logs(backend, handle)

    assert status.state == RunState.SUCCEEDED
    assert f"hello from {spec.key}".encode() in data


def test_an_unknown_attempt_is_lost(harness: Harness) -> None:
    handle = JobHandle(harness.name, POOL, "0", "never-submitted.1", {})
    status = harness.backend.poll([handle])["never-submitted.1"]
    assert status.state == RunState.LOST


def test_a_run_is_found_and_stopped_by_its_key_alone(harness: Harness) -> None:
    # What the controller does with an attempt it gave up on while the backend was away.
    backend = harness.restart()
    assert isinstance(backend, Finder), "every adapter implements find(key) (backends.base)"
    assert backend.find("never-submitted.1") is None
    spec = harness.spec("orphan", duration_s=30, trap_term="exit")
    harness.wait_started(harness.backend.submit(spec), spec)

    found = backend.find(spec.key)
    assert found is not None and found.key == spec.key
    backend.cancel(found, grace_s=0)

    assert harness.wait(found).state == RunState.CANCELLED
    assert harness.runs(spec) == 1


def test_multi_node_jobs_need_gang_capability(harness: Harness) -> None:
    spec = harness.spec("wide", nodes=2, gpus_per_node=1, devices=((0,), (1,)))
    if Capability.GANG in harness.backend.capabilities:
        status = harness.wait(harness.backend.submit(spec))
        assert status.state == RunState.SUCCEEDED
    else:
        with pytest.raises(BackendRejected, match="single-node"):
            harness.backend.submit(spec)
