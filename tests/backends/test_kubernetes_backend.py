"""The Kubernetes adapter against the stand-in API server (tests/support/kube_api.py), for
what the contract suite does not cover: one list per poll, adoption, the POSIX identity,
gangs, capacity, log chunks, errors, and the stand-in's own refusal of malformed requests."""

from __future__ import annotations

import copy
import json
import os
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, replace
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import httpx
import pytest

from gpupool.backends.base import (
    FINAL_STATES,
    AdapterContext,
    BackendStatus,
    JobHandle,
    JobSpec,
    PoolCapacity,
    PosixIdentity,
    RunState,
)
from gpupool.backends.errors import BackendMisconfigured, BackendRejected, BackendUnavailable
from gpupool.backends.kubernetes.adapter import LOG_CHUNK_MAX, KubernetesBackend
from gpupool.backends.kubernetes.client import official_client
from gpupool.backends.kubernetes.naming import job_name
from gpupool.data.grants.base import Grant, GrantScope
from support.kube_api import KubeApiServer
from support.kube_cluster import Node

POOL = "pool-t4"
pytestmark = pytest.mark.timeout(60)


@pytest.fixture
def api(tmp_path: Path) -> Iterator[KubeApiServer]:
    nodes = [Node("node-1", {"gpupool.io/gpu-type": "t4"}, gpus=4)]
    server = KubeApiServer(tmp_path / "kube", nodes=nodes).start()
    yield server
    server.stop()


def backend_for(api: KubeApiServer, state: Path, **options: Any) -> KubernetesBackend:
    values = {
        "kubeconfig": str(api.kubeconfig(state.parent / f"kubeconfig-{state.name}")),
        "image": "python:3.12-slim",
        "run_without_identity": True,
        "stop_grace_s": 1,
        **options,
    }
    return KubernetesBackend(AdapterContext(POOL, "t4", values, state))


def spec(job_id: str, code: str = "print('hi')", **overrides: Any) -> JobSpec:
    base = JobSpec(
        job_id=job_id,
        attempt=1,
        team="team-a",
        user="alice",
        command=(sys.executable, "-c", code),
        pool=POOL,
        gpu_type="t4",
        gpus_per_node=0,
    )
    return replace(base, **overrides)


def wait(
    backend: KubernetesBackend,
    handle: JobHandle,
    until: Callable[[BackendStatus], bool] = lambda s: s.state in FINAL_STATES,
) -> BackendStatus:
    deadline = time.monotonic() + 20
    while not until(status := backend.poll([handle])[handle.key]):
        assert time.monotonic() < deadline, f"{handle.key} still {status}"
        time.sleep(0.05)
    return status


def test_one_list_call_polls_every_attempt_of_the_pool(api: KubeApiServer, tmp_path: Path) -> None:
    backend = backend_for(api, tmp_path / "state")
    codes = [0, 0, 4, 0, 7]
    handles = [
        backend.submit(spec(f"many{i}", f"import sys; sys.exit({c})")) for i, c in enumerate(codes)
    ]
    for handle in handles:
        wait(backend, handle)
    jobs_before, pods_before = api.list_calls("jobs"), api.list_calls("pods")

    statuses = backend.poll(handles)

    assert [statuses[h.key].exit_code for h in handles] == codes
    assert api.list_calls("jobs") - jobs_before == 1
    assert api.list_calls("pods") - pods_before == 0  # exit codes come from the Jobs
    assert api.rejected == []


def test_a_job_of_the_same_name_not_made_for_the_key_is_not_adopted(
    api: KubeApiServer, tmp_path: Path
) -> None:
    backend = backend_for(api, tmp_path / "state")
    mine = spec("taken")
    name = job_name(mine.key)
    intruder = {
        "apiVersion": "batch/v1",
        "kind": "Job",
        "metadata": {"name": name, "annotations": {"gpupool.io/key": "other.1"}},
        "spec": {
            "template": {
                "spec": {
                    "restartPolicy": "Never",
                    "containers": [{"name": "main", "image": "x", "command": ["true"]}],
                }
            }
        },
    }
    with api.cluster.lock:
        api.cluster.create_job("team-a", intruder)

    with pytest.raises(BackendRejected, match=r"did not create for attempt taken\.1"):
        backend.submit(mine)


@pytest.mark.skipif(os.geteuid() != 0, reason="switching uid needs root (CI runs as root)")
def test_the_job_runs_as_its_users_uid_and_groups(api: KubeApiServer, open_dir: Path) -> None:
    backend = backend_for(api, open_dir / "state", run_without_identity=False)
    who = PosixIdentity(uid=4242, gid=4343, groups=(4444,))
    # A shell, not this Python: the interpreter may live where uid 4242 cannot read.
    shell = ("/bin/sh", "-c", 'echo "$(id -u) $(id -g) $(id -G)"')
    handle = backend.submit(spec("posix", command=shell, posix=who))

    status = wait(backend, handle)
    log = backend.logs(handle, 0).data
    job = api.cluster.jobs[tuple(handle.provider_id.split("/"))]  # type: ignore[index]

    assert status.state == RunState.SUCCEEDED, log
    uid, gid, *groups = log.split()
    assert (uid, gid, set(groups)) == (b"4242", b"4343", {b"4343", b"4444"})
    assert job["spec"]["template"]["spec"]["securityContext"]["runAsNonRoot"] is True
    assert os.stat(Path(handle.data["attempt_dir"]) / "work").st_uid == 4242


def test_jobs_of_users_without_identity_or_image_are_refused(tmp_path: Path) -> None:
    ctx = AdapterContext(POOL, "t4", {"image": "i"}, tmp_path)
    with pytest.raises(BackendRejected, match="no POSIX identity"):
        KubernetesBackend(ctx).submit(spec("anon"))
    root = spec("root", posix=PosixIdentity(uid=0, gid=0))
    with pytest.raises(BackendRejected, match="never run as root"):
        KubernetesBackend(ctx).submit(root)
    bare = AdapterContext(POOL, "t4", {"run_without_identity": True}, tmp_path)
    with pytest.raises(BackendRejected, match=r"options\.image"):
        KubernetesBackend(bare).submit(spec("imageless"))


def test_a_gang_is_one_pod_per_index(api: KubeApiServer, tmp_path: Path) -> None:
    api.cluster.nodes.append(Node("node-2", {"gpupool.io/gpu-type": "t4"}, gpus=4))
    backend = backend_for(api, tmp_path / "state")
    code = "import os; print('index', os.environ['JOB_COMPLETION_INDEX'])"
    handle = backend.submit(spec("gang", code, nodes=2, gpus_per_node=4))

    status = wait(backend, handle)

    assert status.state == RunState.SUCCEEDED
    pods = [p for p in api.cluster.pods.values() if p.job[1] == handle.data["name"]]
    assert sorted(p.index for p in pods) == [0, 1]
    assert {p.obj["spec"]["nodeName"] for p in pods} == {"node-1", "node-2"}  # 4 GPUs each
    assert backend.logs(handle, 0).data == b"index 0\n"


def test_a_pod_that_fits_no_node_stays_pending_until_cancelled(
    api: KubeApiServer, tmp_path: Path
) -> None:
    backend = backend_for(api, tmp_path / "state")
    handle = backend.submit(spec("huge", gpus_per_node=8))
    time.sleep(0.3)
    assert backend.poll([handle])[handle.key].state == RunState.PENDING
    assert backend.logs(handle, 0).complete is False

    backend.cancel(handle, grace_s=0)

    assert wait(backend, handle).state == RunState.CANCELLED


@dataclass(frozen=True)
class CapacityCase:
    nodes: list[Node]
    options: dict[str, Any]
    want: PoolCapacity


T4 = {"gpupool.io/gpu-type": "t4"}
TAINT = {"key": "nvidia.com/gpu", "value": "present", "effect": "NoSchedule"}


@pytest.mark.parametrize(
    "case",
    [
        pytest.param(
            CapacityCase(
                [Node("a", T4, 8), Node("b", T4, 4), Node("c", {"x": "y"}, 8)],
                {},
                PoolCapacity(2, 4),
            ),
            id="nodes with the pool's label; the fewest GPUs",
        ),
        pytest.param(
            CapacityCase(
                [
                    Node("a", T4, 8),
                    Node("b", T4, 8, ready=False),
                    Node("c", T4, 8, unschedulable=True),
                    Node("d", T4, 0),
                ],
                {},
                PoolCapacity(1, 8),
            ),
            id="not ready, cordoned and GPU-less nodes do not count",
        ),
        pytest.param(
            CapacityCase(
                [Node("a", T4, 8), Node("b", T4, 8, taints=[TAINT])], {}, PoolCapacity(1, 8)
            ),
            id="a taint the pool does not tolerate",
        ),
        pytest.param(
            CapacityCase(
                [Node("a", T4, 8), Node("b", T4, 8, taints=[TAINT])],
                {"node_taints": [TAINT]},
                PoolCapacity(2, 8),
            ),
            id="a taint the pool tolerates",
        ),
        pytest.param(
            CapacityCase(
                [Node("a", {"nvidia.com/gpu.product": "T4", **T4}, 2), Node("b", T4, 4)],
                {"node_labels": {"nvidia.com/gpu.product": "T4"}},
                PoolCapacity(1, 2),
            ),
            id="the pool's own node labels",
        ),
    ],
)
def test_capacity_comes_from_the_nodes(case: CapacityCase, tmp_path: Path) -> None:
    server = KubeApiServer(tmp_path / "kube", nodes=case.nodes).start()
    try:
        assert backend_for(server, tmp_path / "s", **case.options).pool_capacity() == case.want
    finally:
        server.stop()


def test_logs_come_in_chunks_of_at_most_one_mebibyte(api: KubeApiServer, tmp_path: Path) -> None:
    backend = backend_for(api, tmp_path / "state")
    size = LOG_CHUNK_MAX + LOG_CHUNK_MAX // 2
    handle = backend.submit(spec("big", f"import sys; sys.stdout.write('x' * {size})"))
    wait(backend, handle)

    first = backend.logs(handle, 0)
    second = backend.logs(handle, first.next_offset)

    assert (len(first.data), first.complete) == (LOG_CHUNK_MAX, False)
    assert (len(second.data), second.complete) == (size - LOG_CHUNK_MAX, True)
    assert second.next_offset == size


def test_the_outcome_outlives_the_job(api: KubeApiServer, tmp_path: Path) -> None:
    # A TTL long enough for the first poll to see the end even on a busy machine: the outcome
    # it records is what must outlive the Job.
    backend = backend_for(api, tmp_path / "state", ttl_after_finished_s=3)
    brief = spec("brief", "import sys; sys.exit(5)")
    handle = backend.submit(brief)
    assert wait(backend, handle).exit_code == 5
    deadline = time.monotonic() + 10
    while api.cluster.jobs and time.monotonic() < deadline:
        time.sleep(0.1)  # the TTL controller removes it

    status = backend.poll([handle])[handle.key]

    assert not api.cluster.jobs
    assert (status.state, status.exit_code) == (RunState.FAILED, 5)
    assert backend_for(api, tmp_path / "state").submit(brief) == handle  # after a restart too
    assert not api.cluster.jobs and api.cluster.started_pods == 1  # not created, not run again


def test_a_job_deleted_behind_gpupools_back_is_lost(api: KubeApiServer, tmp_path: Path) -> None:
    backend = backend_for(api, tmp_path / "state")
    handle = backend.submit(spec("vanishes", "import time; time.sleep(30)"))
    wait(backend, handle, lambda s: s.state == RunState.RUNNING)
    # As `kubectl delete job` does: in the background, the Job gone at once.
    path = f"/apis/batch/v1/namespaces/{handle.data['namespace']}/jobs/{handle.data['name']}"
    answer = httpx.delete(
        f"{api.url}{path}?propagationPolicy=Background",
        headers={"Authorization": "Bearer stand-in-token"},
    )
    assert answer.status_code == 200

    assert wait(backend, handle).state == RunState.LOST


@dataclass(frozen=True)
class FaultCase:
    method: str
    path: str
    code: int
    reason: str
    message: str
    want: type[Exception]


@pytest.mark.parametrize(
    "case",
    [
        pytest.param(
            FaultCase(
                "POST", r".*/jobs", 500, "InternalError", "etcd timed out", BackendUnavailable
            ),
            id="server error: retry",
        ),
        pytest.param(
            FaultCase(
                "POST",
                r".*/jobs",
                403,
                "Forbidden",
                'jobs.batch is forbidden: User "gpupool" cannot create resource "jobs"',
                BackendMisconfigured,
            ),
            id="RBAC: misconfigured",
        ),
        pytest.param(
            FaultCase("POST", r".*/jobs", 429, "TooManyRequests", "slow down", BackendUnavailable),
            id="throttled: retry",
        ),
    ],
)
def test_api_errors_are_classified(api: KubeApiServer, tmp_path: Path, case: FaultCase) -> None:
    backend = backend_for(api, tmp_path / "state")
    api.fail(case.method, case.path, case.code, case.reason, case.message)
    with pytest.raises(case.want, match=case.message.split(":")[0]):
        backend.submit(spec("faulty"))
    handle = backend.submit(spec("faulty"))  # the next try goes through
    assert wait(backend, handle).state == RunState.SUCCEEDED


def test_a_team_without_its_namespace_is_a_configuration_error(
    api: KubeApiServer, tmp_path: Path
) -> None:
    backend = backend_for(api, tmp_path / "state", namespace="gpu-{team}")
    with pytest.raises(BackendMisconfigured, match='namespaces "gpu-team-a" not found'):
        backend.submit(spec("homeless"))


def test_an_unreachable_cluster_is_unavailable_and_a_bad_kubeconfig_misconfigured(
    api: KubeApiServer, tmp_path: Path
) -> None:
    backend = backend_for(api, tmp_path / "state", request_timeout_s=2)
    api.stop()
    with pytest.raises(BackendUnavailable, match="now"):
        backend.poll([JobHandle("kubernetes", POOL, "team-a/x", "x.1")])
    missing = KubernetesBackend(
        AdapterContext(POOL, "t4", {"kubeconfig": str(tmp_path / "nope")}, tmp_path)
    )
    with pytest.raises(BackendMisconfigured, match="load the kubeconfig"):
        missing.poll([JobHandle("kubernetes", POOL, "team-a/x", "x.1")])


def contains(whole: Any, part: Any) -> bool:
    """``part`` is in ``whole``: every key of each mapping, every item of each list."""
    if isinstance(part, dict):
        return isinstance(whole, dict) and all(
            k in whole and contains(whole[k], v) for k, v in part.items()
        )
    if isinstance(part, list):
        return (
            isinstance(whole, list)
            and len(whole) == len(part)
            and all(contains(w, p) for w, p in zip(whole, part, strict=True))
        )
    return bool(whole == part)


def test_the_client_sends_every_field_of_the_manifest(api: KubeApiServer, tmp_path: Path) -> None:
    """The official client parses a dict body into its models and drops what they lack: the
    Job the API server stores must still hold all of what the adapter built."""
    sent: list[dict[str, Any]] = []

    def recording(*args: Any) -> Any:
        client = official_client(*args)
        create = client.create_job

        def create_job(namespace: str, body: dict[str, Any]) -> dict[str, Any]:
            sent.append(copy.deepcopy(body))
            return create(namespace, body)

        client.create_job = create_job  # type: ignore[method-assign]
        return client

    options = {
        "kubeconfig": str(api.kubeconfig(tmp_path / "kubeconfig")),
        "image": "i",
        "node_taints": [{"key": "gpu", "effect": "NoSchedule"}],
    }
    backend = KubernetesBackend(
        AdapterContext(POOL, "t4", options, tmp_path / "state"), client_factory=recording
    )
    backend._chown = False
    who = PosixIdentity(uid=1000, gid=1000, groups=(5,))
    handle = backend.submit(spec("whole", nodes=2, gpus_per_node=1, max_runtime_s=5, posix=who))

    stored = api.cluster.jobs[(handle.data["namespace"], handle.data["name"])]
    assert len(sent) == 1 and contains(stored, sent[0])


def test_cancel_returns_at_once_and_the_kubelet_kills_after_the_grace(
    api: KubeApiServer, tmp_path: Path
) -> None:
    backend = backend_for(api, tmp_path / "state", stop_grace_s=30)
    stubborn = "import signal, time; signal.signal(signal.SIGTERM, signal.SIG_IGN); " + (
        "print('up', flush=True); time.sleep(60)"
    )
    handle = backend.submit(spec("stubborn", stubborn))
    wait(backend, handle, lambda s: s.state == RunState.RUNNING)
    while b"up" not in backend.logs(handle, 0).data:
        time.sleep(0.05)

    started = time.monotonic()
    backend.cancel(handle, grace_s=1)
    returned = time.monotonic() - started
    status = wait(backend, handle)
    ended = time.monotonic() - started

    assert returned < 1  # the grace is the kubelet's to wait, not the caller's
    assert status.state == RunState.CANCELLED
    assert 1 <= ended < 10  # killed after the 1 s grace, not the pod's 30 s
    assert handle.data["name"] not in {j[1] for j in api.cluster.jobs}  # foreground: all gone


def test_one_failing_index_fails_the_gang_and_stops_the_others(
    api: KubeApiServer, tmp_path: Path
) -> None:
    backend = backend_for(api, tmp_path / "state")
    code = (
        "import os, sys, time\n"
        "if os.environ['JOB_COMPLETION_INDEX'] == '1': sys.exit(9)\n"
        "time.sleep(60)"
    )
    handle = backend.submit(spec("split", code, nodes=2))

    status = wait(backend, handle)

    assert (status.state, status.exit_code) == (RunState.FAILED, 9)
    pods = [p for p in api.cluster.pods.values() if p.job[1] == handle.data["name"]]
    assert all(p.ended for p in pods)  # final only once every pod has stopped


def test_the_pools_context_picks_the_cluster(api: KubeApiServer, tmp_path: Path) -> None:
    config = api.kubeconfig(tmp_path / "two-contexts")
    text = config.read_text().replace('"current-context": "stand-in"', '"current-context": "gone"')
    config.write_text(
        text.replace(
            '"contexts": [',
            '"contexts": [{"name": "gone", "context": {"cluster": "nowhere", "user": "gpupool"}}, ',
        ).replace(
            '"clusters": [',
            '"clusters": [{"name": "nowhere", "cluster": {"server": "http://127.0.0.1:9"}}, ',
        )
    )
    chosen = backend_for(api, tmp_path / "a", kubeconfig=str(config), context="stand-in")
    current = backend_for(api, tmp_path / "b", kubeconfig=str(config), request_timeout_s=2)

    assert chosen.pool_capacity() == PoolCapacity(1, 4)
    with pytest.raises(BackendUnavailable):
        current.pool_capacity()


def test_in_cluster_outside_a_pod_is_a_configuration_error(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("KUBERNETES_SERVICE_HOST", raising=False)
    backend = KubernetesBackend(AdapterContext(POOL, "t4", {"in_cluster": True}, tmp_path))
    with pytest.raises(BackendMisconfigured, match="load the in-cluster configuration"):
        backend.pool_capacity()


def test_importing_the_adapter_does_not_import_the_client() -> None:
    code = (
        "import sys, gpupool.backends.registry, gpupool.backends.kubernetes.adapter; "
        "sys.exit(1 if 'kubernetes' in sys.modules else 0)"
    )
    assert subprocess.run([sys.executable, "-c", code], check=False).returncode == 0


def test_installations_sharing_a_cluster_keep_to_their_own_jobs(
    api: KubeApiServer, tmp_path: Path
) -> None:
    staging = backend_for(api, tmp_path / "staging", job_name_prefix="staging-")
    production = backend_for(api, tmp_path / "production", job_name_prefix="prod-")
    mine = staging.submit(spec("same", "import sys; sys.exit(1)"))
    theirs = production.submit(spec("same", "import sys; sys.exit(2)"))

    assert mine.key == theirs.key and mine.provider_id != theirs.provider_id
    assert wait(staging, mine).exit_code == 1
    assert wait(production, theirs).exit_code == 2


def test_a_grant_reaches_the_job_through_a_secret_that_goes_with_the_job(
    api: KubeApiServer, tmp_path: Path
) -> None:
    scope = GrantScope(
        "team-a",
        "alice",
        "granted",
        1,
        ("in",),
        ("out/attempt-1",),
        datetime(2026, 12, 5, tzinfo=UTC),
    )
    grant = Grant("s3", scope, {"in": "https://s3.example/in?sig=SECRET-READ"}, {})
    backend = backend_for(api, tmp_path / "state")
    code = "import os; print(os.environ['GPUPOOL_INPUT_URLS'])"
    handle = backend.submit(spec("granted", code, grant=grant))

    status = wait(backend, handle)
    namespace, name = handle.data["namespace"], handle.data["name"]
    secret = api.cluster.secrets[(namespace, f"{name}-grant")]
    job = api.cluster.jobs[(namespace, name)]

    assert status.state == RunState.SUCCEEDED
    assert b"SECRET-READ" in backend.logs(handle, 0).data
    assert "SECRET" not in json.dumps(job)
    assert [o["uid"] for o in secret["metadata"]["ownerReferences"]] == [job["metadata"]["uid"]]
    httpx.delete(
        f"{api.url}/apis/batch/v1/namespaces/{namespace}/jobs/{name}",
        headers={"Authorization": "Bearer stand-in-token"},
    )
    deadline = time.monotonic() + 5
    while api.cluster.secrets and time.monotonic() < deadline:
        time.sleep(0.05)
    assert not api.cluster.secrets  # the garbage collector took it with its Job
