"""A local stand-in for the Azure Batch REST API, for tests of the Azure Batch backend.

There is no Azure here. The adapter runs the real ``azure-batch`` SDK against this server,
which implements the operations the adapter uses and nothing else:

    POST /pools  GET /pools/{pool}  POST /jobs  GET /jobs/{job}
    POST /jobs/{job}/tasks  GET /jobs/{job}/tasks/{task}
    POST /jobs/{job}/tasks/{task}/terminate  GET /jobs/{job}/tasks/{task}/files/{path}

Every request is recorded (:attr:`BatchStandIn.requests`) and checked: its method and path
must be one of the above, ``api-version`` must be :data:`API_VERSION`, no other query
parameter is accepted, the ``Authorization`` header must be the account's shared-key signature
of the request, and
a body may hold only the fields listed in :data:`BODY_FIELDS` (recursively). Anything else is
answered 400 and added to :attr:`BatchStandIn.rejected`, which the tests assert is empty.

Tasks run for real, as local processes, the way a Batch node runs them: the command line is
split (no shell) and run in ``<root>/<job>/<task>/wd`` with the task's environment settings
and ``AZ_BATCH_*`` variables; stdout and stderr go to ``stdout.txt`` and ``stderr.txt`` next
to it (any file of the task's directory can be read, as on a node); resource files are
downloaded before the start; output files are uploaded (``PUT``,
as to blob storage) on completion; ``maxWallClockTime`` and ``terminate`` send SIGTERM, then
SIGKILL after :attr:`BatchStandIn.kill_grace_s`. :meth:`BatchStandIn.preempt` plays Azure
taking a low-priority node back: the process is killed, the task goes back to ``active`` with
``requeueCount`` + 1, and is started again after :attr:`BatchStandIn.requeue_delay_s` unless
it is terminated first. The failure codes follow Batch's documented ones where known
(``FailureExitCode``, ``TaskEnded``); the rest is this stand-in's own choice.
"""

from __future__ import annotations

import base64
import contextlib
import hashlib
import hmac
import json
import os
import re
import shlex
import signal
import subprocess
import threading
import time
import urllib.request
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any
from urllib.parse import parse_qs, quote, unquote, urlsplit, urlunsplit

API_VERSION = "2025-06-01"
ACCOUNT = "gpupooltest"
# A base64 key, as Batch hands out; used by the tests as the account key.
ACCOUNT_KEY = "dGVzdC1rZXktZm9yLWEtbG9jYWwtc3RhbmQtaW4tb25seQ=="
QUERY = frozenset({"api-version", "timeOut"})

# Allowed fields of each body, recursively: a dict maps a field to its allowed sub-fields
# (None: a scalar or a list of scalars; a dict inside a list describes each item).
_ENV = {"name": None, "value": None}
_IMAGE = {"publisher": None, "offer": None, "sku": None, "version": None}
BODY_FIELDS: dict[str, dict[str, Any]] = {
    "create_pool": {
        "id": None,
        "vmSize": None,
        "virtualMachineConfiguration": {"imageReference": _IMAGE, "nodeAgentSKUId": None},
        "taskSlotsPerNode": None,
        "taskSchedulingPolicy": {"nodeFillType": None},
        "enableAutoScale": None,
        "autoScaleFormula": None,
        "autoScaleEvaluationInterval": None,
        "targetDedicatedNodes": None,
        "targetLowPriorityNodes": None,
    },
    "create_job": {"id": None, "poolInfo": {"poolId": None}},
    "create_task": {
        "id": None,
        "displayName": None,
        "commandLine": None,
        "environmentSettings": _ENV,
        "constraints": {"maxWallClockTime": None, "maxTaskRetryCount": None},
        "userIdentity": {"autoUser": {"scope": None, "elevationLevel": None}},
        "containerSettings": {"imageName": None, "workingDirectory": None},
        "resourceFiles": {"httpUrl": None, "filePath": None},
        "outputFiles": {
            "filePattern": None,
            "destination": {"container": {"containerUrl": None, "path": None}},
            "uploadOptions": {"uploadCondition": None},
        },
    },
}
REQUIRED = {
    "create_pool": ("id", "vmSize", "virtualMachineConfiguration"),
    "create_job": ("id", "poolInfo"),
    "create_task": ("id", "commandLine"),
}
_ID = re.compile(r"[A-Za-z0-9_-]{1,64}\Z")
_DURATION = re.compile(r"P(?:(\d+)D)?(?:T(?:(\d+)H)?(?:(\d+)M)?(?:(\d+(?:\.\d+)?)S)?)?\Z")


def _stamp(when: datetime | None) -> str | None:
    return when.isoformat().replace("+00:00", "Z") if when else None


def parse_duration(text: str) -> timedelta:
    found = _DURATION.match(text)
    if not found:
        raise ValueError(f"not an ISO 8601 duration: {text!r}")
    d, h, m, s = found.groups()
    return timedelta(
        days=int(d or 0), hours=int(h or 0), minutes=int(m or 0), seconds=float(s or 0)
    )


def unknown_fields(body: Any, allowed: dict[str, Any], where: str = "") -> list[str]:
    """The paths of fields in ``body`` that ``allowed`` does not list."""
    found: list[str] = []
    items = body if isinstance(body, list) else [body]
    for item in items:
        if not isinstance(item, dict):
            found.append(where or "<body>")
            continue
        for key, value in item.items():
            path = f"{where}.{key}" if where else key
            if key not in allowed:
                found.append(path)
            elif allowed[key] is not None:
                found.extend(unknown_fields(value, allowed[key], path))
    return found


class StandInError(Exception):
    def __init__(self, status: int, code: str, message: str) -> None:
        super().__init__(message)
        self.status, self.code, self.message = status, code, message


@dataclass
class Request:
    method: str
    path: str
    query: dict[str, list[str]]
    body: Any
    status: int = 0


@dataclass
class Task:
    job: str
    body: dict[str, Any]
    root: Path
    created: datetime
    state: str = "active"
    state_time: datetime | None = None
    start: datetime | None = None
    end: datetime | None = None
    exit_code: int | None = None
    failure: dict[str, str] | None = None
    requeue_count: int = 0
    runs: int = 0
    process: subprocess.Popen[bytes] | None = None
    ending: str | None = None  # why it is being stopped: terminate, timeout, preempt
    uploads: list[tuple[str, int]] = field(default_factory=list)  # (url without query, status)

    @property
    def id(self) -> str:
        return str(self.body["id"])

    @property
    def workdir(self) -> Path:
        return self.root / "wd"


class BatchStandIn:
    """The server. Use as a context manager; ``url`` is the account URL to configure."""

    def __init__(self, root: Path, *, account: str = ACCOUNT, node_id: str = "tvmps_node1"):
        self.root = root
        self.account = account
        self.node_id = node_id
        self.kill_grace_s = 1.0
        self.requeue_delay_s = 0.5
        self.requests: list[Request] = []
        self.rejected: list[str] = []
        self.pools: dict[str, dict[str, Any]] = {}
        self.jobs: dict[str, dict[str, Any]] = {}
        self.tasks: dict[tuple[str, str], Task] = {}
        self.fail_next: list[tuple[int, str]] = []  # answered to the next requests instead
        self._lock = threading.RLock()
        self._server = ThreadingHTTPServer(("127.0.0.1", 0), self._handler())
        self._server.daemon_threads = True
        self._thread = threading.Thread(target=self._server.serve_forever, daemon=True)

    @property
    def url(self) -> str:
        host, port = self._server.server_address[:2]
        return f"http://{host}:{port}"

    def __enter__(self) -> BatchStandIn:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def close(self) -> None:
        with self._lock:
            tasks = list(self.tasks.values())
        for task in tasks:
            if task.process is not None and task.process.poll() is None:
                _signal(task.process, signal.SIGKILL)
        self._server.shutdown()
        self._server.server_close()

    # -- what tests look at and do -----------------------------------------------------------

    def task(self, job: str, task_id: str) -> Task:
        with self._lock:
            return self.tasks[(job, task_id)]

    def calls(self, method: str, pattern: str) -> list[Request]:
        """Recorded requests of ``method`` whose path matches the regex ``pattern``."""
        return [r for r in self.requests if r.method == method and re.fullmatch(pattern, r.path)]

    def preempt(self, job: str, task_id: str) -> None:
        """Azure takes the low-priority node back while the task runs."""
        task = self.task(job, task_id)
        with self._lock:
            assert task.state == "running", f"task {task_id} is {task.state}, not running"
            task.ending = "preempt"
            process = task.process
        assert process is not None
        _signal(process, signal.SIGKILL)

    # -- HTTP -------------------------------------------------------------------------------

    def _handler(self) -> type[BaseHTTPRequestHandler]:
        stand_in = self

        class Handler(BaseHTTPRequestHandler):
            def do_GET(self) -> None:
                stand_in._serve(self, "GET")

            def do_POST(self) -> None:
                stand_in._serve(self, "POST")

            def do_PUT(self) -> None:  # refused: the adapter uses no PUT, PATCH or DELETE
                stand_in._serve(self, "PUT")

            def do_PATCH(self) -> None:
                stand_in._serve(self, "PATCH")

            def do_DELETE(self) -> None:
                stand_in._serve(self, "DELETE")

            def log_message(self, format: str, *args: object) -> None:
                pass

        return Handler

    def _serve(self, handler: BaseHTTPRequestHandler, method: str) -> None:
        parts = urlsplit(handler.path)
        path = unquote(parts.path)
        query = parse_qs(parts.query)
        length = int(handler.headers.get("Content-Length") or 0)
        raw = handler.rfile.read(length) if length else b""
        request = Request(method, path, query, None)
        with self._lock:
            self.requests.append(request)
        try:
            request.body = json.loads(raw) if raw else None
            self._check(handler, method, path, query)
            if self.fail_next:
                status, code = self.fail_next.pop(0)
                raise StandInError(status, code, f"injected {code}")
            status, payload, headers = self._route(handler, method, path, request.body)
        except StandInError as exc:
            status, headers = exc.status, {"Content-Type": "application/json"}
            payload = json.dumps(
                {"code": exc.code, "message": {"lang": "en-US", "value": exc.message}}
            ).encode()
        except json.JSONDecodeError:
            status, headers, payload = 400, {}, b""
            self.rejected.append(f"{method} {path}: body is not JSON")
        request.status = status
        handler.send_response(status)
        for name, value in headers.items():
            handler.send_header(name, value)
        handler.send_header("Content-Length", str(len(payload)))
        handler.end_headers()
        handler.wfile.write(payload)

    def _reject(self, why: str) -> StandInError:
        self.rejected.append(why)
        return StandInError(400, "InvalidRequest", why)

    def _check(
        self, handler: BaseHTTPRequestHandler, method: str, path: str, query: dict[str, list[str]]
    ) -> None:
        if query.get("api-version") != [API_VERSION]:
            raise self._reject(f"{method} {path}: api-version {query.get('api-version')}")
        if extra := sorted(set(query) - QUERY):
            raise self._reject(f"{method} {path}: unexpected query parameters {extra}")
        auth = handler.headers.get("Authorization", "")
        prefix = f"SharedKey {self.account}:"
        if not auth.startswith(prefix):
            raise StandInError(401, "AuthenticationFailed", "no shared key of this account")
        headers = {k.lower(): v for k, v in handler.headers.items()}
        if not hmac.compare_digest(
            auth[len(prefix) :], self.signature(method, handler.path, headers)
        ):
            raise StandInError(401, "AuthenticationFailed", "the signature does not match")

    def signature(self, method: str, target: str, headers: dict[str, str]) -> str:
        """Batch's shared-key signature of a request to ``target`` (path and query) with
        ``headers`` (lower-case names): the documented scheme, the verb, the standard headers,
        the ``ocp-`` headers, then ``/<account><path>`` and the query parameters."""
        length = headers.get("content-length", "0" if method not in ("GET", "HEAD") else "")
        standard = [
            "content-encoding",
            "content-language",
            "content-length",
            "content-md5",
            "content-type",
            "date",
            "if-modified-since",
            "if-match",
            "if-none-match",
            "if-unmodified-since",
            "range",
        ]
        values = [length if h == "content-length" else headers.get(h, "") for h in standard]
        text = method + "\n" + "\n".join(values) + "\n"
        for name in sorted(h for h in headers if h.startswith("ocp-")):
            text += f"{name}:{headers[name]}\n"
        text += f"/{self.account}{urlsplit(target).path}"
        for name, found in sorted(parse_qs(urlsplit(target).query).items()):
            text += f"\n{name}:{found[0]}"
        key = base64.b64decode(ACCOUNT_KEY)
        return base64.b64encode(hmac.new(key, text.encode(), hashlib.sha256).digest()).decode()

    def _body(self, operation: str, body: Any, what: str) -> dict[str, Any]:
        if not isinstance(body, dict):
            raise self._reject(f"{what}: the body is not a JSON object")
        if unknown := unknown_fields(body, BODY_FIELDS[operation]):
            raise self._reject(f"{what}: unknown fields {unknown}")
        if missing := [k for k in REQUIRED[operation] if k not in body]:
            raise self._reject(f"{what}: missing fields {missing}")
        if not _ID.match(str(body["id"])):
            raise self._reject(f"{what}: invalid id {body['id']!r}")
        return body

    def _route(
        self, handler: BaseHTTPRequestHandler, method: str, path: str, body: Any
    ) -> tuple[int, bytes, dict[str, str]]:
        seg = path.strip("/").split("/")
        created: tuple[int, bytes, dict[str, str]] = (201, b"", {})
        with self._lock:
            match method, seg:
                case "POST", ["pools"]:
                    pool = self._body("create_pool", body, "create pool")
                    if pool["id"] in self.pools:
                        raise StandInError(409, "PoolExists", "the pool exists")
                    self.pools[pool["id"]] = pool
                    return created
                case "GET", ["pools", pool_id]:
                    if pool_id not in self.pools:
                        raise StandInError(404, "PoolNotFound", "no such pool")
                    return self._json({**self.pools[pool_id], "state": "active"})
                case "POST", ["jobs"]:
                    job = self._body("create_job", body, "create job")
                    if job["id"] in self.jobs:
                        raise StandInError(409, "JobExists", "the job exists")
                    self.jobs[job["id"]] = {**job, "state": "active"}
                    return created
                case "GET", ["jobs", job_id]:
                    if job_id not in self.jobs:
                        raise StandInError(404, "JobNotFound", "no such job")
                    return self._json(self.jobs[job_id])
                case "POST", ["jobs", job_id, "tasks"]:
                    self._create_task(job_id, self._body("create_task", body, "create task"))
                    return created
                case "GET", ["jobs", job_id, "tasks", task_id]:
                    return self._json(self._task_json(self._find(job_id, task_id)))
                case "POST", ["jobs", job_id, "tasks", task_id, "terminate"]:
                    if body not in (None, {}):
                        raise self._reject(f"terminate {task_id}: unexpected body {body!r}")
                    self._terminate(self._find(job_id, task_id))
                    return 204, b"", {}
                case "GET", ["jobs", job_id, "tasks", task_id, "files", *name]:
                    return self._file(self._find(job_id, task_id), "/".join(name), handler)
        raise self._reject(f"{method} {path}: not an operation of this stand-in")

    @staticmethod
    def _json(value: Any) -> tuple[int, bytes, dict[str, str]]:
        return 200, json.dumps(value).encode(), {"Content-Type": "application/json"}

    def _find(self, job_id: str, task_id: str) -> Task:
        if job_id not in self.jobs:
            raise StandInError(404, "JobNotFound", "no such job")
        task = self.tasks.get((job_id, task_id))
        if task is None:
            raise StandInError(404, "TaskNotFound", "no such task")
        return task

    # -- tasks ------------------------------------------------------------------------------

    def _create_task(self, job_id: str, body: dict[str, Any]) -> None:
        if job_id not in self.jobs:
            raise StandInError(404, "JobNotFound", "no such job")
        key = (job_id, body["id"])
        if key in self.tasks:
            raise StandInError(409, "TaskExists", "the task exists")
        limit = body.get("constraints", {}).get("maxWallClockTime")
        if limit is not None:
            try:
                parse_duration(limit)
            except ValueError as exc:
                raise self._reject(f"create task: {exc}") from exc
        root = self.root / job_id / body["id"]
        now = datetime.now(UTC)
        task = Task(job=job_id, body=body, root=root, created=now, state_time=now)
        self.tasks[key] = task
        threading.Thread(target=self._run, args=(task,), daemon=True).start()

    def _run(self, task: Task) -> None:
        with self._lock:
            if task.state != "active":
                return
            task.state, task.state_time = "preparing", datetime.now(UTC)
        task.workdir.mkdir(parents=True, exist_ok=True)
        for item in task.body.get("resourceFiles", []):
            target = task.workdir / item["filePath"]
            target.parent.mkdir(parents=True, exist_ok=True)
            try:
                with urllib.request.urlopen(item["httpUrl"], timeout=10) as got:
                    target.write_bytes(got.read())
            except OSError as exc:
                self._finish(task, None, {"code": "ResourceFileDownloadFailed", "msg": str(exc)})
                return
        env = {
            "PATH": os.environ.get("PATH", "/usr/bin:/bin"),
            "HOME": str(task.root),
            **{e["name"]: e.get("value", "") for e in task.body.get("environmentSettings", [])},
            "AZ_BATCH_TASK_WORKING_DIR": str(task.workdir),
            "AZ_BATCH_TASK_DIR": str(task.root),
            "AZ_BATCH_TASK_ID": task.id,
            "AZ_BATCH_JOB_ID": task.job,
            "AZ_BATCH_NODE_ID": self.node_id,
        }
        with self._lock:
            if task.state != "preparing":  # terminated meanwhile
                return
            out = open(task.root / "stdout.txt", "ab")  # noqa: SIM115 (the child owns it)
            err = open(task.root / "stderr.txt", "ab")  # noqa: SIM115
            task.process = subprocess.Popen(
                shlex.split(task.body["commandLine"]),
                cwd=task.workdir,
                env=env,
                stdout=out,
                stderr=err,
                start_new_session=True,
            )
            out.close()
            err.close()
            task.runs += 1
            task.state = "running"
            task.start = task.state_time = datetime.now(UTC)
            task.end = task.exit_code = task.failure = None
        limit = task.body.get("constraints", {}).get("maxWallClockTime")
        deadline = (
            time.monotonic() + parse_duration(limit).total_seconds() if limit else float("inf")
        )
        process = task.process
        while process.poll() is None:
            if time.monotonic() >= deadline and task.ending is None:
                task.ending = "timeout"
                self._stop(process)
            time.sleep(0.02)
        self._exited(task, process.returncode)

    def _stop(self, process: subprocess.Popen[bytes]) -> None:
        _signal(process, signal.SIGTERM)

        def kill() -> None:
            if process.poll() is None:
                _signal(process, signal.SIGKILL)

        timer = threading.Timer(self.kill_grace_s, kill)
        timer.daemon = True
        timer.start()

    def _exited(self, task: Task, code: int) -> None:
        with self._lock:
            ending, task.ending = task.ending, None
            if ending == "preempt":
                task.requeue_count += 1
                task.state, task.state_time = "active", datetime.now(UTC)
                task.process = None
                timer = threading.Timer(self.requeue_delay_s, self._run, args=(task,))
                timer.daemon = True
                timer.start()
                return
        failure = None
        if ending == "terminate":
            failure = {"code": "TaskEnded", "msg": "The task was ended by a terminate request"}
        elif ending == "timeout":
            failure = {"code": "MaxWallClockTimeExpiry", "msg": "The task ran past its limit"}
        elif code != 0:
            failure = {"code": "FailureExitCode", "msg": "The task exited with an exit code"}
        self._upload(task, code == 0 and failure is None)
        self._finish(task, code, failure)

    def _finish(self, task: Task, code: int | None, failure: dict[str, str] | None) -> None:
        with self._lock:
            now = datetime.now(UTC)
            task.state, task.state_time, task.end = "completed", now, now
            task.exit_code = code
            task.failure = failure

    def _terminate(self, task: Task) -> None:
        if task.state == "completed":
            raise StandInError(409, "TaskCompleted", "the task has completed")
        if task.state in ("active", "preparing"):
            self._finish(task, None, {"code": "TaskEnded", "msg": "ended before it started"})
            return
        task.ending = "terminate"
        assert task.process is not None
        self._stop(task.process)

    def _upload(self, task: Task, success: bool) -> None:
        for spec in task.body.get("outputFiles", []):
            condition = spec.get("uploadOptions", {}).get("uploadCondition", "tasksuccess")
            if condition == "tasksuccess" and not success:
                continue
            if condition == "taskfailure" and success:
                continue
            dest = spec["destination"]["container"]
            pattern = spec["filePattern"]
            base = pattern.split("*", 1)[0].rstrip("/")
            for path in sorted(task.workdir.glob(pattern)):
                if not path.is_file():
                    continue
                relative = path.relative_to(task.workdir / base).as_posix()
                container = urlsplit(dest["containerUrl"])
                blob = f"{container.path}/{quote(dest['path'])}/{quote(relative)}"
                url = urlunsplit(container._replace(path=blob))
                put = urllib.request.Request(
                    url,
                    data=path.read_bytes(),
                    method="PUT",
                    headers={"x-ms-blob-type": "BlockBlob"},
                )
                try:
                    with urllib.request.urlopen(put, timeout=10) as answer:
                        status = answer.status
                except OSError as exc:
                    status = getattr(exc, "code", 0) or 0
                task.uploads.append((urlunsplit(container._replace(path=blob, query="")), status))

    def _task_json(self, task: Task) -> dict[str, Any]:
        body = task.body
        info: dict[str, Any] = {"retryCount": 0, "requeueCount": task.requeue_count}
        if task.start is not None:
            info["startTime"] = _stamp(task.start)
        if task.state == "completed":
            info["endTime"] = _stamp(task.end)
            if task.exit_code is not None:
                info["exitCode"] = task.exit_code
            info["result"] = "failure" if task.failure else "success"
            if task.failure:
                info["failureInfo"] = {
                    "category": "usererror",
                    "code": task.failure["code"],
                    "message": task.failure["msg"],
                }
        constraints = {"retentionTime": "P7D", "maxTaskRetryCount": 0}
        constraints.update(body.get("constraints", {}))
        answer: dict[str, Any] = {
            "id": task.id,
            "url": f"{self.url}/jobs/{task.job}/tasks/{task.id}",
            "eTag": f"0x{abs(hash((task.id, task.state, task.runs))):X}",
            "creationTime": _stamp(task.created),
            "state": task.state,
            "stateTransitionTime": _stamp(task.state_time),
            "commandLine": body["commandLine"],
            "constraints": constraints,
            "requiredSlots": 1,
            "executionInfo": info,
        }
        for name in ("displayName", "environmentSettings", "resourceFiles", "outputFiles"):
            if name in body:
                answer[name] = body[name]
        if task.start is not None:
            answer["nodeInfo"] = {
                "poolId": self.jobs[task.job]["poolInfo"]["poolId"],
                "nodeId": self.node_id,
                "taskRootDirectory": f"workitems/{task.job}/job-1/{task.id}",
            }
        return answer

    def _file(
        self, task: Task, name: str, handler: BaseHTTPRequestHandler
    ) -> tuple[int, bytes, dict[str, str]]:
        path = (task.root / name).resolve()
        if not path.is_relative_to(task.root.resolve()) or not path.is_file():
            raise StandInError(404, "FileNotFound", f"no file {name} (yet)")
        data = path.read_bytes()
        wanted = handler.headers.get("ocp-range")
        if wanted:
            found = re.fullmatch(r"bytes=(\d+)-(\d*)", wanted)
            if not found:
                raise self._reject(f"file {name}: bad ocp-range {wanted!r}")
            start = int(found.group(1))
            end = int(found.group(2)) + 1 if found.group(2) else len(data)
            if start >= len(data):
                raise StandInError(416, "InvalidRange", "the range is past the end of the file")
            data = data[start:end]
        return 200, data, {"Content-Type": "application/octet-stream"}


def _signal(process: subprocess.Popen[bytes], sig: int) -> None:
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(process.pid, sig)
