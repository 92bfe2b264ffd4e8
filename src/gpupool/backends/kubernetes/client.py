"""The slice of the Kubernetes API the adapter uses (:class:`KubeApi`), and the official
``kubernetes`` client behind it (:func:`official_client`).

The client is imported here, lazily, inside :func:`official_client`, and nowhere else in
gpupool. Objects travel as plain dicts in the API server's JSON (camelCase): every call asks
the client not to decode the answer into its models (``_preload_content=False``), so what the
adapter reads is what the server sent, whatever the client's model version. Every request has
a timeout (the client has none by default).

Where the calls go (the RBAC rules in docs/kubernetes-backend.md list the same):

================  ========================================================  ==============
method            request                                                   used by
================  ========================================================  ==============
create_job        POST   /apis/batch/v1/namespaces/{ns}/jobs                submit
create_secret     POST   /api/v1/namespaces/{ns}/secrets                    submit (a grant)
read_job          GET    /apis/batch/v1/namespaces/{ns}/jobs/{name}         submit (409), cancel
list_jobs         GET    /apis/batch/v1/jobs?labelSelector=                 poll (one a poll)
delete_job        DELETE /apis/batch/v1/namespaces/{ns}/jobs/{name}         cancel
list_pods         GET    /api/v1/[namespaces/{ns}/]pods?labelSelector=      logs, poll (rare)
delete_pods       DELETE /api/v1/namespaces/{ns}/pods?labelSelector=        cancel
pod_log           GET    /api/v1/namespaces/{ns}/pods/{name}/log            logs
list_nodes        GET    /api/v1/nodes?labelSelector=                       pool_capacity
================  ========================================================  ==============
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any, Protocol

Obj = dict[str, Any]
STREAM_CHUNK = 64 * 1024


class KubeApi(Protocol):
    def create_job(self, namespace: str, body: Obj) -> Obj: ...
    def create_secret(self, namespace: str, body: Obj) -> Obj: ...
    def read_job(self, namespace: str, name: str) -> Obj: ...
    def list_jobs(self, label_selector: str) -> list[Obj]: ...
    def delete_job(self, namespace: str, name: str, grace_s: int) -> None: ...
    def list_pods(self, label_selector: str, namespace: str | None = None) -> list[Obj]: ...
    def delete_pods(self, namespace: str, label_selector: str, grace_s: int) -> None: ...
    def pod_log(
        self, namespace: str, name: str, container: str, limit_bytes: int
    ) -> Iterator[bytes]: ...
    def list_nodes(self, label_selector: str) -> list[Obj]: ...
    def close(self) -> None: ...


# (kubeconfig, context, in_cluster, timeout_s) -> client; may raise what the SDK raises.
ClientFactory = Callable[[str | None, str | None, bool, float], KubeApi]


def official_client(
    kubeconfig: str | None, context: str | None, in_cluster: bool, timeout_s: float
) -> KubeApi:
    """A :class:`KubeApi` on the official client, configured from a kubeconfig (its file and
    context, or the client's defaults: ``$KUBECONFIG``, ``~/.kube/config``) or from the
    service account of the pod gpupool runs in."""
    from kubernetes import client, config

    if in_cluster:
        configuration = client.Configuration()
        config.load_incluster_config(client_configuration=configuration)  # type: ignore[no-untyped-call]
        api_client = client.ApiClient(configuration)
    else:
        api_client = config.new_client_from_config(  # type: ignore[no-untyped-call]
            config_file=kubeconfig, context=context, persist_config=False
        )
    return _Official(
        api_client, client.BatchV1Api(api_client), client.CoreV1Api(api_client), timeout_s
    )


class _Official:
    def __init__(self, api_client: Any, batch: Any, core: Any, timeout_s: float) -> None:
        self._api_client = api_client
        self._batch = batch
        self._core = core
        self._opts = {"_preload_content": False, "_request_timeout": timeout_s}

    @staticmethod
    def _json(response: Any) -> Obj:
        try:
            decoded = json.loads(response.data or b"{}")
        finally:
            response.release_conn()
        return decoded if isinstance(decoded, dict) else {}

    def create_job(self, namespace: str, body: Obj) -> Obj:
        return self._json(self._batch.create_namespaced_job(namespace, body, **self._opts))

    def create_secret(self, namespace: str, body: Obj) -> Obj:
        return self._json(self._core.create_namespaced_secret(namespace, body, **self._opts))

    def read_job(self, namespace: str, name: str) -> Obj:
        return self._json(self._batch.read_namespaced_job(name, namespace, **self._opts))

    def list_jobs(self, label_selector: str) -> list[Obj]:
        answer = self._batch.list_job_for_all_namespaces(
            label_selector=label_selector, **self._opts
        )
        return list(self._json(answer).get("items") or [])

    def delete_job(self, namespace: str, name: str, grace_s: int) -> None:
        self._json(
            self._batch.delete_namespaced_job(
                name,
                namespace,
                grace_period_seconds=grace_s,
                propagation_policy="Foreground",
                **self._opts,
            )
        )

    def list_pods(self, label_selector: str, namespace: str | None = None) -> list[Obj]:
        if namespace is None:
            answer = self._core.list_pod_for_all_namespaces(
                label_selector=label_selector, **self._opts
            )
        else:
            answer = self._core.list_namespaced_pod(
                namespace, label_selector=label_selector, **self._opts
            )
        return list(self._json(answer).get("items") or [])

    def delete_pods(self, namespace: str, label_selector: str, grace_s: int) -> None:
        self._json(
            self._core.delete_collection_namespaced_pod(
                namespace,
                label_selector=label_selector,
                grace_period_seconds=grace_s,
                **self._opts,
            )
        )

    def pod_log(
        self, namespace: str, name: str, container: str, limit_bytes: int
    ) -> Iterator[bytes]:
        return _streamed(
            lambda: self._core.read_namespaced_pod_log(
                name, namespace, container=container, limit_bytes=limit_bytes, **self._opts
            )
        )

    def list_nodes(self, label_selector: str) -> list[Obj]:
        answer = self._core.list_node(label_selector=label_selector, **self._opts)
        return list(self._json(answer).get("items") or [])

    def close(self) -> None:
        self._api_client.close()


def _streamed(request: Callable[[], Any]) -> Iterator[bytes]:
    """The body of a log request, read in chunks as it arrives (never held whole)."""

    @contextmanager
    def opened() -> Iterator[Any]:
        response = request()
        try:
            yield response
        finally:
            response.close()  # the rest of the body, if any, is not wanted
            response.release_conn()

    def chunks() -> Iterator[bytes]:
        with opened() as response:
            yield from response.stream(STREAM_CHUNK, decode_content=True)

    return chunks()
