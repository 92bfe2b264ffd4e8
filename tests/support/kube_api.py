"""A small in-process stand-in for a Kubernetes API server: the subset the Kubernetes backend
uses, over real HTTP, for the official ``kubernetes`` client (tests write it a kubeconfig).

It is strict where a real API server is: every request body is checked against the Kubernetes
OpenAPI schema (:mod:`support.kube_schema`, unknown fields included) and against the rules of
the API server's own validation that the adapter could break (names, labels, the Job's pod
template); a request it does not implement, or a query parameter it does not know, is refused
rather than guessed at. Refusals are answered as a real server does (a ``Status`` object with
``reason`` and ``code``) and kept in :attr:`KubeApiServer.rejected`. Every request is logged in
:attr:`KubeApiServer.requests` (method, path, query), so tests can count list calls.

What is behind it (scheduling, the Job controller, the kubelet running commands as local
processes) is in :mod:`support.kube_cluster`.

Routes: jobs (create, get, list in a namespace and across namespaces, delete), secrets
(create), pods (list in a namespace and across namespaces, delete a collection, log), nodes
(list).
"""

from __future__ import annotations

import json
import re
import threading
from collections.abc import Callable
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any
from urllib.parse import parse_qs, urlsplit

from support.kube_cluster import Cluster, Node, Obj
from support.kube_schema import problems

_DNS_LABEL = re.compile(r"[a-z0-9]([-a-z0-9]*[a-z0-9])?\Z")
_DNS_SUBDOMAIN = re.compile(r"[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*\Z")
_LABEL_NAME = re.compile(r"[A-Za-z0-9]([-A-Za-z0-9_.]*[A-Za-z0-9])?\Z")
_ENV_NAME = re.compile(r"[-._a-zA-Z][-._a-zA-Z0-9]*\Z")
_SELECTOR_TERM = re.compile(r"\s*(!?)([A-Za-z0-9./_-]+)\s*(?:(==|=|!=)\s*([A-Za-z0-9._-]*))?\s*\Z")
_LIST_PARAMS = {"labelSelector", "timeoutSeconds", "pretty"}
_DELETE_PARAMS = {"gracePeriodSeconds", "propagationPolicy", "pretty"}


class ApiError(Exception):
    def __init__(self, code: int, reason: str, message: str, details: Obj | None = None) -> None:
        super().__init__(message)
        self.code, self.reason, self.message, self.details = code, reason, message, details

    def status(self) -> Obj:
        body: Obj = {
            "kind": "Status",
            "apiVersion": "v1",
            "metadata": {},
            "status": "Failure",
            "message": self.message,
            "reason": self.reason,
            "code": self.code,
        }
        if self.details:
            body["details"] = self.details
        return body


def invalid(kind: str, name: str, causes: list[str]) -> ApiError:
    message = f'{kind} "{name}" is invalid: ' + "; ".join(causes)
    details = {"name": name, "kind": kind.lower() + "s", "causes": [{"message": c} for c in causes]}
    return ApiError(422, "Invalid", message, details)


@dataclass
class Fault:
    """An answer to give instead of serving: ``times`` requests whose method and path match."""

    method: str
    path: str  # a regular expression on the path
    code: int
    reason: str
    message: str
    times: int = 1


@dataclass
class KubeApiServer:
    work: Path
    namespaces: set[str] = field(default_factory=lambda: {"team-a", "team-b"})
    nodes: list[Node] = field(default_factory=list)
    claims: dict[tuple[str, str], Path] = field(default_factory=dict)
    gpu_resource: str = "nvidia.com/gpu"
    requests: list[tuple[str, str, str]] = field(default_factory=list)
    rejected: list[str] = field(default_factory=list)
    faults: list[Fault] = field(default_factory=list)

    def __post_init__(self) -> None:
        self.cluster = Cluster(
            self.work,
            namespaces=self.namespaces,
            nodes=self.nodes,
            claims=self.claims,
            gpu_resource=self.gpu_resource,
        )
        self._server: ThreadingHTTPServer | None = None

    # -- lifecycle -------------------------------------------------------------------------------

    def start(self) -> KubeApiServer:
        server = ThreadingHTTPServer(("127.0.0.1", 0), _handler(self))
        server.daemon_threads = True
        self._server = server
        threading.Thread(target=server.serve_forever, name="kube-api", daemon=True).start()
        self.cluster.start()
        return self

    def stop(self) -> None:
        if self._server is not None:
            self._server.shutdown()
            self._server.server_close()
        self.cluster.stop()

    @property
    def url(self) -> str:
        assert self._server is not None
        return f"http://127.0.0.1:{self._server.server_address[1]}"

    def kubeconfig(self, path: Path, context: str = "stand-in") -> Path:
        config = {
            "apiVersion": "v1",
            "kind": "Config",
            "clusters": [{"name": "stand-in", "cluster": {"server": self.url}}],
            "users": [{"name": "gpupool", "user": {"token": "stand-in-token"}}],
            "contexts": [{"name": context, "context": {"cluster": "stand-in", "user": "gpupool"}}],
            "current-context": context,
        }
        path.write_text(json.dumps(config))
        return path

    def fail(
        self, method: str, path: str, code: int, reason: str, message: str, times: int = 1
    ) -> None:
        self.faults.append(Fault(method, path, code, reason, message, times))

    def list_calls(self, resource: str) -> int:
        return sum(1 for m, p, _ in self.requests if m == "GET" and p.endswith(f"/{resource}"))

    # -- serving ---------------------------------------------------------------------------------

    def serve(self, method: str, path: str, query: dict[str, str], body: Any) -> Obj | bytes:
        for fault in self.faults:
            if fault.times > 0 and fault.method == method and re.fullmatch(fault.path, path):
                fault.times -= 1
                raise ApiError(fault.code, fault.reason, fault.message)
        for route_method, pattern, allowed, action in _ROUTES:
            found = re.fullmatch(pattern, path)
            if found and route_method == method:
                unknown = sorted(set(query) - allowed)
                if unknown:
                    raise ApiError(400, "BadRequest", f"the stand-in does not implement {unknown}")
                with self.cluster.lock:
                    return action(self, query, body, *found.groups())
        raise ApiError(404, "NotFound", "the server could not find the requested resource")

    # -- jobs ------------------------------------------------------------------------------------

    def _create_job(self, query: dict[str, str], body: Any, namespace: str) -> Obj:
        if not isinstance(body, dict):
            raise ApiError(400, "BadRequest", "the request body is not a JSON object")
        name = str((body.get("metadata") or {}).get("name", ""))
        causes = problems(body, "job-batch-v1") + _job_rules(body, namespace)
        if causes:
            raise invalid("Job", name, causes)
        if namespace not in self.cluster.namespaces:
            raise ApiError(404, "NotFound", f'namespaces "{namespace}" not found')
        if (namespace, name) in self.cluster.jobs:
            raise ApiError(
                409,
                "AlreadyExists",
                f'jobs.batch "{name}" already exists',
                {"name": name, "group": "batch", "kind": "jobs"},
            )
        return self.cluster.create_job(namespace, body)

    def _get_job(self, query: dict[str, str], body: Any, namespace: str, name: str) -> Obj:
        job = self.cluster.jobs.get((namespace, name))
        if job is None:
            raise ApiError(404, "NotFound", f'jobs.batch "{name}" not found')
        return job

    def _list_jobs(self, query: dict[str, str], body: Any, namespace: str | None = None) -> Obj:
        match = _selector(query.get("labelSelector", ""))
        items = [
            job
            for (ns, _), job in sorted(self.cluster.jobs.items())
            if (namespace is None or ns == namespace) and match(job["metadata"].get("labels"))
        ]
        return _list("batch/v1", "JobList", items, self.cluster.resource_version())

    def _delete_job(self, query: dict[str, str], body: Any, namespace: str, name: str) -> Obj:
        options = _delete_options(query, body)
        job = self.cluster.jobs.get((namespace, name))
        if job is None:
            raise ApiError(404, "NotFound", f'jobs.batch "{name}" not found')
        propagation = options.get("propagationPolicy", "Background")
        if propagation == "Orphan":
            raise ApiError(400, "BadRequest", "the stand-in does not implement Orphan")
        return self.cluster.delete_job(namespace, name, propagation)

    def _create_secret(self, query: dict[str, str], body: Any, namespace: str) -> Obj:
        if not isinstance(body, dict):
            raise ApiError(400, "BadRequest", "the request body is not a JSON object")
        meta = body.get("metadata") or {}
        name = str(meta.get("name", ""))
        causes = problems(body, "secret-v1")
        if not (len(name) <= 253 and _DNS_SUBDOMAIN.match(name)):
            causes.append(f"metadata.name: Invalid value: {name!r}: not a DNS-1123 subdomain")
        causes += _label_problems("metadata.labels", meta.get("labels"))
        for key in {**(body.get("data") or {}), **(body.get("stringData") or {})}:
            if not re.fullmatch(r"[-._a-zA-Z0-9]+", key):
                causes.append(f"data[{key}]: Invalid value: not a valid key")
        if causes:
            raise invalid("Secret", name, causes)
        if namespace not in self.cluster.namespaces:
            raise ApiError(404, "NotFound", f'namespaces "{namespace}" not found')
        if (namespace, name) in self.cluster.secrets:
            raise ApiError(
                409,
                "AlreadyExists",
                f'secrets "{name}" already exists',
                {"name": name, "kind": "secrets"},
            )
        return self.cluster.create_secret(namespace, body)

    # -- pods, nodes -----------------------------------------------------------------------------

    def _list_pods(self, query: dict[str, str], body: Any, namespace: str | None = None) -> Obj:
        match = _selector(query.get("labelSelector", ""))
        items = [
            pod.obj
            for (ns, _), pod in sorted(self.cluster.pods.items())
            if (namespace is None or ns == namespace) and match(pod.obj["metadata"].get("labels"))
        ]
        return _list("v1", "PodList", items, self.cluster.resource_version())

    def _delete_pods(self, query: dict[str, str], body: Any, namespace: str) -> Obj:
        options = _delete_options(query, body)
        match = _selector(query.get("labelSelector", ""))
        chosen = [
            pod
            for (ns, _), pod in sorted(self.cluster.pods.items())
            if ns == namespace and match(pod.obj["metadata"].get("labels"))
        ]
        self.cluster.delete_pods(namespace, chosen, options.get("gracePeriodSeconds"))
        return _list("v1", "PodList", [p.obj for p in chosen], self.cluster.resource_version())

    def _pod_log(self, query: dict[str, str], body: Any, namespace: str, name: str) -> bytes:
        pod = self.cluster.pods.get((namespace, name))
        if pod is None:
            raise ApiError(404, "NotFound", f'pods "{name}" not found')
        container = query.get("container", pod.obj["spec"]["containers"][0]["name"])
        if container not in [c["name"] for c in pod.obj["spec"]["containers"]]:
            raise ApiError(400, "BadRequest", f"container {container} is not valid for pod {name}")
        if not pod.started:
            waiting = (pod.obj["status"].get("containerStatuses") or [{}])[0]
            reason = ((waiting.get("state") or {}).get("waiting") or {}).get(
                "reason", "ContainerCreating"
            )
            raise ApiError(
                400,
                "BadRequest",
                f'container "{container}" in pod "{name}" is waiting to start: {reason}',
            )
        limit = int(query["limitBytes"]) if "limitBytes" in query else None
        if limit is not None and limit <= 0:
            raise ApiError(422, "Invalid", "limitBytes: must be greater than 0")
        data = pod.log.read_bytes()
        return data if limit is None else data[:limit]

    def _list_nodes(self, query: dict[str, str], body: Any) -> Obj:
        match = _selector(query.get("labelSelector", ""))
        items = [
            node.to_object(self.gpu_resource) for node in self.cluster.nodes if match(node.labels)
        ]
        return _list("v1", "NodeList", items, self.cluster.resource_version())


Action = Callable[..., Obj | bytes]
_NS = r"/namespaces/([^/]+)"
_ROUTES: list[tuple[str, str, set[str], Action]] = [
    (
        "POST",
        rf"/apis/batch/v1{_NS}/jobs",
        {"pretty", "fieldValidation"},
        KubeApiServer._create_job,
    ),
    ("GET", rf"/apis/batch/v1{_NS}/jobs/([^/]+)", {"pretty"}, KubeApiServer._get_job),
    ("DELETE", rf"/apis/batch/v1{_NS}/jobs/([^/]+)", _DELETE_PARAMS, KubeApiServer._delete_job),
    ("GET", r"/apis/batch/v1/jobs", _LIST_PARAMS, KubeApiServer._list_jobs),
    ("GET", rf"/apis/batch/v1{_NS}/jobs", _LIST_PARAMS, KubeApiServer._list_jobs),
    ("POST", rf"/api/v1{_NS}/secrets", {"pretty", "fieldValidation"}, KubeApiServer._create_secret),
    ("GET", r"/api/v1/pods", _LIST_PARAMS, KubeApiServer._list_pods),
    ("GET", rf"/api/v1{_NS}/pods", _LIST_PARAMS, KubeApiServer._list_pods),
    (
        "DELETE",
        rf"/api/v1{_NS}/pods",
        _DELETE_PARAMS | {"labelSelector"},
        KubeApiServer._delete_pods,
    ),
    (
        "GET",
        rf"/api/v1{_NS}/pods/([^/]+)/log",
        {"container", "limitBytes", "pretty"},
        KubeApiServer._pod_log,
    ),
    ("GET", r"/api/v1/nodes", _LIST_PARAMS, KubeApiServer._list_nodes),
]


def _list(api_version: str, kind: str, items: list[Obj], version: str) -> Obj:
    return {
        "apiVersion": api_version,
        "kind": kind,
        "metadata": {"resourceVersion": version},
        "items": items,
    }


def _delete_options(query: dict[str, str], body: Any) -> Obj:
    options: Obj = dict(body) if isinstance(body, dict) else {}
    if body is not None:
        causes = problems(body, "deleteoptions-meta-v1")
        if causes:
            raise ApiError(400, "BadRequest", "invalid DeleteOptions: " + "; ".join(causes))
    if "gracePeriodSeconds" in query:
        try:
            options["gracePeriodSeconds"] = int(query["gracePeriodSeconds"])
        except ValueError as exc:
            raise ApiError(400, "BadRequest", "gracePeriodSeconds: not an integer") from exc
    if "propagationPolicy" in query:
        options["propagationPolicy"] = query["propagationPolicy"]
    if options.get("propagationPolicy", "Background") not in ("Foreground", "Background", "Orphan"):
        raise ApiError(
            400, "BadRequest", f"invalid propagationPolicy {options['propagationPolicy']}"
        )
    if options.get("gracePeriodSeconds", 0) < 0:
        raise ApiError(422, "Invalid", "gracePeriodSeconds: must be >= 0")
    return options


def _selector(text: str) -> Callable[[Any], bool]:
    """An equality-based label selector (``a=b,c!=d,e,!f``); set-based ones are refused."""
    terms = []
    for term in filter(None, (t.strip() for t in text.split(","))):
        found = _SELECTOR_TERM.match(term)
        if found is None:
            raise ApiError(
                400,
                "BadRequest",
                f"unable to parse requirement: {term!r} "
                "(the stand-in supports equality-based selectors only)",
            )
        negated, key, op, value = found.groups()
        terms.append((negated, key, op, value))

    def match(labels: Any) -> bool:
        labels = labels or {}
        for negated, key, op, value in terms:
            if op is None:
                if (key in labels) == bool(negated):
                    return False
            elif (labels.get(key) == value) != (op in ("=", "==")):
                return False
        return True

    return match


def _label_problems(where: str, labels: Any) -> list[str]:
    out = []
    for key, value in (labels or {}).items():
        prefix, _, name = key.rpartition("/")
        if (prefix and not _DNS_SUBDOMAIN.match(prefix)) or not (
            len(name) <= 63 and _LABEL_NAME.match(name)
        ):
            out.append(f"{where}: Invalid value: {key!r}: not a valid label key")
        if value and not (len(value) <= 63 and _LABEL_NAME.match(value)):
            out.append(f"{where}: Invalid value: {value!r}: not a valid label value")
    return out


def _job_rules(job: Obj, namespace: str) -> list[str]:
    """The API server's validation of a Job beyond the schema, for what the adapter sets."""
    out: list[str] = []
    meta, spec = job.get("metadata") or {}, job.get("spec") or {}
    name = str(meta.get("name", ""))
    if not (len(name) <= 63 and _DNS_LABEL.match(name)):
        out.append(
            f"metadata.name: Invalid value: {name!r}: must be a DNS-1123 label of at most "
            "63 characters (it becomes the job-name label)"
        )
    if meta.get("namespace") not in (None, namespace):
        out.append("metadata.namespace: does not match the namespace of the request")
    out += _label_problems("metadata.labels", meta.get("labels"))
    template = spec.get("template") or {}
    out += _label_problems(
        "spec.template.metadata.labels", (template.get("metadata") or {}).get("labels")
    )
    pod = template.get("spec") or {}
    restart = pod.get("restartPolicy")
    if restart not in ("Never", "OnFailure"):
        out.append(
            f"spec.template.spec.restartPolicy: Unsupported value: {restart!r}: supported "
            'values: "OnFailure", "Never"'
        )
    if spec.get("podFailurePolicy") and restart != "Never":
        out.append("spec.podFailurePolicy: Invalid value: only allowed with restartPolicy Never")
    for rule in (spec.get("podFailurePolicy") or {}).get("rules") or ():
        codes = rule.get("onExitCodes") or {}
        if codes.get("operator") == "In" and 0 in codes.get("values", ()):
            out.append("spec.podFailurePolicy.rules.onExitCodes.values: 0 is not allowed with In")
    if spec.get("completionMode") == "Indexed" and spec.get("completions") is None:
        out.append("spec.completions: Required value: when completionMode is Indexed")
    for i, container in enumerate(pod.get("containers") or ()):
        where = f"spec.template.spec.containers[{i}]"
        if not _DNS_LABEL.match(str(container.get("name", ""))):
            out.append(f"{where}.name: Invalid value: not a DNS-1123 label")
        for env in container.get("env") or ():
            if not _ENV_NAME.match(str(env.get("name", ""))):
                out.append(f"{where}.env: Invalid value: {env.get('name')!r}")
        resources = container.get("resources") or {}
        limits, requests = resources.get("limits") or {}, resources.get("requests") or {}
        for resource, amount in limits.items():
            if "/" in resource and not str(amount).isdigit():
                out.append(f"{where}.resources.limits[{resource}]: must be an integer")
            if "/" in resource and resource in requests and requests[resource] != amount:
                out.append(f"{where}.resources.requests[{resource}]: must equal the limit")
        volumes = {v.get("name") for v in pod.get("volumes") or ()}
        for mount in container.get("volumeMounts") or ():
            if mount.get("name") not in volumes:
                out.append(f"{where}.volumeMounts.name: Not found: {mount.get('name')!r}")
            if not str(mount.get("mountPath", "")).startswith("/"):
                out.append(f"{where}.volumeMounts.mountPath: must be absolute")
    for field_name in ("activeDeadlineSeconds", "ttlSecondsAfterFinished", "backoffLimit"):
        if field_name in spec and spec[field_name] < 0:
            out.append(f"spec.{field_name}: Invalid value: must be greater than or equal to 0")
    if spec.get("activeDeadlineSeconds") == 0:
        out.append("spec.activeDeadlineSeconds: Invalid value: must be greater than 0")
    return out


def _handler(api: KubeApiServer) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def log_message(self, format: str, *args: Any) -> None:
            pass  # the request log is api.requests

        def _serve(self, method: str) -> None:
            parts = urlsplit(self.path)
            query = {k: v[-1] for k, v in parse_qs(parts.query, keep_blank_values=True).items()}
            api.requests.append((method, parts.path, parts.query))
            length = int(self.headers.get("Content-Length") or 0)
            raw = self.rfile.read(length) if length else b""
            try:
                if self.headers.get("Authorization") != "Bearer stand-in-token":
                    raise ApiError(401, "Unauthorized", "Unauthorized")
                try:
                    body = json.loads(raw) if raw else None
                except ValueError as exc:
                    raise ApiError(400, "BadRequest", f"the body is not JSON: {exc}") from exc
                answer = api.serve(method, parts.path, query, body)
                code = 201 if method == "POST" else 200
            except ApiError as exc:
                if exc.code in (400, 404, 422) and exc.reason != "NotFound":
                    api.rejected.append(f"{method} {parts.path}: {exc.message}")
                answer, code = exc.status(), exc.code
            if isinstance(answer, bytes):
                self._send(code, "text/plain", answer)
            else:
                self._send(code, "application/json", json.dumps(answer).encode())

        def _send(self, code: int, kind: str, data: bytes) -> None:
            self.send_response(code)
            self.send_header("Content-Type", kind)
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            for start in range(0, len(data), 64 * 1024):  # written as it would be streamed
                self.wfile.write(data[start : start + 64 * 1024])

        def do_GET(self) -> None:
            self._serve("GET")

        def do_POST(self) -> None:
            self._serve("POST")

        def do_DELETE(self) -> None:
            self._serve("DELETE")

    return Handler
