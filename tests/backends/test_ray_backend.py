"""What only the Ray adapter does, against a fake Jobs client (no cluster needed).

The contract suite runs the adapter against a real local Ray cluster (``-k ray``); these tests
pin down the request it sends, the status and error tables, max_runtime_s on an injected
clock, and that the bearer token never shows.
"""

from __future__ import annotations

import subprocess
import sys
from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest

from gpupool.backends.base import (
    AdapterContext,
    ContainerPolicy,
    ContainerSpec,
    JobHandle,
    JobSpec,
    Mount,
    RunState,
)
from gpupool.backends.errors import (
    BackendError,
    BackendMisconfigured,
    BackendRejected,
    BackendUnavailable,
)
from gpupool.backends.ray.adapter import RayBackend
from gpupool.backends.ray.errors import classify, map_ray_errors
from gpupool.backends.ray.status import RayJob, verdict

POOL = "test-shared-dev-t4-pool"
TOKEN = "s3cr3t-t0ken-value"
START_MS = 1_000_000


def not_found(job_id: str) -> RuntimeError:
    return RuntimeError(f"Request failed with status code 404: Job {job_id} does not exist.")


class FakeJobsClient:
    """Ray's Jobs API as the SDK shows it: JobDetails-like objects and its RuntimeErrors."""

    def __init__(self) -> None:
        self.jobs: dict[str, SimpleNamespace] = {}
        self.logs: dict[str, str] = {}
        self.requests: list[dict[str, Any]] = []
        self.calls: list[str] = []
        self.fail_with: Exception | None = None

    def _call(self, name: str) -> None:
        self.calls.append(name)
        if self.fail_with is not None:
            raise self.fail_with

    def submit_job(self, *, entrypoint: str, **kwargs: Any) -> str:
        self._call("submit_job")
        sid = kwargs["submission_id"]
        if sid in self.jobs:
            raise RuntimeError(
                "Request failed with status code 400: Traceback (most recent call last):\n"
                '  File "job_manager.py", line 553, in submit_job\n'
                f"ValueError: Job with submission_id {sid} already exists. "
                "Please use a different submission_id.\n."
            )
        self.requests.append({"entrypoint": entrypoint, **kwargs})
        self.jobs[sid] = SimpleNamespace(
            submission_id=sid,
            status="PENDING",
            message="",
            error_type=None,
            start_time=START_MS,
            end_time=None,
            driver_exit_code=None,
            metadata=dict(kwargs.get("metadata") or {}),
        )
        return sid

    def get_job_info(self, job_id: str) -> SimpleNamespace:
        self._call("get_job_info")
        if job_id not in self.jobs:
            raise not_found(job_id)
        return self.jobs[job_id]

    def list_jobs(self) -> list[SimpleNamespace]:
        self._call("list_jobs")
        return [*self.jobs.values(), SimpleNamespace(submission_id=None, status="RUNNING")]

    def get_job_logs(self, job_id: str) -> str:
        self._call("get_job_logs")
        if job_id not in self.jobs:
            raise not_found(job_id)
        return self.logs.get(job_id, "")

    def stop_job(self, job_id: str) -> bool:
        self._call("stop_job")
        job = self.jobs.get(job_id)
        if job is None:
            raise not_found(job_id)
        return job.status in ("PENDING", "RUNNING")

    def set(self, job_id: str, **fields: Any) -> None:
        vars(self.jobs[job_id]).update(fields)


@dataclass
class Rig:
    client: FakeJobsClient
    backend: RayBackend
    now: list[float]
    factory_calls: list[tuple[str, Mapping[str, str], float]] = field(default_factory=list)


def make_rig(tmp_path: Path, **options: Any) -> Rig:
    client = FakeJobsClient()
    now = [START_MS / 1000]
    calls: list[tuple[str, Mapping[str, str], float]] = []

    def factory(address: str, headers: Mapping[str, str], timeout_s: float) -> FakeJobsClient:
        calls.append((address, headers, timeout_s))
        return client

    ctx = AdapterContext(pool=POOL, gpu_type="t4", options=options, state_dir=tmp_path)
    backend = RayBackend(ctx, client_factory=factory, clock=lambda: now[0], environ={})
    return Rig(client, backend, now, calls)


@pytest.fixture
def rig(tmp_path: Path) -> Rig:
    return make_rig(tmp_path)


def spec(job_id: str = "j", **overrides: Any) -> JobSpec:
    base = JobSpec(
        job_id=job_id,
        attempt=1,
        team="team-a",
        user="alice",
        command=("python", "train.py", "--name", "it's"),
        pool=POOL,
        gpu_type="t4",
        gpus_per_node=2,
        cpus=4,
        memory_gb=8,
    )
    return replace(base, **overrides)


# -- submit ----------------------------------------------------------------------------------


def test_submit_sends_one_ray_job_for_the_attempt(rig: Rig, tmp_path: Path) -> None:
    handle = rig.backend.submit(spec(env={"MY": "1", "CUDA_VISIBLE_DEVICES": "7"}))

    [request] = rig.client.requests
    work = tmp_path / "ray" / POOL / "j.1" / "work"
    env = request["runtime_env"]["env_vars"]
    assert handle == JobHandle("ray", POOL, "j.1", "j.1")
    assert request["submission_id"] == "j.1"
    assert request["entrypoint"] == f"cd {work} && exec python train.py --name 'it'\"'\"'s'"
    assert (request["entrypoint_num_gpus"], request["entrypoint_num_cpus"]) == (2, 4)
    assert request["entrypoint_resources"] == {"gpu_t4": 2.0}
    assert request["entrypoint_memory"] == 8 << 30
    assert "CUDA_VISIBLE_DEVICES" not in env  # Ray sets it for the GPUs it assigns
    assert env["MY"] == "1" and env["GPUPOOL_JOB_WORKDIR"] == str(work)
    assert all(Path(env[k]).is_dir() for k in ("GPUPOOL_INPUTS", "GPUPOOL_OUTPUTS"))
    assert request["metadata"]["gpupool_key"] == "j.1"
    assert "gpupool_max_runtime_s" not in request["metadata"]


def test_a_job_without_gpus_sees_none(rig: Rig) -> None:
    rig.backend.submit(spec(gpus_per_node=0, max_runtime_s=60))
    [request] = rig.client.requests
    assert request["runtime_env"]["env_vars"]["CUDA_VISIBLE_DEVICES"] == ""
    assert "entrypoint_num_gpus" not in request and "entrypoint_resources" not in request
    assert request["metadata"]["gpupool_max_runtime_s"] == "60"


def test_pool_options_shape_the_request(tmp_path: Path) -> None:
    rig = make_rig(
        tmp_path,
        resource_prefix="accel_",
        stop_grace_s=30,
        submission_id_prefix="prod-",
        working_dir_root=str(tmp_path / "shared"),
    )
    handle = rig.backend.submit(spec())
    [request] = rig.client.requests
    assert (handle.provider_id, handle.key) == ("prod-j.1", "j.1")
    assert request["entrypoint_resources"] == {"accel_t4": 2.0}
    assert request["runtime_env"]["env_vars"]["RAY_JOB_STOP_WAIT_TIME_S"] == "30"
    assert (tmp_path / "shared" / "j.1" / "work").is_dir()


def test_resubmitting_returns_the_same_handle_and_submits_once(rig: Rig) -> None:
    first = rig.backend.submit(spec())
    again = rig.backend.submit(spec())
    assert again == first
    assert len(rig.client.requests) == 1
    assert rig.client.calls.count("get_job_info") == 1  # the look-up after "already exists"


def test_an_id_taken_by_someone_else_is_rejected(rig: Rig) -> None:
    rig.client.jobs["j.1"] = SimpleNamespace(submission_id="j.1", status="RUNNING", metadata={})
    with pytest.raises(BackendRejected, match="gpupool did not submit"):
        rig.backend.submit(spec())


@pytest.mark.parametrize(
    ("overrides", "match"),
    [
        pytest.param({"nodes": 2}, "single-node", id="multi-node gangs"),
        pytest.param({"command": ()}, "no command", id="no command"),
        pytest.param(
            {"image": "pytorch:2"}, "runs no images", id="an image on a pool without a runtime"
        ),
        pytest.param({"max_runtime_s": 0}, "max_runtime_s", id="zero max runtime"),
        pytest.param({"pool": "other"}, "pool", id="another pool's job"),
        pytest.param({"job_id": "../x"}, "submission id", id="unsafe key"),
    ],
)
def test_specs_ray_cannot_run_are_rejected(rig: Rig, overrides: dict[str, Any], match: str) -> None:
    with pytest.raises(BackendRejected, match=match):
        rig.backend.submit(spec(**overrides))
    assert rig.client.requests == []


# -- images ----------------------------------------------------------------------------------

IMAGE = "ghcr.io/acme/ray:2.60"


def image_rig(tmp_path: Path, **options: Any) -> Rig:
    rig = make_rig(tmp_path, working_dir_root=str(tmp_path / "ray-tmp" / "gpupool"), **options)
    ctx = replace(
        rig.backend.ctx,
        container=ContainerPolicy(runtime="podman", allowed_images=("ghcr.io/acme/*",)),
        options={**rig.backend.ctx.options, "ray_temp_dir": str(tmp_path / "ray-tmp")},
    )
    rig.backend = RayBackend(ctx, client_factory=lambda *a: rig.client, environ={})
    return rig


def test_an_image_goes_to_the_jobs_runtime_env_as_image_uri(tmp_path: Path) -> None:
    rig = image_rig(tmp_path)
    rig.backend.submit(spec(image=IMAGE, env={"MY": "1"}))
    (request,) = rig.client.requests
    runtime_env = request["runtime_env"]
    assert runtime_env["image_uri"] == IMAGE
    assert runtime_env["env_vars"]["MY"] == "1"
    assert runtime_env["env_vars"]["GPUPOOL_JOB_ID"] == "j"
    assert set(runtime_env) == {"image_uri", "env_vars"}  # image_uri takes nothing else


@dataclass(frozen=True)
class ImageRefusal:
    overrides: dict[str, Any]
    match: str
    ray_temp_dir: str | None = None


IMAGE_REFUSALS = [
    pytest.param(
        ImageRefusal({"image": "docker.io/evil:1"}, "allowed_images"), id="image not allowed"
    ),
    pytest.param(
        ImageRefusal(
            {"image": IMAGE, "container": ContainerSpec(mounts=(Mount("shared/x", "/x"),))},
            "takes no container.mounts",
        ),
        id="mounts",
    ),
    pytest.param(
        ImageRefusal(
            {"image": IMAGE, "container": ContainerSpec(pull_secret="acme", shm_size_gb=2)},
            "takes no container.shm_size_gb, image_pull_secret",
        ),
        id="shared memory and a pull secret",
    ),
    pytest.param(
        ImageRefusal({"image": IMAGE}, "outside Ray's temp dir", ray_temp_dir="/nowhere"),
        id="work dirs Ray does not mount",
    ),
]


@pytest.mark.parametrize("case", IMAGE_REFUSALS)
def test_what_ray_image_uri_cannot_give_is_refused(tmp_path: Path, case: ImageRefusal) -> None:
    rig = image_rig(tmp_path)
    if case.ray_temp_dir is not None:
        ctx = replace(
            rig.backend.ctx, options={**rig.backend.ctx.options, "ray_temp_dir": case.ray_temp_dir}
        )
        rig.backend = RayBackend(ctx, client_factory=lambda *a: rig.client, environ={})
    with pytest.raises(BackendRejected, match=case.match):
        rig.backend.submit(spec(**case.overrides))
    assert rig.client.requests == []


def test_a_ray_without_image_uri_refuses_images_naming_its_version(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from ray.runtime_env import RuntimeEnv

    monkeypatch.setattr(RuntimeEnv, "known_fields", RuntimeEnv.known_fields - {"image_uri"})
    rig = image_rig(tmp_path)
    with pytest.raises(BackendRejected, match=r"Ray 2\.\d+.* cannot run jobs from an image"):
        rig.backend.submit(spec(image=IMAGE))
    assert rig.client.requests == []


# -- status ----------------------------------------------------------------------------------


@dataclass(frozen=True)
class StatusCase:
    job: RayJob | None
    want: RunState
    exit_code: int | None = None
    message: str = ""
    stop: bool = False
    now_s: float = START_MS / 1000 + 5


def ray_job(status: str, **fields: Any) -> RayJob:
    return RayJob(submission_id="j.1", status=status, start_time_ms=START_MS, **fields)


LIMIT_10 = {"gpupool_max_runtime_s": "10"}


@pytest.mark.parametrize(
    "case",
    [
        pytest.param(StatusCase(ray_job("PENDING"), RunState.PENDING), id="PENDING -> PENDING"),
        pytest.param(StatusCase(ray_job("RUNNING"), RunState.RUNNING), id="RUNNING -> RUNNING"),
        pytest.param(
            StatusCase(ray_job("SUCCEEDED", driver_exit_code=0), RunState.SUCCEEDED, 0),
            id="SUCCEEDED -> SUCCEEDED 0",
        ),
        pytest.param(
            StatusCase(
                ray_job(
                    "FAILED",
                    driver_exit_code=3,
                    error_type="JOB_ENTRYPOINT_COMMAND_ERROR",
                    message="Job entrypoint command failed with exit code 3, last logs:\n...",
                ),
                RunState.FAILED,
                3,
                "exited with code 3",
            ),
            id="FAILED with an exit code -> FAILED, the code",
        ),
        pytest.param(
            StatusCase(
                ray_job(
                    "FAILED",
                    error_type="RUNTIME_ENV_SETUP_FAILURE",
                    message="Failed to set up runtime environment.\nNo module named x",
                ),
                RunState.FAILED,
                None,
                "RUNTIME_ENV_SETUP_FAILURE: Failed to set up runtime environment.",
            ),
            id="FAILED before the command ran -> FAILED, Ray's reason",
        ),
        pytest.param(
            StatusCase(
                ray_job("FAILED", error_type="JOB_SUPERVISOR_ACTOR_DIED", message="node died"),
                RunState.LOST,
                None,
                "JOB_SUPERVISOR_ACTOR_DIED: node died",
            ),
            id="FAILED because its supervisor died -> LOST (a new attempt)",
        ),
        pytest.param(
            StatusCase(
                ray_job("STOPPED", end_time_ms=START_MS + 2000),
                RunState.CANCELLED,
                None,
                "cancelled",
            ),
            id="STOPPED -> CANCELLED",
        ),
        pytest.param(
            StatusCase(
                ray_job("STOPPED", end_time_ms=START_MS + 10_500, metadata=LIMIT_10),
                RunState.FAILED,
                None,
                "exceeded max_runtime_s=10",
            ),
            id="STOPPED after max_runtime_s -> FAILED",
        ),
        pytest.param(
            StatusCase(
                ray_job("STOPPED", end_time_ms=START_MS + 3000, metadata=LIMIT_10),
                RunState.CANCELLED,
                None,
                "cancelled",
            ),
            id="STOPPED before max_runtime_s -> CANCELLED",
        ),
        pytest.param(
            StatusCase(ray_job("RUNNING", metadata=LIMIT_10), RunState.RUNNING, now_s=1009.9),
            id="RUNNING within max_runtime_s -> RUNNING",
        ),
        pytest.param(
            StatusCase(
                ray_job("RUNNING", metadata=LIMIT_10),
                RunState.RUNNING,
                message="stopping: exceeded max_runtime_s=10",
                stop=True,
                now_s=1010.0,
            ),
            id="RUNNING past max_runtime_s -> stop, still RUNNING until Ray stopped it",
        ),
        pytest.param(
            StatusCase(None, RunState.LOST, message="Ray does not know this job"),
            id="unknown submission id -> LOST",
        ),
        pytest.param(
            StatusCase(ray_job("QUEUED"), RunState.PENDING, message="Ray status QUEUED"),
            id="a status of a newer Ray -> PENDING, never LOST",
        ),
    ],
)
def test_status_mapping(case: StatusCase) -> None:
    found = verdict(case.job, now=case.now_s)
    assert (found.status.state, found.status.exit_code) == (case.want, case.exit_code)
    assert found.status.message == case.message
    assert found.stop == case.stop


def test_old_rays_exit_code_is_read_from_the_message() -> None:
    details = SimpleNamespace(
        submission_id="j.1",
        status="FAILED",
        message="Job entrypoint command failed with exit code 2",
    )
    assert RayJob.from_details(details).driver_exit_code == 2


def test_poll_asks_ray_once_for_all_handles(rig: Rig) -> None:
    a, b = rig.backend.submit(spec("a")), rig.backend.submit(spec("b"))
    rig.client.set("a.1", status="RUNNING")
    rig.client.calls.clear()

    got = rig.backend.poll([a, b, JobHandle("ray", POOL, "gone.1", "gone.1")])

    assert rig.client.calls == ["list_jobs"]
    assert {k: s.state for k, s in got.items()} == {
        "a.1": RunState.RUNNING,
        "b.1": RunState.PENDING,
        "gone.1": RunState.LOST,
    }


def test_max_runtime_is_enforced_on_the_injected_clock(rig: Rig) -> None:
    handle = rig.backend.submit(spec(max_runtime_s=60))
    rig.client.set("j.1", status="RUNNING")

    rig.now[0] = START_MS / 1000 + 59
    assert rig.backend.poll([handle])["j.1"].state == RunState.RUNNING
    assert "stop_job" not in rig.client.calls

    rig.now[0] = START_MS / 1000 + 61
    running = rig.backend.poll([handle])["j.1"]
    assert (running.state, running.message) == (
        RunState.RUNNING,
        "stopping: exceeded max_runtime_s=60",
    )
    assert rig.client.calls.count("stop_job") == 1

    rig.client.set("j.1", status="STOPPED", end_time=START_MS + 62_000)
    final = rig.backend.poll([handle])["j.1"]
    assert (final.state, final.message) == (RunState.FAILED, "exceeded max_runtime_s=60")
    assert rig.client.calls.count("stop_job") == 1  # a stopped job is not stopped again


# -- logs and cancel -------------------------------------------------------------------------


def test_logs_are_sliced_from_the_whole_log(rig: Rig) -> None:
    handle = rig.backend.submit(spec())
    rig.client.set("j.1", status="RUNNING")
    rig.client.logs["j.1"] = "héllo\n"

    first = rig.backend.logs(handle, 0)
    rig.client.logs["j.1"] += "bye\n"
    rig.client.set("j.1", status="SUCCEEDED")
    rest = rig.backend.logs(handle, first.next_offset)

    assert (first.data, first.next_offset, first.complete) == ("héllo\n".encode(), 7, False)
    assert (rest.data, rest.next_offset, rest.complete) == (b"bye\n", 11, True)


def test_logs_and_cancel_of_an_unknown_job_are_quiet(rig: Rig) -> None:
    handle = JobHandle("ray", POOL, "gone.1", "gone.1")
    assert rig.backend.logs(handle, 5) == rig.backend.logs(handle, 5)
    assert rig.backend.logs(handle, 5).complete
    rig.backend.cancel(handle, grace_s=1)


def test_cancel_is_idempotent(rig: Rig) -> None:
    handle = rig.backend.submit(spec())
    rig.backend.cancel(handle, grace_s=5)
    rig.client.set("j.1", status="STOPPED", end_time=START_MS + 1000)
    rig.backend.cancel(handle, grace_s=5)
    assert rig.client.calls.count("stop_job") == 2
    assert rig.backend.poll([handle])["j.1"].state == RunState.CANCELLED


def test_a_handle_of_another_backend_is_rejected(rig: Rig) -> None:
    with pytest.raises(BackendRejected, match="local"):
        rig.backend.poll([JobHandle("local", POOL, "1", "j.1")])


# -- errors ----------------------------------------------------------------------------------


class AuthenticationError(Exception):
    """Stands in for ray.exceptions.AuthenticationError, which is recognised by name."""


class RayError(RuntimeError):
    """Stands in for ray.exceptions.RayError."""


def http_error(status: int, body: str = "boom") -> RuntimeError:
    return RuntimeError(f"Request failed with status code {status}: {body}.")


@pytest.mark.parametrize(
    ("exc", "want"),
    [
        pytest.param(ConnectionError("Failed to connect"), BackendUnavailable, id="refused"),
        pytest.param(TimeoutError("read timed out"), BackendUnavailable, id="timeout"),
        pytest.param(OSError(13, "Permission denied"), BackendMisconfigured, id="EACCES"),
        pytest.param(http_error(500), BackendUnavailable, id="HTTP 500"),
        pytest.param(http_error(503), BackendUnavailable, id="HTTP 503"),
        pytest.param(http_error(400, "bad entrypoint"), BackendRejected, id="HTTP 400"),
        pytest.param(http_error(401), BackendMisconfigured, id="HTTP 401"),
        pytest.param(http_error(403), BackendMisconfigured, id="HTTP 403"),
        pytest.param(AuthenticationError("token"), BackendMisconfigured, id="auth error"),
        pytest.param(
            RuntimeError("Version check returned 404. Jobs API is not supported"),
            BackendMisconfigured,
            id="not a Ray dashboard",
        ),
        pytest.param(ValueError("invalid runtime_env"), BackendRejected, id="refused argument"),
        pytest.param(ImportError("No module named 'ray'"), BackendMisconfigured, id="no ray"),
        pytest.param(RayError("actor died"), BackendUnavailable, id="other Ray error"),
        pytest.param(KeyError("bug"), None, id="a bug propagates"),
        pytest.param(RuntimeError("bug"), None, id="a plain RuntimeError propagates"),
    ],
)
def test_error_mapping(exc: Exception, want: type[BackendError] | None) -> None:
    assert classify(exc, invalid=BackendRejected) is want
    if want is None:
        with pytest.raises(type(exc)), map_ray_errors("poll"):
            raise exc
    else:
        with pytest.raises(want) as caught, map_ray_errors("poll"):
            raise exc
        assert caught.value.__cause__ is exc


def test_refused_arguments_while_connecting_are_misconfiguration() -> None:
    assert classify(ValueError("bad address"), invalid=BackendMisconfigured) is BackendMisconfigured


def test_an_unreachable_cluster_is_retried_on_the_next_call(tmp_path: Path) -> None:
    attempts: list[int] = []
    client = FakeJobsClient()

    def factory(address: str, headers: Mapping[str, str], timeout_s: float) -> FakeJobsClient:
        attempts.append(1)
        if len(attempts) == 1:
            raise ConnectionError(f"Failed to connect to Ray at address: {address}.")
        return client

    ctx = AdapterContext(pool=POOL, gpu_type="t4", state_dir=tmp_path)
    backend = RayBackend(ctx, client_factory=factory, environ={})  # does not dial the cluster

    with pytest.raises(BackendUnavailable, match=r"127\.0\.0\.1:8265"):
        backend.poll([JobHandle("ray", POOL, "j.1", "j.1")])
    assert backend.poll([JobHandle("ray", POOL, "j.1", "j.1")])["j.1"].state == RunState.LOST
    assert len(attempts) == 2


def test_server_tracebacks_are_cut_to_their_last_line(rig: Rig) -> None:
    rig.client.fail_with = http_error(
        400, "Traceback (most recent call last):\n  ...\nValueError: x"
    )
    with pytest.raises(BackendRejected) as caught:
        rig.backend.submit(spec())
    assert str(caught.value) == "ray backend cannot submit j.1: HTTP 400: ValueError: x."


# -- options and the token -------------------------------------------------------------------


@pytest.mark.parametrize(
    ("options", "match"),
    [
        pytest.param({"adress": "http://x"}, "unknown ray pool options: adress", id="typo"),
        pytest.param({"address": "ray://h:10001"}, "http", id="Ray Client address"),
        pytest.param({"token": TOKEN, "token_env": "T"}, "exclude", id="two token sources"),
        pytest.param({"token_env": "NOT_SET_HERE"}, "not set", id="token_env unset"),
        pytest.param({"request_timeout_s": 0}, "positive", id="zero timeout"),
        pytest.param({"submission_id_prefix": "a/b"}, "submission_id_prefix", id="bad prefix"),
    ],
)
def test_bad_options_are_misconfiguration(
    tmp_path: Path, options: dict[str, Any], match: str
) -> None:
    with pytest.raises(BackendMisconfigured, match=match):
        make_rig(tmp_path, **options)


@pytest.mark.parametrize(
    "options",
    [
        pytest.param({"token": TOKEN}, id="token"),
        pytest.param({"token_env": "RAY_TOKEN"}, id="token_env"),
    ],
)
def test_the_token_is_sent_as_a_header_and_never_shown(
    tmp_path: Path, options: dict[str, Any]
) -> None:
    client = FakeJobsClient()
    seen: list[Mapping[str, str]] = []

    def factory(address: str, headers: Mapping[str, str], timeout_s: float) -> FakeJobsClient:
        seen.append(headers)
        return client

    ctx = AdapterContext(pool=POOL, gpu_type="t4", options=options, state_dir=tmp_path)
    backend = RayBackend(ctx, client_factory=factory, environ={"RAY_TOKEN": TOKEN})
    handle = backend.submit(spec())
    client.fail_with = http_error(500, f"server echoed Bearer {TOKEN}")
    with pytest.raises(BackendUnavailable) as caught:
        backend.poll([handle])

    assert seen == [{"Authorization": f"Bearer {TOKEN}"}]
    shown = [
        repr(backend),
        repr(backend.options),
        str(backend.options),
        str(caught.value),
        repr(caught.value),
        repr(handle.to_dict()),
        repr(client.requests),
    ]
    assert not [text for text in shown if TOKEN in text]


def test_importing_the_adapter_does_not_import_ray() -> None:
    code = (
        "import sys, gpupool.backends.registry, gpupool.backends.ray.adapter; "
        "sys.exit(1 if 'ray' in sys.modules else 0)"
    )
    assert subprocess.run([sys.executable, "-c", code], check=False).returncode == 0
