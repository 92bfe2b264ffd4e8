"""The Azure Batch adapter beyond the contract suite: task ids, the task body, the status
table, error classes, and against the stand-in (tests/support/azure_batch.py) preemption,
adoption, data grants and what every request looked like."""

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

from gpupool.backends.azure_batch.adapter import AzureBatchBackend
from gpupool.backends.azure_batch.errors import classify, summary
from gpupool.backends.azure_batch.options import BatchOptions
from gpupool.backends.azure_batch.status import BatchTaskView, verdict
from gpupool.backends.azure_batch.task import env_of, task_body, task_id
from gpupool.backends.base import AdapterContext, JobHandle, JobSpec, RunState
from gpupool.backends.errors import (
    BackendError,
    BackendMisconfigured,
    BackendRejected,
    BackendUnavailable,
)
from gpupool.data.grants.base import Grant, OutputTarget, scope_for
from support.azure_batch import ACCOUNT, ACCOUNT_KEY, API_VERSION, BatchStandIn

POOL = "t4-pool"
KEY_ENV = "BATCH_KEY_FOR_TESTS"
pytestmark = pytest.mark.timeout(60)


def spec(job_id: str = "train", **overrides: Any) -> JobSpec:
    base = JobSpec(
        job_id=job_id,
        attempt=1,
        team="team-a",
        user="alice",
        command=("python", "-c", "print('hi')"),
        pool=POOL,
        gpu_type="t4",
        gpus_per_node=1,
    )
    return replace(base, **overrides)


# -- task ids ------------------------------------------------------------------------------


@dataclass(frozen=True)
class IdCase:
    key: str
    prefix: str = ""
    want: str | None = None  # None: hashed (``<prefix>h`` and 40 hex digits)


@pytest.mark.parametrize(
    "case",
    [
        pytest.param(IdCase("train.1", want="train-a1"), id="plain job id: readable"),
        pytest.param(IdCase("train.12", "ct-", "ct-train-a12"), id="with the pool's prefix"),
        pytest.param(IdCase("arr_7.3", want="arr_7-a3"), id="underscores are kept"),
        pytest.param(IdCase("a.b.1"), id="a dot in the job id: hashed"),
        pytest.param(IdCase("x" * 70 + ".1", "p-"), id="too long for Batch: hashed"),
    ],
)
def test_task_ids_come_from_the_key(case: IdCase) -> None:
    got = task_id(case.key, case.prefix)
    if case.want is None:
        assert got.startswith(f"{case.prefix}h") and len(got) == len(case.prefix) + 41
    else:
        assert got == case.want
    assert len(got) <= 64 and got == task_id(case.key, case.prefix)


def test_task_ids_of_different_keys_differ() -> None:
    keys = ["x.1", "x-a1.1", "x.11", "x-a.1", "x_a1.1", "x.1.1", "x-a1-a1.1"]
    ids = [task_id(key) for key in keys]
    assert len(set(ids)) == len(keys), dict(zip(keys, ids, strict=True))


# -- the task body -------------------------------------------------------------------------


def grant(kind: str = "azure") -> Grant:
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
    base = "https://acct.blob.core.windows.net/team-a"
    return Grant(
        kind=kind,  # type: ignore[arg-type]
        scope=scope,
        inputs={"shared/data.csv": f"{base}/shared/data.csv?sig=read"},
        outputs={"home/alice/out": OutputTarget(f"{base}/home/alice/out/attempt-1?sig=create")},
    )


def test_the_body_carries_the_contract_and_the_limits() -> None:
    body = task_body(
        spec(
            max_runtime_s=90,
            env={"MINE": "1", "CUDA_VISIBLE_DEVICES": "7", "GPUPOOL_INPUTS": "/x"},
            devices=((2,),),
        )
    )
    env = env_of(body)

    assert (body["id"], body["displayName"]) == ("train-a1", "train.1")
    assert body["constraints"] == {"maxTaskRetryCount": 0, "maxWallClockTime": "PT90S"}
    assert env["MINE"] == "1" and env["GPUPOOL_TEAM"] == "team-a"
    assert env["CUDA_VISIBLE_DEVICES"] == "2"  # the scheduler's device, not the user's
    assert "GPUPOOL_INPUTS" not in env  # derived on the node by the wrapper
    assert body["commandLine"].startswith("/bin/sh -c ")
    assert "exec python -c " in body["commandLine"]
    assert "resourceFiles" not in body and "outputFiles" not in body


def test_an_azure_grant_becomes_resource_and_output_files() -> None:
    body = task_body(spec(inputs=("shared/data.csv",), outputs=("home/alice/out",), grant=grant()))

    assert body["resourceFiles"] == [
        {
            "httpUrl": "https://acct.blob.core.windows.net/team-a/shared/data.csv?sig=read",
            "filePath": "inputs/shared/data.csv",
        }
    ]
    assert body["outputFiles"] == [
        {
            "filePattern": "outputs/home/alice/out/**/*",
            "destination": {
                "container": {
                    "containerUrl": "https://acct.blob.core.windows.net/team-a?sig=create",
                    "path": "home/alice/out/attempt-1",
                }
            },
            "uploadOptions": {"uploadCondition": "taskcompletion"},
        }
    ]
    assert env_of(body)["GPUPOOL_GRANT_KIND"] == "azure"


def test_a_non_azure_grant_gives_inputs_only() -> None:
    body = task_body(spec(outputs=("home/alice/out",), grant=grant("s3")))
    assert "outputFiles" not in body and len(body["resourceFiles"]) == 1


# -- status --------------------------------------------------------------------------------

T0 = datetime(2026, 1, 1, tzinfo=UTC)


def task(state: str, **fields: Any) -> BatchTaskView:
    return BatchTaskView(id="t", state=state, **fields)


@dataclass(frozen=True)
class StatusCase:
    task: BatchTaskView | None
    want: RunState
    message: str = ""
    stop: bool = False


@pytest.mark.parametrize(
    "case",
    [
        pytest.param(StatusCase(None, RunState.LOST, "does not know"), id="unknown: lost"),
        pytest.param(StatusCase(task("active"), RunState.PENDING), id="active: pending"),
        pytest.param(StatusCase(task("preparing"), RunState.PENDING), id="preparing: pending"),
        pytest.param(StatusCase(task("running"), RunState.RUNNING), id="running"),
        pytest.param(
            StatusCase(task("completed", exit_code=0, result="success"), RunState.SUCCEEDED),
            id="completed with success",
        ),
        pytest.param(
            StatusCase(
                task(
                    "completed",
                    exit_code=3,
                    result="failure",
                    failure_category="usererror",
                    failure_code="FailureExitCode",
                ),
                RunState.FAILED,
                "exited with code 3",
            ),
            id="non-zero exit: failed with the code",
        ),
        pytest.param(
            StatusCase(
                task(
                    "completed",
                    exit_code=143,
                    result="failure",
                    failure_code="TaskEnded",
                    start_time=T0,
                    end_time=T0 + timedelta(seconds=5),
                    max_wall_clock=timedelta(seconds=5),
                ),
                RunState.FAILED,
                "exceeded max_runtime_s=5",
            ),
            id="ended at maxWallClockTime: failed, exceeded",
        ),
        pytest.param(
            StatusCase(
                task(
                    "completed",
                    exit_code=143,
                    result="failure",
                    failure_code="TaskEnded",
                    start_time=T0,
                    end_time=T0 + timedelta(seconds=2),
                    max_wall_clock=timedelta(seconds=5),
                ),
                RunState.CANCELLED,
                "cancelled",
            ),
            id="terminated before its limit: cancelled",
        ),
        pytest.param(
            StatusCase(
                task(
                    "completed",
                    result="failure",
                    failure_category="usererror",
                    failure_code="ResourceContainerAccessDenied",
                    failure_message="denied\nmore",
                ),
                RunState.FAILED,
                "ResourceContainerAccessDenied: denied",
            ),
            id="a resource file that cannot be read: failed with Batch's code",
        ),
        pytest.param(
            StatusCase(
                task(
                    "completed",
                    result="failure",
                    failure_category="servererror",
                    failure_code="NodeFailure",
                ),
                RunState.LOST,
                "Azure Batch: NodeFailure",
            ),
            id="Batch's own failure: lost, a new attempt",
        ),
        pytest.param(
            StatusCase(
                task("active", requeue_count=1, node_id="tvmps_7"),
                RunState.PREEMPTED,
                "evicted: low-priority node tvmps_7 preempted",
                stop=True,
            ),
            id="requeued after preemption: preempted, terminate it",
        ),
        pytest.param(
            StatusCase(
                task("completed", requeue_count=1, result="failure", failure_code="TaskEnded"),
                RunState.PREEMPTED,
                "evicted:",
            ),
            id="preempted and terminated: stays preempted",
        ),
        pytest.param(
            StatusCase(
                task("completed", requeue_count=1, exit_code=0, result="success"),
                RunState.SUCCEEDED,
            ),
            id="requeued but finished anyway: its work is done",
        ),
        pytest.param(
            StatusCase(task("upgrading"), RunState.PENDING, "Batch state upgrading"),
            id="a state of a newer Batch: pending, never lost",
        ),
    ],
)
def test_batch_states_map_to_gpupools(case: StatusCase) -> None:
    got = verdict(case.task)
    assert got.status.state == case.want
    assert case.message in got.status.message
    assert got.stop is case.stop


# -- errors --------------------------------------------------------------------------------


class HttpResponseError(Exception):
    def __init__(self, status: int | None, code: str | None = None, message: str = "no") -> None:
        super().__init__(message)
        self.status_code = status
        self.error = type("Err", (), {"code": code, "message": message})() if code else None


class ClientAuthenticationError(HttpResponseError):
    pass


class ServiceRequestError(Exception):
    pass


@pytest.mark.parametrize(
    ("exc", "want"),
    [
        pytest.param(ServiceRequestError("refused"), BackendUnavailable, id="cannot connect"),
        pytest.param(HttpResponseError(503, "ServerBusy"), BackendUnavailable, id="busy"),
        pytest.param(HttpResponseError(429), BackendUnavailable, id="throttled"),
        pytest.param(ClientAuthenticationError(401), BackendMisconfigured, id="no token"),
        pytest.param(
            HttpResponseError(403, "InsufficientPermissions"), BackendMisconfigured, id="no role"
        ),
        pytest.param(HttpResponseError(404, "PoolNotFound"), BackendMisconfigured, id="no pool"),
        pytest.param(HttpResponseError(400, "InvalidPropertyValue"), BackendRejected, id="bad"),
        pytest.param(ImportError("no azure"), BackendMisconfigured, id="SDK missing"),
        pytest.param(KeyError("x"), None, id="not the SDK's: not translated"),
    ],
)
def test_errors_are_classified(exc: Exception, want: type[BackendError] | None) -> None:
    assert classify(exc, invalid=BackendRejected) is want


def test_an_error_summary_holds_no_query_string() -> None:
    exc = HttpResponseError(
        400, "InvalidUri", "bad url https://a.blob.core.windows.net/c?sv=1&sig=SECRET"
    )
    text = summary(exc)
    assert "SECRET" not in text and text.startswith("HTTP 400: InvalidUri: bad url")


# -- options -------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("raw", "error"),
    [
        pytest.param({}, "account_url must be the Batch account's URL", id="no account url"),
        pytest.param({"account_url": "https://a.b", "acount_name": "x"}, "unknown", id="a typo"),
        pytest.param(
            {"account_url": "https://a.b", "auth": "shared-key"},
            "needs account_name and account_key_env",
            id="shared key without its parts",
        ),
        pytest.param(
            {"account_url": "https://a.b", "job_id": "has.dot"}, "job_id must be", id="bad id"
        ),
        pytest.param(
            {"account_url": "https://a.b", "create_pool": True}, "needs vm_size", id="no vm size"
        ),
        pytest.param(
            {"account_url": "https://a.b", "image": {"offer": "x"}},
            "missing: publisher, sku",
            id="incomplete image",
        ),
    ],
)
def test_bad_options_name_the_field(raw: dict[str, Any], error: str) -> None:
    with pytest.raises(BackendMisconfigured, match=error):
        BatchOptions.parse(raw)


# -- against the stand-in ------------------------------------------------------------------


BUILT: list[AzureBatchBackend] = []


@pytest.fixture
def stand_in(tmp_path: Path) -> Iterator[BatchStandIn]:
    with BatchStandIn(tmp_path / "nodes") as server:
        yield server
        while BUILT:
            BUILT.pop().close()
    assert server.rejected == []


def adapter(stand_in: BatchStandIn, **options: Any) -> AzureBatchBackend:
    ctx = AdapterContext(
        pool=POOL,
        gpu_type="t4",
        options={
            "account_url": stand_in.url,
            "auth": "shared-key",
            "account_name": ACCOUNT,
            "account_key_env": KEY_ENV,
            "request_timeout_s": 5,
            **options,
        },
        nodes=2,
    )
    BUILT.append(AzureBatchBackend(ctx, environ={KEY_ENV: ACCOUNT_KEY}))
    return BUILT[-1]


def wait(backend: AzureBatchBackend, handle: JobHandle, want: RunState) -> None:
    deadline = time.monotonic() + 10
    while (state := backend.poll([handle])[handle.key].state) != want:
        assert time.monotonic() < deadline, f"{handle.key} still {state}"
        time.sleep(0.05)


def sleeper(job_id: str, seconds: float = 30) -> JobSpec:
    return spec(job_id, command=("sleep", str(seconds)), gpus_per_node=0)


def test_every_request_names_the_api_version_and_a_known_operation(
    stand_in: BatchStandIn,
) -> None:
    backend = adapter(stand_in)
    handle = backend.submit(spec("hello", command=("echo", "hi"), max_runtime_s=60))
    wait(backend, handle, RunState.SUCCEEDED)
    backend.logs(handle, 0)
    backend.cancel(handle, 0)

    assert [(r.method, r.path, r.status) for r in stand_in.requests[:2]] == [
        ("POST", "/jobs", 201),
        ("POST", "/jobs/gpupool-t4-pool/tasks", 201),
    ]
    assert all(r.query["api-version"] == [API_VERSION] for r in stand_in.requests)
    created = stand_in.requests[1].body
    assert created["constraints"]["maxWallClockTime"] == "PT60S"
    assert stand_in.jobs["gpupool-t4-pool"]["poolInfo"] == {"poolId": POOL}
    assert stand_in.calls("POST", r"/jobs/.*/terminate")[0].status == 409  # done: no error


def test_a_preempted_task_is_reported_evicted_and_never_rerun(stand_in: BatchStandIn) -> None:
    backend = adapter(stand_in)
    stand_in.requeue_delay_s = 2.0  # Batch would start it again; the adapter must stop that
    handle = backend.submit(sleeper("spot"))
    wait(backend, handle, RunState.RUNNING)

    stand_in.preempt("gpupool-t4-pool", handle.provider_id)
    deadline = time.monotonic() + 5
    while stand_in.task("gpupool-t4-pool", handle.provider_id).requeue_count == 0:
        assert time.monotonic() < deadline
        time.sleep(0.02)
    first = backend.poll([handle])[handle.key]
    time.sleep(2.5)  # past the requeue delay
    later = backend.poll([handle])[handle.key]

    assert first.state == later.state == RunState.PREEMPTED
    assert first.message.startswith("evicted: low-priority node")
    assert first.evicted and later.evicted  # requeued as evicted, never counted as lost
    assert len(stand_in.calls("POST", r"/jobs/.*/terminate")) == 1
    assert stand_in.task("gpupool-t4-pool", handle.provider_id).runs == 1


def test_a_task_of_that_id_that_is_not_gpupools_is_refused(stand_in: BatchStandIn) -> None:
    backend = adapter(stand_in)
    backend.submit(sleeper("mine", 0.1))
    stand_in.tasks[("gpupool-t4-pool", "mine-a1")].body["displayName"] = "someone-else"

    with pytest.raises(BackendRejected, match="gpupool did not submit"):
        adapter(stand_in).submit(sleeper("mine", 0.1))


@pytest.mark.parametrize(
    ("status", "code", "want"),
    [
        pytest.param(503, "ServerBusy", BackendUnavailable, id="busy: retry later"),
        pytest.param(403, "InsufficientPermissions", BackendMisconfigured, id="no role"),
        pytest.param(400, "InvalidPropertyValue", BackendRejected, id="refused: fail it"),
    ],
)
def test_service_errors_are_translated(
    stand_in: BatchStandIn, status: int, code: str, want: type[BackendError]
) -> None:
    backend = adapter(stand_in)
    backend.submit(sleeper("first", 0.1))  # the job exists: the next call is create_task
    stand_in.fail_next = [(status, code)] * 3  # the SDK retries 5xx twice

    with pytest.raises(want, match=code):
        backend.submit(sleeper("second", 0.1))


@pytest.mark.parametrize(
    "options",
    [
        pytest.param({"account_name": "someone-else"}, id="another account"),
        pytest.param({"account_key_env": "OTHER_KEY"}, id="another key"),
    ],
)
def test_a_wrong_account_or_key_is_misconfigured(
    stand_in: BatchStandIn, options: dict[str, str]
) -> None:
    backend = adapter(stand_in, **options)
    backend._environ = {**backend._environ, "OTHER_KEY": "b3RoZXIta2V5"}
    with pytest.raises(BackendMisconfigured, match="AuthenticationFailed"):
        backend.submit(sleeper("x", 0.1))


def test_create_pool_makes_a_fixed_batch_pool(stand_in: BatchStandIn) -> None:
    backend = adapter(stand_in, create_pool=True, vm_size="Standard_NC4as_T4_v3")
    backend.submit(sleeper("first", 0.1))
    adapter(stand_in, create_pool=True, vm_size="Standard_NC4as_T4_v3").submit(sleeper("b", 0))

    pool = stand_in.pools[POOL]
    assert (pool["vmSize"], pool["targetDedicatedNodes"], pool["enableAutoScale"]) == (
        "Standard_NC4as_T4_v3",
        2,
        False,
    )
    assert len(stand_in.calls("POST", "/pools")) == 1


class Blobs:
    """Serves input files (GET) and takes uploads (PUT), as blob storage would with a SAS."""

    def __init__(self) -> None:
        self.files = {"/team-a/shared/data.csv": b"a,b\n1,2\n"}
        self.put: dict[str, tuple[bytes, str]] = {}
        blobs = self

        class Handler(BaseHTTPRequestHandler):
            def do_GET(self) -> None:
                path = self.path.split("?")[0]
                data = blobs.files.get(path)
                self.send_response(200 if data is not None else 404)
                self.end_headers()
                self.wfile.write(data or b"")

            def do_PUT(self) -> None:
                body = self.rfile.read(int(self.headers["Content-Length"]))
                query = self.path.split("?", 1)[1]
                blobs.put[self.path.split("?")[0]] = (body, query)
                self.send_response(201)
                self.end_headers()

            def log_message(self, format: str, *args: object) -> None:
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        threading.Thread(target=self.server.serve_forever, daemon=True).start()
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}/team-a"


def test_inputs_and_outputs_move_through_the_grant(stand_in: BatchStandIn) -> None:
    blobs = Blobs()
    data = replace(
        grant(),
        inputs={"shared/data.csv": f"{blobs.url}/shared/data.csv?sig=read"},
        outputs={"home/alice/out": OutputTarget(f"{blobs.url}/home/alice/out/attempt-1?sig=c")},
    )
    script = 'cp "$GPUPOOL_INPUTS/shared/data.csv" "$GPUPOOL_OUTPUTS/home/alice/out/copy.csv"'
    job = spec(
        "data",
        command=("sh", "-c", f'mkdir -p "$GPUPOOL_OUTPUTS/home/alice/out" && {script}'),
        gpus_per_node=0,
        inputs=("shared/data.csv",),
        outputs=("home/alice/out",),
        grant=data,
    )
    backend = adapter(stand_in)
    try:
        handle = backend.submit(job)
        wait(backend, handle, RunState.SUCCEEDED)
    finally:
        blobs.server.shutdown()
        blobs.server.server_close()

    assert blobs.put == {
        "/team-a/home/alice/out/attempt-1/copy.csv": (b"a,b\n1,2\n", "sig=c"),
    }
    assert "sig=" not in repr(handle) and "sig=" not in str(handle.to_dict())


# -- the stand-in refuses what Batch would not take ----------------------------------------


@pytest.mark.parametrize(
    ("method", "path", "body", "why"),
    [
        pytest.param(
            "POST", "/jobs?api-version=2020-01-01", {"id": "j"}, "api-version", id="old api"
        ),
        pytest.param(
            "POST",
            f"/jobs?api-version={API_VERSION}",
            {"id": "j", "poolInfo": {"poolId": "p"}, "priority": 5},
            "unknown fields ['priority']",
            id="a field the adapter never sends",
        ),
        pytest.param(
            "DELETE", f"/jobs/j?api-version={API_VERSION}", None, "not an operation", id="delete"
        ),
        pytest.param(
            "GET", f"/jobs?api-version={API_VERSION}&$top=5", None, "query", id="extra query"
        ),
    ],
)
def test_the_stand_in_rejects_what_it_does_not_know(
    tmp_path: Path, method: str, path: str, body: Any, why: str
) -> None:
    import json
    import urllib.error
    import urllib.request

    with BatchStandIn(tmp_path) as server:
        data = json.dumps(body).encode() if body is not None else None
        headers = {"content-type": "application/json", "content-length": str(len(data or b""))}
        signed = server.signature(method, path, headers)
        headers["authorization"] = f"SharedKey {ACCOUNT}:{signed}"
        request = urllib.request.Request(server.url + path, data=data, method=method)
        for name, value in headers.items():
            request.add_header(name, value)
        with pytest.raises(urllib.error.HTTPError) as answer:
            urllib.request.urlopen(request, timeout=5)
        answer.value.close()

    assert answer.value.code == 400
    assert len(server.rejected) == 1 and why in server.rejected[0]


def test_the_controllers_probe_asks_batch_and_reports_a_bad_key(stand_in: BatchStandIn) -> None:
    from gpupool.controller.probes import ask

    assert ask(adapter(stand_in), POOL, "azure-batch") is None
    assert stand_in.calls("GET", r"/jobs/gpupool-t4-pool/tasks/gpupool-probe")
    with pytest.raises(BackendMisconfigured, match="AuthenticationFailed"):
        ask(adapter(stand_in, account_name="other"), POOL, "azure-batch")
