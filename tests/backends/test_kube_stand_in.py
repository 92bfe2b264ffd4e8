"""The stand-in API server (tests/support/kube_api.py) refuses what a real API server refuses,
and what it serves is valid Kubernetes objects: so a contract suite that passes against it has
at least sent well-formed requests.

Malformed bodies are sent as raw HTTP: the official client (37.x) parses a dict body into its
own models first, refusing wrong types itself and dropping unknown fields silently, so through
it the stand-in would never see them (the adapter's own manifests are checked against the schema
directly, in test_kubernetes_manifest.py)."""

from __future__ import annotations

import copy
import sys
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import pytest
from kubernetes.client.exceptions import ApiException

from gpupool.backends.kubernetes.client import KubeApi, official_client
from support.kube_api import KubeApiServer
from support.kube_cluster import Node
from support.kube_schema import problems

pytestmark = pytest.mark.timeout(60)

GOOD: dict[str, Any] = {
    "apiVersion": "batch/v1",
    "kind": "Job",
    "metadata": {"name": "ok", "labels": {"gpupool.io/pool": "p"}},
    "spec": {
        "backoffLimit": 0,
        "template": {
            "metadata": {"labels": {"gpupool.io/pool": "p"}},
            "spec": {
                "restartPolicy": "Never",
                "containers": [
                    {"name": "main", "image": "x", "command": [sys.executable, "-c", "print(1)"]}
                ],
            },
        },
    },
}


@pytest.fixture
def stand_in(tmp_path: Path) -> Iterator[tuple[KubeApiServer, KubeApi]]:
    server = KubeApiServer(tmp_path / "kube", nodes=[Node("n", {"a": "b"}, gpus=2)]).start()
    client = official_client(str(server.kubeconfig(tmp_path / "kubeconfig")), None, False, 5)
    yield server, client
    client.close()
    server.stop()


def changed(edit: Callable[[dict[str, Any]], None]) -> dict[str, Any]:
    body = copy.deepcopy(GOOD)
    edit(body)
    return body


def pod_spec(body: dict[str, Any]) -> dict[str, Any]:
    return body["spec"]["template"]["spec"]  # type: ignore[no-any-return]


@dataclass(frozen=True)
class Malformed:
    body: dict[str, Any]
    says: str


@pytest.mark.parametrize(
    "case",
    [
        pytest.param(
            Malformed(
                changed(lambda b: b["spec"].update(backofLimit=0)), "'backofLimit' was unexpected"
            ),
            id="misspelt field",
        ),
        pytest.param(
            Malformed(
                changed(lambda b: pod_spec(b)["containers"][0].update(image=["x"])),
                "is not of type",
            ),
            id="wrong type",
        ),
        pytest.param(
            Malformed(
                changed(lambda b: pod_spec(b).pop("containers")),
                "'containers' is a required property",
            ),
            id="no containers",
        ),
        pytest.param(
            Malformed(
                changed(lambda b: pod_spec(b).update(restartPolicy="Always")),
                "restartPolicy: Unsupported value",
            ),
            id="restartPolicy Always",
        ),
        pytest.param(
            Malformed(changed(lambda b: b["metadata"].update(name="x" * 64)), "DNS-1123 label"),
            id="name too long",
        ),
        pytest.param(
            Malformed(changed(lambda b: b["metadata"].update(name="Big_Name")), "DNS-1123 label"),
            id="name not DNS",
        ),
        pytest.param(
            Malformed(
                changed(lambda b: b["metadata"]["labels"].update(k="a b")),
                "not a valid label value",
            ),
            id="bad label value",
        ),
        pytest.param(
            Malformed(
                changed(
                    lambda b: pod_spec(b)["containers"][0].update(
                        resources={"limits": {"nvidia.com/gpu": "0.5"}}
                    )
                ),
                "must be an integer",
            ),
            id="fractional GPUs",
        ),
        pytest.param(
            Malformed(
                changed(
                    lambda b: b["spec"].update(
                        podFailurePolicy={
                            "rules": [
                                {
                                    "action": "FailJob",
                                    "onExitCodes": {"operator": "In", "values": [0]},
                                }
                            ]
                        }
                    )
                ),
                "0 is not allowed",
            ),
            id="exit code 0 in a FailJob rule",
        ),
        pytest.param(
            Malformed(
                changed(
                    lambda b: pod_spec(b)["containers"][0].update(
                        volumeMounts=[{"name": "nope", "mountPath": "/w"}]
                    )
                ),
                "Not found: 'nope'",
            ),
            id="mount of no volume",
        ),
    ],
)
def test_malformed_jobs_are_refused(
    stand_in: tuple[KubeApiServer, KubeApi], case: Malformed
) -> None:
    server, _ = stand_in
    answer = httpx.post(
        f"{server.url}/apis/batch/v1/namespaces/team-a/jobs",
        json=case.body,
        headers={"Authorization": "Bearer stand-in-token"},
    )
    assert answer.status_code == 422
    status = answer.json()
    assert (status["kind"], status["reason"], status["code"]) == ("Status", "Invalid", 422)
    assert case.says in status["message"]
    assert server.rejected and not server.cluster.jobs


def test_what_it_does_not_implement_is_refused(stand_in: tuple[KubeApiServer, KubeApi]) -> None:
    _, client = stand_in
    with pytest.raises(ApiException) as caught:
        client.list_jobs("tier in (a,b)")
    assert caught.value.status == 400 and "equality-based" in str(caught.value.body)


def test_what_it_serves_is_valid(stand_in: tuple[KubeApiServer, KubeApi]) -> None:
    server, client = stand_in
    client.create_job("team-a", GOOD)
    deadline = time.monotonic() + 10
    while not (jobs := client.list_jobs("gpupool.io/pool=p"))[0]["status"].get("succeeded"):
        assert time.monotonic() < deadline
        time.sleep(0.05)

    pods = client.list_pods("gpupool.io/pool=p")
    nodes = client.list_nodes("a=b")

    assert [problems(j, "job-batch-v1") for j in jobs] == [[]]
    assert [problems(p, "pod-v1") for p in pods] == [[]]
    assert [problems(n, "node-v1") for n in nodes] == [[]]
    assert server.rejected == []
