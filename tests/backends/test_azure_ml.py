"""The Azure ML adapter beyond the contract suite: the job plan, the status table, options,
and against the stand-in (tests/support/azure_ml.py) images, data, adoption and errors."""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass, replace
from datetime import UTC, datetime, timedelta
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest

from gpupool.backends.azure_ml.adapter import AzureMLBackend
from gpupool.backends.azure_ml.job import plan
from gpupool.backends.azure_ml.options import AzureMLOptions
from gpupool.backends.azure_ml.status import AMLJobView, verdict
from gpupool.backends.base import AdapterContext, JobHandle, JobSpec, RunState
from gpupool.backends.errors import BackendMisconfigured, BackendRejected
from gpupool.data.grants.base import Grant, OutputTarget, scope_for
from support.azure_ml import GROUP, SUBSCRIPTION, TOKEN, WORKSPACE, WS, AzureMLStandIn

POOL = "aml-pool"
pytestmark = pytest.mark.timeout(60)


def spec(job_id: str = "train", **overrides: Any) -> JobSpec:
    base = JobSpec(
        job_id=job_id,
        attempt=1,
        team="team-a",
        user="alice",
        command=("python", "train.py"),
        pool=POOL,
        gpu_type="t4",
        gpus_per_node=1,
    )
    return replace(base, **overrides)


def grant(base: str = "https://acct.blob.core.windows.net/team-a") -> Grant:
    scope = scope_for(
        team="team-a",
        user="alice",
        job_id="train",
        attempt=1,
        inputs=["shared/data.csv"],
        outputs=["home/alice/out"],
        now=datetime(2026, 1, 1, tzinfo=UTC),
        max_runtime_s=600,
        default_runtime_s=3600,
        margin_s=60,
    )
    return Grant(
        kind="azure",
        scope=scope,
        inputs={"shared/data.csv": f"{base}/shared/data.csv?sig=read"},
        outputs={"home/alice/out": OutputTarget(f"{base}/home/alice/out/attempt-1?sig=c")},
    )


# -- the plan ------------------------------------------------------------------------------


def test_the_plan_carries_the_contract_tags_and_limit() -> None:
    job = plan(spec(max_runtime_s=120, env={"MINE": "1", "GPUPOOL_OUTPUTS": "/x"}), prefix="p-")

    assert (job.name, job.display_name, job.timeout_s) == ("p-train-a1", "train.1", 120)
    assert job.tags["gpupool_key"] == "train.1" and job.tags["gpupool_pool"] == POOL
    assert job.environment_variables["MINE"] == "1"
    assert job.environment_variables["CUDA_VISIBLE_DEVICES"] == "0"
    assert "GPUPOOL_OUTPUTS" not in job.environment_variables  # derived by the wrapper
    assert job.command.endswith('cd "$GPUPOOL_JOB_WORKDIR" && exec python train.py 2>&1')


def test_grant_inputs_and_datastore_outputs_are_linked_into_the_contract_dirs() -> None:
    job = plan(
        spec(inputs=("shared/data.csv",), outputs=("home/alice/out",), grant=grant()),
        output_datastore="{team}_data",
    )

    assert job.inputs == {
        "input_0": "https://acct.blob.core.windows.net/team-a/shared/data.csv?sig=read"
    }
    assert job.outputs == {
        "output_0": "azureml://datastores/team_a_data/paths/home/alice/out/attempt-1"
    }
    assert 'ln -sfn "${{inputs.input_0}}" "$w"/inputs/shared/data.csv' in job.command
    assert 'ln -sfn "${{outputs.output_0}}" "$w"/outputs/home/alice/out' in job.command


def test_without_a_datastore_outputs_are_left_to_the_grant() -> None:
    job = plan(spec(outputs=("home/alice/out",), grant=grant()))
    assert job.outputs == {} and "GPUPOOL_OUTPUT_URLS" in job.environment_variables


# -- status --------------------------------------------------------------------------------

T0 = datetime(2026, 1, 1, tzinfo=UTC)


def job(status: str, **fields: Any) -> AMLJobView:
    return AMLJobView(name="j", status=status, tags={}, **fields)


@dataclass(frozen=True)
class StatusCase:
    job: AMLJobView | None
    want: RunState
    code: int | None = None
    message: str = ""


@pytest.mark.parametrize(
    "case",
    [
        pytest.param(StatusCase(None, RunState.LOST, message="does not know"), id="unknown"),
        *(
            pytest.param(StatusCase(job(s), RunState.PENDING), id=f"{s}: pending")
            for s in ("NotStarted", "Queued", "Preparing", "Provisioning", "Starting")
        ),
        pytest.param(StatusCase(job("Running"), RunState.RUNNING), id="running"),
        pytest.param(
            StatusCase(job("CancelRequested"), RunState.RUNNING),
            id="cancel requested: still running until it ends",
        ),
        pytest.param(StatusCase(job("Completed"), RunState.SUCCEEDED, 0), id="completed"),
        pytest.param(
            StatusCase(
                job("Failed", error="User process 'bash' exited with status code 3. See log"),
                RunState.FAILED,
                3,
                "exited with code 3",
            ),
            id="failed: the exit code from the run's error",
        ),
        pytest.param(
            StatusCase(
                job("Failed", error="Image pull failed\nmore"), RunState.FAILED, None, "Image pull"
            ),
            id="failed without an exit code: the error's first line",
        ),
        pytest.param(
            StatusCase(
                job("Failed", timeout_s=5, start=T0, end=T0 + timedelta(seconds=6)),
                RunState.FAILED,
                message="exceeded max_runtime_s=5",
            ),
            id="stopped at its timeout: failed, exceeded",
        ),
        pytest.param(
            StatusCase(
                job("Canceled", timeout_s=5, start=T0, end=T0 + timedelta(seconds=1)),
                RunState.CANCELLED,
                message="cancelled",
            ),
            id="canceled before its timeout: cancelled",
        ),
        pytest.param(
            StatusCase(job("Hibernating"), RunState.PENDING, message="Azure ML status"),
            id="a status of a newer Azure ML: pending, never lost",
        ),
    ],
)
def test_aml_statuses_map_to_gpupools(case: StatusCase) -> None:
    got = verdict(case.job)
    assert (got.state, got.exit_code) == (case.want, case.code)
    assert case.message in got.message


# -- options -------------------------------------------------------------------------------

GOOD = {
    "subscription_id": SUBSCRIPTION,
    "resource_group": GROUP,
    "workspace": WORKSPACE,
    "compute": "gpu-cluster",
}


@pytest.mark.parametrize(
    ("changes", "error"),
    [
        pytest.param({"compute": ""}, "need compute", id="no compute cluster"),
        pytest.param({"subscription_id": "mine"}, "a GUID", id="not a subscription id"),
        pytest.param({"environment": "my-env:1"}, "azureml:<name>:<version>", id="bare env"),
        pytest.param({"arm_endpoint": "http://x"}, "https:// URL", id="plain-text ARM"),
        pytest.param({"computee": "x"}, "unknown azure-ml pool options", id="a typo"),
    ],
)
def test_bad_options_name_the_field(changes: dict[str, str], error: str) -> None:
    with pytest.raises(BackendMisconfigured, match=error):
        AzureMLOptions.parse({**GOOD, **changes})


# -- against the stand-in ------------------------------------------------------------------


class Token:
    def __init__(self, token: str) -> None:
        self.token = token

    def get_token(self, *scopes: str, **kwargs: Any) -> Any:
        from azure.core.credentials import AccessToken

        return AccessToken(self.token, int(time.time()) + 3600)

    def get_token_info(self, *scopes: str, **kwargs: Any) -> Any:
        from azure.core.credentials import AccessTokenInfo

        return AccessTokenInfo(self.token, int(time.time()) + 3600)


@pytest.fixture
def stand_in(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[AzureMLStandIn]:
    with AzureMLStandIn(tmp_path / "aml") as server:
        monkeypatch.setenv("REQUESTS_CA_BUNDLE", str(server.cert))
        monkeypatch.delenv("AZUREML_CURRENT_CLOUD", raising=False)
        yield server
    assert server.rejected == []


def adapter(stand_in: AzureMLStandIn, token: str = TOKEN, **options: Any) -> AzureMLBackend:
    ctx = AdapterContext(
        pool=POOL,
        gpu_type="t4",
        options={
            **GOOD,
            "environment": "azureml:gpupool-test:1",
            "arm_endpoint": stand_in.arm_endpoint,
            "request_timeout_s": 5,
            **options,
        },
    )
    return AzureMLBackend(ctx, credential_factory=lambda: Token(token))


def wait(backend: AzureMLBackend, handle: JobHandle, want: RunState) -> None:
    deadline = time.monotonic() + 15
    while (state := backend.poll([handle])[handle.key].state) != want:
        assert time.monotonic() < deadline, f"{handle.key} still {state}"
        time.sleep(0.05)


def test_the_job_is_a_command_job_on_the_pools_cluster(stand_in: AzureMLStandIn) -> None:
    backend = adapter(stand_in)
    handle = backend.submit(spec("hello", command=("echo", "hi"), max_runtime_s=60))
    wait(backend, handle, RunState.SUCCEEDED)

    (created,) = stand_in.calls("create_job")
    props = created.body["properties"]
    assert created.path.endswith("/jobs/hello-a1")
    assert props["computeId"].endswith(f"/workspaces/{WORKSPACE}/computes/gpu-cluster")
    assert props["environmentId"].endswith("/environments/gpupool-test/versions/1")
    assert props["experimentName"] == f"gpupool-{POOL}"
    assert props["limits"]["timeout"] == "PT1M"
    assert props["tags"]["gpupool_key"] == "hello.1"


def test_a_jobs_image_becomes_an_anonymous_environment(stand_in: AzureMLStandIn) -> None:
    backend = adapter(stand_in)
    handle = backend.submit(spec("img", command=("true",), image="python:3.11-slim"))
    wait(backend, handle, RunState.SUCCEEDED)

    (environment,) = stand_in.environments.values()
    assert environment["properties"]["image"] == "python:3.11-slim"
    env_id = stand_in.calls("create_job")[0].body["properties"]["environmentId"]
    assert "/environments/CliV2AnonymousEnvironment/versions/" in env_id


def test_a_pool_without_environment_needs_an_image(stand_in: AzureMLStandIn) -> None:
    backend = adapter(stand_in, environment=None)
    with pytest.raises(BackendRejected, match=r"options\.environment"):
        backend.submit(spec("noenv"))
    assert stand_in.requests == []


def test_a_job_of_that_name_that_is_not_gpupools_is_refused(stand_in: AzureMLStandIn) -> None:
    backend = adapter(stand_in)
    backend.submit(spec("mine", command=("true",)))
    stand_in.jobs["mine-a1"].props["tags"]["gpupool_key"] = "someone-else"

    with pytest.raises(BackendRejected, match="gpupool did not submit"):
        adapter(stand_in).submit(spec("mine", command=("true",)))


def test_a_wrong_token_is_misconfigured(stand_in: AzureMLStandIn) -> None:
    with pytest.raises(BackendMisconfigured, match="401"):
        adapter(stand_in, token="not-it").submit(spec("x"))


class Blobs:
    """Serves one input file over HTTP, as blob storage would with a SAS."""

    def __init__(self) -> None:
        class Handler(BaseHTTPRequestHandler):
            def do_GET(self) -> None:
                ok = self.path == "/team-a/shared/data.csv?sig=read"
                self.send_response(200 if ok else 404)
                self.end_headers()
                self.wfile.write(b"a,b\n1,2\n" if ok else b"")

            def log_message(self, format: str, *args: object) -> None:
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        threading.Thread(target=self.server.serve_forever, daemon=True).start()
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}/team-a"


def test_inputs_and_outputs_reach_the_contract_dirs(stand_in: AzureMLStandIn) -> None:
    blobs = Blobs()
    script = 'cp "$GPUPOOL_INPUTS/shared/data.csv" "$GPUPOOL_OUTPUTS/home/alice/out/copy.csv"'
    job_spec = spec(
        "data",
        command=("sh", "-c", script),
        gpus_per_node=0,
        inputs=("shared/data.csv",),
        outputs=("home/alice/out",),
        grant=grant(blobs.url),
    )
    backend = adapter(stand_in, output_datastore="{team}_data")
    try:
        handle = backend.submit(job_spec)
        wait(backend, handle, RunState.SUCCEEDED)
    finally:
        blobs.server.shutdown()
        blobs.server.server_close()

    props = stand_in.jobs["data-a1"].props
    assert props["inputs"]["input_0"]["mode"] == "Download"
    assert props["outputs"]["output_0"]["uri"].endswith(
        "team_a_data/paths/home/alice/out/attempt-1"
    )
    uploaded = stand_in.jobs["data-a1"].outputs["output_0"] / "copy.csv"
    assert uploaded.read_bytes() == b"a,b\n1,2\n"


class AzureError(Exception):
    pass


class ValidationException(AzureError):
    pass


def test_the_sdks_own_refusal_fails_the_attempt_with_a_plain_message() -> None:
    from gpupool.backends.azure_ml.errors import map_azure_ml_errors

    with pytest.raises(BackendRejected) as raised, map_azure_ml_errors("submit x.1"):
        raise ValidationException("\x1b[37m\n\x1b[30m\n1) One or more fields are invalid\x1b[39m")

    assert (
        str(raised.value) == "azure-ml backend cannot submit x.1: 1) One or more fields are invalid"
    )


@pytest.mark.parametrize(
    ("method", "path", "body", "why"),
    [
        pytest.param(
            "GET", f"{WS}/jobs/x?api-version=2022-01-01", None, "api-version", id="old api"
        ),
        pytest.param(
            "PUT",
            f"{WS}/jobs/x?api-version=2025-01-01-preview",
            {"properties": {"jobType": "Command", "command": "true", "resources": {}}},
            "unknown fields ['properties.resources']",
            id="a field the adapter never sends",
        ),
        pytest.param(
            "DELETE",
            f"{WS}/jobs/x?api-version=2024-01-01-preview",
            None,
            "not an operation",
            id="delete",
        ),
    ],
)
def test_the_stand_in_rejects_what_it_does_not_know(
    stand_in: AzureMLStandIn, method: str, path: str, body: Any, why: str
) -> None:
    import requests

    answer = requests.request(
        method,
        stand_in.arm_endpoint + path,
        json=body,
        headers={"Authorization": f"Bearer {TOKEN}"},
        timeout=5,
    )

    assert answer.status_code == 400
    assert len(stand_in.rejected) == 1 and why in stand_in.rejected[0]
    stand_in.rejected.clear()  # seen: the fixture checks nothing else was refused


def test_the_controllers_probe_asks_azure_ml(stand_in: AzureMLStandIn) -> None:
    from gpupool.controller.probes import ask

    assert ask(adapter(stand_in), POOL, "azure-ml") is None
    assert [r.path.rsplit("/", 1)[1] for r in stand_in.calls("get_job")] == ["gpupool-probe"]
