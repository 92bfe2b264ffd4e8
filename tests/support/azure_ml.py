"""A local stand-in for the Azure ML REST operations the Azure ML backend uses, for tests.

There is no Azure here. The adapter runs the real ``azure-ai-ml`` SDK against this HTTPS
server (the SDK sends its bearer token over TLS only; the certificate is
:func:`support.tls.self_signed`, trusted through ``REQUESTS_CA_BUNDLE``). Operations, each
with the ``api-version`` the SDK sends:

    PUT  .../workspaces/{ws}/jobs/{name}                        create a command job
    GET  .../workspaces/{ws}/jobs/{name}                        read it
    POST .../workspaces/{ws}/jobs/{name}/cancel                 cancel it
    PUT  .../workspaces/{ws}/environments/{name}/versions/{v}   an anonymous image environment
    GET  .../workspaces/{ws}                                    the workspace (discovery URL)
    GET  /discovery                                             the workspace's service URLs
    GET  /history/v1.0/.../workspaces/{ws}/runs/{name}/details  run details, log file URLs
    GET  /logs/{name}/std_log.txt?sig=...                       a log file (by SAS, with Range)

Every request is recorded and checked (method, path, ``api-version``, no other query
parameter, a bearer token on every call but discovery and the log file, the body's fields against
:data:`JOB_FIELDS`); anything else is answered 400 and listed in ``rejected``.

Jobs run for real as local processes: the command goes to ``/bin/bash -c`` with
``${{inputs.<n>}}`` replaced by the downloaded input's path and ``${{outputs.<n>}}`` by a
local folder, in ``<root>/<name>/wd``, stdout and stderr to ``user_logs/std_log.txt``.
``limits.timeout`` and cancel send SIGTERM, then SIGKILL after ``kill_grace_s``. Statuses go
``Queued``, ``Running``, then ``Completed``, ``Failed`` (with "exited with status code N" in
the run's error) or ``CancelRequested`` and ``Canceled``. A second create of a name is
answered 409 (the stand-in's choice; the adapter also copes with Azure ML accepting it).
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import signal
import subprocess
import threading
import time
import urllib.request
from dataclasses import dataclass, field
from datetime import UTC, datetime
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any
from urllib.parse import parse_qs, urlsplit

from support.tls import self_signed, server_context

TOKEN = "token-for-the-azure-ml-stand-in"
SUBSCRIPTION = "00000000-0000-0000-0000-000000000001"
GROUP, WORKSPACE = "rg-gpupool", "ws-gpupool"
WS = (
    f"/subscriptions/{SUBSCRIPTION}/resourceGroups/{GROUP}"
    f"/providers/Microsoft.MachineLearningServices/workspaces/{WORKSPACE}"
)
# (method, path regex) -> (operation, api-version); None: no api-version is sent.
OPERATIONS: list[tuple[str, str, str, str | None]] = [
    ("PUT", rf"{WS}/jobs/(?P<name>[^/]+)", "create_job", "2025-01-01-preview"),
    ("GET", rf"{WS}/jobs/(?P<name>[^/]+)", "get_job", "2024-01-01-preview"),
    ("POST", rf"{WS}/jobs/(?P<name>[^/]+)/cancel", "cancel_job", "2023-04-01-preview"),
    (
        "PUT",
        rf"{WS}/environments/(?P<env>[^/]+)/versions/(?P<version>[^/]+)",
        "create_environment",
        "2023-04-01-preview",
    ),
    ("GET", WS, "get_workspace", "2024-10-01-preview"),
    ("GET", "/discovery", "discovery", None),
    ("GET", rf"/history/v1\.0{WS}/runs/(?P<name>[^/]+)/details", "run_details", "v1.0"),
    ("GET", r"/logs/(?P<name>[^/]+)/std_log\.txt", "log_file", None),
]
_IO = {"jobInputType": None, "jobOutputType": None, "uri": None, "mode": None}
JOB_FIELDS: dict[str, Any] = {
    "properties": {
        "jobType": None,
        "displayName": None,
        "command": None,
        "computeId": None,
        "environmentId": None,
        "environmentVariables": "*",
        "experimentName": None,
        "isArchived": None,
        "properties": "*",
        "tags": "*",
        "inputs": {"*": _IO},
        "outputs": {"*": _IO},
        "limits": {"jobLimitsType": None, "timeout": None},
    }
}
ENVIRONMENT_FIELDS: dict[str, Any] = {
    "properties": {"image": None, "isAnonymous": None, "isArchived": None}
}
_DURATION = re.compile(r"PT(?:(\d+)H)?(?:(\d+)M)?(?:(\d+(?:\.\d+)?)S)?\Z")


def unknown_fields(body: Any, allowed: Any, where: str = "") -> list[str]:
    """Paths in ``body`` that ``allowed`` does not list ("*": any keys; {"*": x}: any key,
    each value as ``x``)."""
    if allowed is None or allowed == "*":
        return []
    if not isinstance(body, dict):
        return [where or "<body>"]
    found: list[str] = []
    for key, value in body.items():
        path = f"{where}.{key}" if where else key
        if key in allowed:
            found.extend(unknown_fields(value, allowed[key], path))
        elif "*" in allowed:
            found.extend(unknown_fields(value, allowed["*"], path))
        else:
            found.append(path)
    return found


def _stamp(when: datetime | None) -> str | None:
    return when.isoformat().replace("+00:00", "Z") if when else None


def _seconds(text: str | None) -> float | None:
    if text is None:
        return None
    found = _DURATION.match(text)
    if not found:
        raise ValueError(f"not a duration: {text!r}")
    h, m, s = found.groups()
    return int(h or 0) * 3600 + int(m or 0) * 60 + float(s or 0)


class StandInError(Exception):
    def __init__(self, status: int, code: str, message: str) -> None:
        super().__init__(message)
        self.status, self.code, self.message = status, code, message


@dataclass
class Request:
    method: str
    path: str
    operation: str
    query: dict[str, list[str]]
    body: Any
    status: int = 0


@dataclass
class Job:
    name: str
    body: dict[str, Any]
    root: Path
    created: datetime
    status: str = "Queued"
    start: datetime | None = None
    end: datetime | None = None
    error: str | None = None
    runs: int = 0
    process: subprocess.Popen[bytes] | None = None
    ending: str | None = None
    outputs: dict[str, Path] = field(default_factory=dict)

    @property
    def props(self) -> dict[str, Any]:
        return self.body["properties"]


class AzureMLStandIn:
    """The server; a context manager. ``arm_endpoint`` is what the pool's options name."""

    def __init__(self, root: Path) -> None:
        self.root = root
        self.kill_grace_s = 1.0
        self.requests: list[Request] = []
        self.rejected: list[str] = []
        self.jobs: dict[str, Job] = {}
        self.environments: dict[str, dict[str, Any]] = {}
        self.fail_next: list[tuple[int, str]] = []
        self._sig = "stand-in-sas"
        self._lock = threading.RLock()
        self.cert, key = self_signed(root / "tls")
        self._server = ThreadingHTTPServer(("127.0.0.1", 0), self._handler())
        self._server.daemon_threads = True
        self._server.socket = server_context(self.cert, key).wrap_socket(
            self._server.socket, server_side=True
        )
        self._thread = threading.Thread(target=self._server.serve_forever, daemon=True)

    @property
    def arm_endpoint(self) -> str:
        return f"https://127.0.0.1:{self._server.server_address[1]}"

    def __enter__(self) -> AzureMLStandIn:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def close(self) -> None:
        with self._lock:
            jobs = list(self.jobs.values())
        for job in jobs:
            if job.process is not None and job.process.poll() is None:
                _signal(job.process, signal.SIGKILL)
        self._server.shutdown()
        self._server.server_close()

    def calls(self, operation: str) -> list[Request]:
        return [r for r in self.requests if r.operation == operation]

    # -- HTTP -------------------------------------------------------------------------------

    def _handler(self) -> type[BaseHTTPRequestHandler]:
        stand_in = self

        class Handler(BaseHTTPRequestHandler):
            def do_GET(self) -> None:
                stand_in._serve(self, "GET")

            def do_PUT(self) -> None:
                stand_in._serve(self, "PUT")

            def do_POST(self) -> None:
                stand_in._serve(self, "POST")

            def do_PATCH(self) -> None:  # refused: the adapter uses no PATCH or DELETE
                stand_in._serve(self, "PATCH")

            def do_DELETE(self) -> None:
                stand_in._serve(self, "DELETE")

            def log_message(self, format: str, *args: object) -> None:
                pass

        return Handler

    def _serve(self, handler: BaseHTTPRequestHandler, method: str) -> None:
        parts = urlsplit(handler.path)
        query = parse_qs(parts.query)
        length = int(handler.headers.get("Content-Length") or 0)
        raw = handler.rfile.read(length) if length else b""
        operation, params, version = "unknown", {}, None
        for op_method, pattern, name, api_version in OPERATIONS:
            found = re.fullmatch(pattern, parts.path)
            if op_method == method and found:
                operation, params, version = name, found.groupdict(), api_version
                break
        request = Request(method, parts.path, operation, query, None)
        with self._lock:
            self.requests.append(request)
        headers = {"Content-Type": "application/json"}
        try:
            request.body = json.loads(raw) if raw else None
            self._check(handler, request, version)
            if self.fail_next and operation != "log_file":
                status, code = self.fail_next.pop(0)
                raise StandInError(status, code, f"injected {code}")
            status, payload = self._route(handler, request, params)
            if operation == "log_file":
                headers = {"Content-Type": "application/octet-stream"}
        except StandInError as exc:
            status = exc.status
            payload = json.dumps({"error": {"code": exc.code, "message": exc.message}}).encode()
        except json.JSONDecodeError:
            status, payload = 400, b"{}"
            self.rejected.append(f"{method} {parts.path}: body is not JSON")
        request.status = status
        handler.send_response(status)
        for name, value in headers.items():
            handler.send_header(name, value)
        handler.send_header("Content-Length", str(len(payload)))
        handler.end_headers()
        handler.wfile.write(payload)

    def _reject(self, why: str) -> StandInError:
        self.rejected.append(why)
        return StandInError(400, "BadRequest", why)

    def _check(
        self, handler: BaseHTTPRequestHandler, request: Request, version: str | None
    ) -> None:
        what = f"{request.method} {request.path}"
        if request.operation == "unknown":
            raise self._reject(f"{what}: not an operation of this stand-in")
        allowed = {"api-version"} if version else set()
        if request.operation == "log_file":
            allowed = {"sig"}
        if extra := sorted(set(request.query) - allowed):
            raise self._reject(f"{what}: unexpected query parameters {extra}")
        if version and request.query.get("api-version") != [version]:
            raise self._reject(f"{what}: api-version {request.query.get('api-version')}")
        if request.operation == "log_file":
            if request.query.get("sig") != [self._sig]:
                raise StandInError(403, "AuthorizationFailure", "bad SAS")
        elif request.operation != "discovery" and (
            handler.headers.get("Authorization") != f"Bearer {TOKEN}"
        ):
            raise StandInError(401, "InvalidAuthenticationToken", "no valid bearer token")

    def _route(
        self, handler: BaseHTTPRequestHandler, request: Request, params: dict[str, str]
    ) -> tuple[int, bytes]:
        body = request.body
        with self._lock:
            match request.operation:
                case "create_job":
                    return 201, self._json(self._create(params["name"], body))
                case "get_job":
                    return 200, self._json(self._job_json(self._find(params["name"])))
                case "cancel_job":
                    self._cancel(self._find(params["name"]))
                    return 200, b""
                case "create_environment":
                    if unknown := unknown_fields(body, ENVIRONMENT_FIELDS):
                        raise self._reject(f"create environment: unknown fields {unknown}")
                    key = f"{params['env']}/versions/{params['version']}"
                    self.environments[key] = body
                    answer = {"id": f"{WS}/environments/{key}", "name": params["version"], **body}
                    return 201, self._json(answer)
                case "get_workspace":
                    return 200, self._json(
                        {
                            "id": WS,
                            "name": WORKSPACE,
                            "type": "Microsoft.MachineLearningServices/workspaces",
                            "location": "eastus",
                            "properties": {
                                "discoveryUrl": f"{self.arm_endpoint}/discovery",
                                "workspaceId": "00000000-0000-0000-0000-00000000beef",
                            },
                        }
                    )
                case "discovery":
                    url = self.arm_endpoint
                    return 200, self._json({"api": url, "history": url, "experimentation": url})
                case "run_details":
                    return 200, self._json(self._details(self._find(params["name"])))
                case "log_file":
                    return self._log(self._find(params["name"]), handler)
        raise self._reject(f"{request.method} {request.path}: unhandled")

    @staticmethod
    def _json(value: Any) -> bytes:
        return json.dumps(value).encode()

    def _find(self, name: str) -> Job:
        job = self.jobs.get(name)
        if job is None:
            raise StandInError(404, "UserError", f"job {name} not found")
        return job

    # -- jobs -------------------------------------------------------------------------------

    def _create(self, name: str, body: Any) -> dict[str, Any]:
        if unknown := unknown_fields(body, JOB_FIELDS):
            raise self._reject(f"create job {name}: unknown fields {unknown}")
        props = body.get("properties", {}) if isinstance(body, dict) else {}
        if props.get("jobType") != "Command" or not props.get("command"):
            raise self._reject(f"create job {name}: not a command job with a command")
        if name in self.jobs:
            raise StandInError(409, "UserError", f"a job named {name} already exists")
        try:
            _seconds(props.get("limits", {}).get("timeout"))
        except ValueError as exc:
            raise self._reject(f"create job {name}: {exc}") from exc
        job = Job(name, body, self.root / name, datetime.now(UTC))
        self.jobs[name] = job
        threading.Thread(target=self._run, args=(job,), daemon=True).start()
        return self._job_json(job)

    def _run(self, job: Job) -> None:
        wd = job.root / "wd"
        wd.mkdir(parents=True, exist_ok=True)
        (job.root / "user_logs").mkdir(exist_ok=True)
        command = job.props["command"]
        for name, item in job.props.get("inputs", {}).items():
            local = job.root / "inputs" / name
            local.parent.mkdir(parents=True, exist_ok=True)
            try:
                with urllib.request.urlopen(item["uri"], timeout=10) as got:
                    local.write_bytes(got.read())
            except OSError as exc:
                self._end(job, "Failed", f"input {name} could not be downloaded: {exc}")
                return
            command = command.replace(f"${{{{inputs.{name}}}}}", str(local))
        for name in job.props.get("outputs", {}):
            local = job.root / "outputs" / name
            local.mkdir(parents=True, exist_ok=True)
            job.outputs[name] = local
            command = command.replace(f"${{{{outputs.{name}}}}}", str(local))
        env = {
            "PATH": os.environ.get("PATH", "/usr/bin:/bin"),
            "HOME": str(job.root),
            **job.props.get("environmentVariables", {}),
            "AZUREML_RUN_ID": job.name,
        }
        with self._lock:
            if job.status != "Queued":
                return
            log = open(job.root / "user_logs" / "std_log.txt", "ab")  # noqa: SIM115
            job.process = subprocess.Popen(
                ["/bin/bash", "-c", command],
                cwd=wd,
                env=env,
                stdout=log,
                stderr=subprocess.STDOUT,
                start_new_session=True,
            )
            log.close()
            job.runs += 1
            job.status, job.start = "Running", datetime.now(UTC)
        limit = _seconds(job.props.get("limits", {}).get("timeout"))
        deadline = time.monotonic() + limit if limit else float("inf")
        process = job.process
        while process.poll() is None:
            if time.monotonic() >= deadline and job.ending is None:
                job.ending = "timeout"
                self._stop(process)
            time.sleep(0.02)
        code = process.returncode
        if job.ending == "cancel":
            self._end(job, "Canceled", None)
        elif job.ending == "timeout":
            self._end(job, "Failed", f"The job ran past its timeout of {limit:g} s.")
        elif code == 0:
            self._end(job, "Completed", None)
        else:
            self._end(
                job,
                "Failed",
                f"Execution failed. User process '/bin/bash' exited with status code {code}. "
                "See user_logs/std_log.txt.",
            )

    def _end(self, job: Job, status: str, error: str | None) -> None:
        with self._lock:
            job.status, job.end, job.error = status, datetime.now(UTC), error

    def _stop(self, process: subprocess.Popen[bytes]) -> None:
        _signal(process, signal.SIGTERM)

        def kill() -> None:
            if process.poll() is None:
                _signal(process, signal.SIGKILL)

        timer = threading.Timer(self.kill_grace_s, kill)
        timer.daemon = True
        timer.start()

    def _cancel(self, job: Job) -> None:
        if job.status in ("Completed", "Failed", "Canceled"):
            raise StandInError(400, "UserError", f"job {job.name} has ended")
        if job.status == "Queued":
            job.status = "Canceled"
            job.end = datetime.now(UTC)
            return
        job.status, job.ending = "CancelRequested", "cancel"
        assert job.process is not None
        self._stop(job.process)

    def _job_json(self, job: Job) -> dict[str, Any]:
        props = dict(job.props)
        props["status"] = job.status
        props.setdefault("services", {})
        return {
            "id": f"{WS}/jobs/{job.name}",
            "name": job.name,
            "type": "Microsoft.MachineLearningServices/workspaces/jobs",
            "properties": props,
            "systemData": {"createdAt": _stamp(job.created), "createdBy": "gpupool"},
        }

    def _details(self, job: Job) -> dict[str, Any]:
        details: dict[str, Any] = {
            "runId": job.name,
            "status": job.status,
            "startTimeUtc": _stamp(job.start),
            "endTimeUtc": _stamp(job.end),
            "logFiles": {},
        }
        if (job.root / "user_logs" / "std_log.txt").exists():
            url = f"{self.arm_endpoint}/logs/{job.name}/std_log.txt?sig={self._sig}"
            details["logFiles"] = {"user_logs/std_log.txt": url}
        if job.error:
            details["error"] = {"error": {"code": "UserError", "message": job.error}}
        return details

    def _log(self, job: Job, handler: BaseHTTPRequestHandler) -> tuple[int, bytes]:
        data = (job.root / "user_logs" / "std_log.txt").read_bytes()
        wanted = handler.headers.get("Range")
        if not wanted:
            return 200, data
        found = re.fullmatch(r"bytes=(\d+)-(\d*)", wanted)
        if not found:
            raise self._reject(f"log {job.name}: bad Range {wanted!r}")
        start = int(found.group(1))
        end = int(found.group(2)) + 1 if found.group(2) else len(data)
        if start >= len(data):
            raise StandInError(416, "InvalidRange", "the range is past the end of the file")
        return 206, data[start:end]


def _signal(process: subprocess.Popen[bytes], sig: int) -> None:
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(process.pid, sig)
