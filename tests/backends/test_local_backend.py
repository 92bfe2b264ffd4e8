"""What only the local backend does: detached runners, crash safety, user switching, limits."""

from __future__ import annotations

import errno
import json
import os
import signal
import subprocess
import sys
import time
from dataclasses import dataclass, replace
from pathlib import Path
from typing import TYPE_CHECKING, Any

import psutil
import pytest

from gpupool.backends.base import (
    AdapterContext,
    Capability,
    JobHandle,
    JobSpec,
    PosixIdentity,
    RunState,
)
from gpupool.backends.errors import (
    BackendError,
    BackendMisconfigured,
    BackendRejected,
    BackendUnavailable,
)
from gpupool.backends.local.adapter import LocalBackend
from gpupool.backends.local.errors import map_local_errors
from gpupool.backends.local.process import ProcessId, is_alive, launch_runner

if TYPE_CHECKING:
    from conftest import LocalHarness

pytestmark = pytest.mark.timeout(60)

POOL = "test-shared-dev-t4-pool"
# These tests run jobs without a POSIX identity; as root the pool must be told to allow it.
AS_SERVER = {"run_without_identity": True}


def wait_for(predicate: Any, timeout: float = 10.0) -> None:
    deadline = time.monotonic() + timeout
    while not predicate():
        if time.monotonic() > deadline:
            pytest.fail("condition not reached in time")
        time.sleep(0.05)


def runner_of(handle: JobHandle) -> ProcessId:
    found = ProcessId.from_mapping(handle.data)
    assert found is not None
    return found


def attempt_dir(handle: JobHandle) -> Path:
    return Path(handle.data["dir"])


def test_jobs_survive_the_death_of_the_submitting_process(local: LocalHarness) -> None:
    spec = local.spec("orphan", duration_s=1.5)
    script = """
import json, os, signal, sys
from gpupool.backends.base import AdapterContext, JobSpec
from gpupool.backends.local.adapter import LocalBackend
ctx = AdapterContext(**{**json.loads(sys.argv[1]), "state_dir": sys.argv[2]})
spec = JobSpec(**json.loads(sys.argv[3]))
handle = LocalBackend(ctx).submit(spec)
print(json.dumps(handle.to_dict()), flush=True)
os.kill(os.getpid(), signal.SIGKILL)  # a control-plane crash right after submitting
"""
    ctx = {"pool": POOL, "gpu_type": "t4", "gpus_per_node": 4, "options": AS_SERVER}
    raw_spec = {
        "job_id": spec.job_id,
        "attempt": spec.attempt,
        "team": spec.team,
        "user": spec.user,
        "command": list(spec.command),
        "pool": spec.pool,
        "gpu_type": spec.gpu_type,
        "gpus_per_node": 0,
        "env": dict(spec.env),
    }
    argv = [sys.executable, "-c", script, json.dumps(ctx), str(local.ctx.state_dir)]
    done = subprocess.run([*argv, json.dumps(raw_spec)], capture_output=True, text=True)
    assert done.returncode == -signal.SIGKILL, done.stderr
    handle = JobHandle.from_dict(json.loads(done.stdout))

    assert local.backend.poll([handle])[handle.key].state == RunState.RUNNING
    assert local.wait(handle).state == RunState.SUCCEEDED
    assert local.runs(spec) == 1


def test_handle_format(local: LocalHarness) -> None:
    handle = local.backend.submit(local.spec("fmt"))
    runner = runner_of(handle)
    assert handle.backend == "local"
    assert handle.provider_id == str(runner.pid)
    assert attempt_dir(handle) == Path(local.ctx.state_dir).absolute() / "local" / POOL / "fmt.1"
    assert set(handle.data) == {"dir", "pid", "create_time"}
    local.wait(handle)


def test_a_claim_without_runner_waits_then_is_lost(tmp_path: Path) -> None:
    launched: list[Path] = []
    ctx = AdapterContext(
        pool=POOL,
        gpu_type="t4",
        state_dir=tmp_path,
        options={"launch_timeout_s": 0.1, "startup_timeout_s": 30, **AS_SERVER},
    )
    spec = make_spec()
    backend = LocalBackend(ctx, launcher=launched.append)  # "crashes" before the runner starts

    handle = backend.submit(spec)
    again = backend.submit(spec)
    pending = backend.poll([handle])[handle.key]
    later = LocalBackend(ctx, launcher=launched.append, clock=lambda: time.time() + 60)
    lost = later.poll([handle])[handle.key]

    assert len(launched) == 1 and again == handle
    assert handle.provider_id == "" and set(handle.data) == {"dir"}
    assert pending.state == RunState.PENDING
    assert (lost.state, lost.message) == (RunState.LOST, "runner never started")


def test_a_late_runner_is_found_through_the_attempt_dir(tmp_path: Path) -> None:
    launched: list[Path] = []
    ctx = AdapterContext(
        pool=POOL, gpu_type="t4", state_dir=tmp_path, options={"launch_timeout_s": 0, **AS_SERVER}
    )
    backend = LocalBackend(ctx, launcher=launched.append)
    handle = backend.submit(make_spec())

    launch_runner(launched[0])  # the runner shows up after submit() stopped waiting

    wait_for(lambda: backend.poll([handle])[handle.key].state == RunState.SUCCEEDED)


def test_cancel_before_the_runner_starts_means_the_job_never_runs(local: LocalHarness) -> None:
    launched: list[Path] = []
    backend = LocalBackend(
        replace(local.ctx, options={"launch_timeout_s": 0, **AS_SERVER}), launcher=launched.append
    )
    spec = local.spec("never")
    handle = backend.submit(spec)

    backend.cancel(handle, grace_s=1)
    launch_runner(launched[0])
    wait_for(lambda: backend.poll([handle])[handle.key].state == RunState.CANCELLED)

    assert backend.poll([handle])[handle.key].message == "cancelled before start"
    assert local.runs(spec) == 0


def test_a_killed_runner_is_lost_and_cancel_kills_its_orphaned_job(local: LocalHarness) -> None:
    spec = local.spec("abandoned", duration_s=30)
    handle = local.backend.submit(spec)
    local.wait_started(handle, spec)
    job = ProcessId.from_mapping(json.loads((attempt_dir(handle) / "job.json").read_text()))
    assert job is not None

    os.kill(runner_of(handle).pid, signal.SIGKILL)
    wait_for(lambda: not is_alive(runner_of(handle)))
    status = local.backend.poll([handle])[handle.key]
    assert (status.state, status.message) == (RunState.LOST, "runner process is gone")
    assert is_alive(job)

    local.backend.cancel(handle, grace_s=5)

    wait_for(lambda: not is_alive(job))


def test_max_runtime_escalates_to_sigkill_after_the_grace(local: LocalHarness) -> None:
    backend = LocalBackend(replace(local.ctx, options={"max_runtime_grace_s": 0.3, **AS_SERVER}))
    spec = local.spec("stubborn", duration_s=30, trap_term="ignore", max_runtime_s=1)
    status = local.wait(backend.submit(spec))
    assert (status.state, status.exit_code) == (RunState.FAILED, 128 + signal.SIGKILL)
    assert status.message == "exceeded max_runtime_s=1"
    assert local.sigterm_seen(spec)


def test_cancel_grace_lets_the_job_finish_its_term_handler(local: LocalHarness) -> None:
    spec = local.spec("graceful", duration_s=30, trap_term="ignore")
    handle = local.backend.submit(spec)
    local.wait_started(handle, spec)

    started = time.monotonic()
    local.backend.cancel(handle, grace_s=0.5)
    status = local.wait(handle)

    assert status.state == RunState.CANCELLED
    assert status.exit_code == 128 + signal.SIGKILL
    assert time.monotonic() - started >= 0.5
    assert local.sigterm_seen(spec)


def test_processes_left_behind_by_the_job_are_killed(local: LocalHarness, tmp_path: Path) -> None:
    pidfile = tmp_path / "child.pid"
    spec = make_spec(command=("sh", "-c", f"sleep 30 & echo $! > {pidfile}; exit 0"))
    status = local.wait(local.backend.submit(spec))
    assert status.state == RunState.SUCCEEDED
    child = int(pidfile.read_text())
    wait_for(lambda: not psutil.pid_exists(child) or psutil.Process(child).status() == "zombie")


def test_a_command_that_cannot_start_fails_with_127(local: LocalHarness) -> None:
    spec = make_spec(command=("/nonexistent/train",))
    handle = local.backend.submit(spec)
    status = local.wait(handle)
    assert (status.state, status.exit_code) == (RunState.FAILED, 127)
    assert b"cannot start command '/nonexistent/train'" in local.backend.logs(handle).data


def test_the_job_gets_only_a_minimal_server_environment(
    local: LocalHarness, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("GPUPOOL_TEST_SECRET", "s3cret")
    spec = make_spec(command=("sh", "-c", "env"))
    handle = local.backend.submit(spec)
    local.wait(handle)
    env = dict(line.split("=", 1) for line in local.backend.logs(handle).data.decode().splitlines())
    assert "GPUPOOL_TEST_SECRET" not in env
    assert env["PATH"] == os.environ["PATH"]
    assert "HOME" in env


def test_spec_file_is_private(local: LocalHarness) -> None:
    handle = local.backend.submit(local.spec("private"))
    local.wait(handle)
    assert (attempt_dir(handle) / "spec.json").stat().st_mode & 0o777 == 0o600


@pytest.mark.skipif(os.geteuid() != 0, reason="switching users needs root: run the tests as root")
def test_the_job_runs_with_the_users_posix_identity(open_dir: Path) -> None:
    os.chmod(open_dir, 0o711)
    backend = LocalBackend(AdapterContext(pool=POOL, gpu_type="t4", state_dir=open_dir))
    spec = make_spec(
        command=("sh", "-c", 'id -u; id -g; id -G; touch "$GPUPOOL_OUTPUTS/made"'),
        posix=PosixIdentity(uid=65534, gid=65534, groups=(65534,)),
    )

    handle = backend.submit(spec)
    wait_for(lambda: backend.poll([handle])[handle.key].state == RunState.SUCCEEDED)

    assert Capability.POSIX_IDENTITY in backend.capabilities
    assert backend.logs(handle).data.decode().split() == ["65534", "65534", "65534"]
    made = attempt_dir(handle) / "outputs" / "made"
    assert (made.stat().st_uid, made.stat().st_gid) == (65534, 65534)
    assert (attempt_dir(handle) / "exit.json").stat().st_uid == 0  # the job cannot forge it


def make_spec(**overrides: Any) -> JobSpec:
    spec = JobSpec(
        job_id="j",
        attempt=1,
        team="team-a",
        user="alice",
        command=("true",),
        pool=POOL,
        gpu_type="t4",
        gpus_per_node=0,
    )
    return replace(spec, **overrides)


@dataclass(frozen=True)
class RejectCase:
    overrides: dict[str, Any]
    match: str


@pytest.mark.parametrize(
    "case",
    [
        pytest.param(RejectCase({"nodes": 2}, "single-node"), id="more than one node"),
        pytest.param(
            RejectCase({"image": "pytorch:2"}, "runs no images"),
            id="an image on a pool without a runtime",
        ),
        pytest.param(RejectCase({"command": ()}, "no command"), id="no command"),
        pytest.param(RejectCase({"pool": "other-pool"}, "is for pool"), id="another pool"),
        pytest.param(RejectCase({"job_id": "../x"}, "directory"), id="unsafe key"),
        pytest.param(RejectCase({"max_runtime_s": 0}, "positive"), id="zero max runtime"),
        pytest.param(
            RejectCase({"gpus_per_node": 2, "devices": ((1,),)}, "distinct device"),
            id="fewer devices than GPUs",
        ),
        pytest.param(
            RejectCase({"gpus_per_node": 2, "devices": ((1, 1),)}, "distinct device"),
            id="a device twice",
        ),
        pytest.param(
            RejectCase({"gpus_per_node": 1, "devices": ((4,),)}, r"0\.\.3"),
            id="a device the node does not have",
        ),
    ],
)
def test_submit_rejects_what_a_local_pool_cannot_run(tmp_path: Path, case: RejectCase) -> None:
    ctx = AdapterContext(pool=POOL, gpu_type="t4", state_dir=tmp_path, gpus_per_node=4)
    with pytest.raises(BackendRejected, match=case.match):
        LocalBackend(ctx).submit(make_spec(**case.overrides))
    assert not (tmp_path / "local" / POOL / "j.1").exists()


@pytest.mark.parametrize(
    "options",
    [
        pytest.param({"device": "nvidia"}, id="a misspelt option"),
        pytest.param({"devices": "amd"}, id="an unknown device mode"),
        pytest.param({"cancel_grace_s": "soon"}, id="a grace that is not a number"),
        pytest.param({"inherit_env": "PATH"}, id="inherit_env as a string"),
        pytest.param({"max_processes": 0}, id="no processes at all"),
        pytest.param({"max_log_bytes": "1G"}, id="a log cap that is not a number"),
        pytest.param({"max_log_bytes": True}, id="a log cap that is a boolean"),
        pytest.param({"cgroups": "maybe"}, id="an unknown cgroups mode"),
    ],
)
def test_bad_pool_options_are_misconfiguration(tmp_path: Path, options: dict[str, Any]) -> None:
    with pytest.raises(BackendMisconfigured):
        LocalBackend(AdapterContext(pool=POOL, gpu_type="t4", state_dir=tmp_path, options=options))


@pytest.mark.parametrize(
    ("error", "want"),
    [
        pytest.param(OSError(errno.ENOSPC, "No space left"), BackendUnavailable, id="disk full"),
        pytest.param(OSError(errno.EMFILE, "Too many files"), BackendUnavailable, id="no fds"),
        pytest.param(PermissionError(errno.EACCES, "denied"), BackendMisconfigured, id="EACCES"),
        pytest.param(OSError(errno.EROFS, "read-only"), BackendMisconfigured, id="read-only fs"),
        pytest.param(psutil.AccessDenied(1), BackendMisconfigured, id="psutil access denied"),
        pytest.param(BackendRejected("as is"), BackendRejected, id="backend errors pass"),
    ],
)
def test_os_errors_are_classified_at_the_boundary(
    error: Exception, want: type[BackendError]
) -> None:
    with pytest.raises(want) as caught, map_local_errors("submit"):
        raise error
    if not isinstance(error, BackendError):
        assert caught.value.__cause__ is error


def test_the_runner_imports_no_other_part_of_gpupool() -> None:
    probe = "import sys, gpupool.backends.local.runner; print(*sorted(sys.modules))"
    argv = [sys.executable, "-c", probe]
    loaded = subprocess.run(argv, capture_output=True, text=True, check=True)
    ours = [m for m in loaded.stdout.split() if m.startswith("gpupool")]
    assert ours == [
        "gpupool",
        "gpupool.backends",
        "gpupool.backends.local",
        "gpupool.backends.local.contain",  # stdlib only, like the runner
        "gpupool.backends.local.runner",
    ]


def test_runner_create_time_matches_psutil() -> None:
    from gpupool.backends.local.runner import create_time

    child = subprocess.Popen(["sleep", "5"])
    try:
        for pid in (os.getpid(), child.pid):
            assert abs(create_time(pid) - psutil.Process(pid).create_time()) < 0.01
    finally:
        child.kill()
        child.wait()


def test_the_runner_starts_without_psutil() -> None:
    probe = "import sys, gpupool.backends.local.runner; print('psutil' in sys.modules)"
    loaded = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True)
    assert loaded.stdout.strip() == "False"


@pytest.mark.skipif(os.geteuid() != 0, reason="only a root server switches users: run as root")
def test_as_root_a_job_without_a_posix_identity_is_refused_not_run_as_root(
    tmp_path: Path,
) -> None:
    # Its user left users: while the job was queued: the controller's spec has no identity.
    launched: list[Path] = []
    ctx = AdapterContext(pool=POOL, gpu_type="t4", state_dir=tmp_path, gpus_per_node=4)
    with pytest.raises(BackendRejected, match="'alice' has no POSIX identity"):
        LocalBackend(ctx, launcher=launched.append).submit(make_spec())
    assert launched == [] and not (tmp_path / "local" / POOL / "j.1").exists()


@pytest.mark.skipif(os.geteuid() != 0, reason="only a root server switches users: run as root")
@pytest.mark.parametrize(
    "identity",
    [
        pytest.param(PosixIdentity(0, 1000), id="uid 0"),
        pytest.param(PosixIdentity(1000, 0), id="gid 0"),
    ],
)
def test_as_root_a_job_given_root_identity_by_the_configuration_is_refused(
    tmp_path: Path, identity: PosixIdentity
) -> None:
    launched: list[Path] = []
    ctx = AdapterContext(pool=POOL, gpu_type="t4", state_dir=tmp_path, gpus_per_node=4)
    with pytest.raises(BackendRejected, match="'alice' has uid or gid 0"):
        LocalBackend(ctx, launcher=launched.append).submit(make_spec(posix=identity))
    assert launched == [] and not (tmp_path / "local" / POOL / "j.1").exists()
