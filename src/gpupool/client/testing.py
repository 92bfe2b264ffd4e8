"""A fake gpupool API for tests of code that uses the SDK (docs/code-style.md §12: fakes ship with
the code).

``FakeApi`` is a tiny router over ``httpx.MockTransport``: register canned answers (or handler
functions) per ``(method, path)``, hand ``api.transport`` to ``Client(transport=...)``, then
assert on ``api.requests``. Unregistered routes answer 404 ``not_found`` like the real server.
The ``*_json`` builders produce wire payloads shaped as in docs/architecture.md §7, with
overridable fields.

    api = FakeApi()
    api.add("GET", "/v1/jobs/j-1", json=job_json(id="j-1"))
    with Client("http://gpupool.test", "t0k", transport=api.transport) as gp:
        assert gp.job("j-1").id == "j-1"
"""

from __future__ import annotations

import json as jsonlib
from collections.abc import Callable
from typing import Any

import httpx

Handler = Callable[[httpx.Request], httpx.Response]


def error_response(status: int, code: str, message: str, details: Any = None) -> httpx.Response:
    """An error answer exactly as the server writes one."""
    body = {"error": {"code": code, "message": message, "details": details}}
    return httpx.Response(status, json=body)


class FakeApi:
    def __init__(self) -> None:
        self.requests: list[httpx.Request] = []
        self._routes: dict[tuple[str, str], Handler] = {}
        # MockTransport serves both httpx.Client and httpx.AsyncClient.
        self.transport = httpx.MockTransport(self._handle)

    def add(
        self,
        method: str,
        path: str,
        handler: Handler | None = None,
        *,
        json: Any = None,
        status: int = 200,
        headers: dict[str, str] | None = None,
        content: bytes | None = None,
    ) -> None:
        """Answer ``method path`` with ``handler(request)`` or with the given canned answer."""
        if handler is None:

            def handler(request: httpx.Request) -> httpx.Response:
                if content is not None:
                    return httpx.Response(status, content=content, headers=headers)
                return httpx.Response(status, json=json, headers=headers)

        self._routes[(method.upper(), path)] = handler

    def fail(
        self, method: str, path: str, status: int, code: str, message: str, details: Any = None
    ) -> None:
        """Answer ``method path`` with an error body."""
        self.add(method, path, lambda _: error_response(status, code, message, details))

    @property
    def last(self) -> httpx.Request:
        return self.requests[-1]

    def last_json(self) -> Any:
        return jsonlib.loads(self.last.content)

    def _handle(self, request: httpx.Request) -> httpx.Response:
        self.requests.append(request)
        handler = self._routes.get((request.method, request.url.path))
        if handler is None:
            return error_response(404, "not_found", f"no route {request.method} {request.url.path}")
        return handler(request)


def job_json(**overrides: Any) -> dict[str, Any]:
    job: dict[str, Any] = {
        "id": "j-0001",
        "name": "train-1",
        "team": "team-a",
        "user": "alice",
        "status": "queued",
        "priority_class": "training",
        "priority": 100,
        "kind": "training",
        "backend": "auto",
        "command": ["python", "train.py"],
        "env": {},
        "resources": {"gpus": 1, "gpu_types": ["h100"], "nodes": 1, "cpus": 4, "memory_gb": 16},
        "max_runtime_s": None,
        "inputs": [],
        "outputs": [],
        "submitted_at": "2024-05-01T12:00:00Z",
        "started_at": None,
        "finished_at": None,
        "attempt": 0,
        "pool": None,
        "gpu_type": None,
        "exit_code": None,
        "message": "",
    }
    job.update(overrides)
    return job


def array_json(**overrides: Any) -> dict[str, Any]:
    array: dict[str, Any] = {
        "id": "a-000000000001",
        "name": "sweep",
        "team": "team-a",
        "user": "alice",
        "count": 1000,
        "first_index": 0,
        "last_index": 999,
        "submitted_at": "2024-05-01T12:00:00Z",
        "counts": {"queued": 1000},
    }
    array.update(overrides)
    return array


def attempt_json(**overrides: Any) -> dict[str, Any]:
    attempt: dict[str, Any] = {
        "number": 1,
        "status": "running",
        "pool": "local-h100",
        "gpu_type": "h100",
        "devices": [[0]],
        "started_at": "2024-05-01T12:00:05Z",
        "finished_at": None,
        "exit_code": None,
        "message": "",
    }
    attempt.update(overrides)
    return attempt


def team_json(**overrides: Any) -> dict[str, Any]:
    team: dict[str, Any] = {
        "name": "team-a",
        "cohort": "research",
        "weight": 1.0,
        "quota": {
            "h100": {
                "nominal": 4,
                "borrowing_limit": 2,
                "lending_limit": None,
                "used": 3,
                "borrowed": 0,
            }
        },
        "queued": 1,
        "running": 2,
    }
    team.update(overrides)
    return team


def budget_json(**overrides: Any) -> dict[str, Any]:
    """A ``GET /v1/budgets`` item: team-a's monthly budget, 812 of 1000 GPU-h used."""
    budget: dict[str, Any] = {
        "team": "team-a",
        "name": "monthly",
        "period": "month",
        "period_label": "June 2027",
        "period_start": "2027-06-01T00:00:00+00:00",
        "period_end": "2027-07-01T00:00:00+00:00",
        "gpu_type": None,
        "unit": "GPU-h",
        "used": 812.0,
        "limit": 1000.0,
        "remaining": 188.0,
        "percent": 81.2,
        "status": "warning",
        "enforcement": "hold",
        "enforced": False,
        "thresholds": [50.0, 80.0, 100.0],
        "reached": [50.0, 80.0],
    }
    budget.update(overrides)
    return budget


def pool_json(**overrides: Any) -> dict[str, Any]:
    pool: dict[str, Any] = {
        "name": "local-h100",
        "backend": "local",
        "gpu_type": "h100",
        "nodes": 2,
        "gpus_per_node": 4,
        "gpus_total": 8,
        "gpus_allocated": 3,
        "dedicated_to": None,
        "available": True,
        "message": "",
    }
    pool.update(overrides)
    return pool


def why_json(**overrides: Any) -> dict[str, Any]:
    why: dict[str, Any] = {
        "job_id": "j-0001",
        "status": "queued",
        "last_considered_at": "2024-05-01T12:00:10Z",
        "summary": "no gpu type can admit the job now",
        "reasons": [
            {"gpu_type": "h100", "code": "quota_exhausted", "message": "team-a uses 4/4 h100"},
            {"gpu_type": "t4", "code": "no_capacity", "message": "0 of 8 t4 free"},
        ],
    }
    why.update(overrides)
    return why


def whoami_json(**overrides: Any) -> dict[str, Any]:
    who: dict[str, Any] = {
        "user": "alice",
        "platform_admin": False,
        "teams": {"team-a": "admin", "team-b": "member"},
    }
    who.update(overrides)
    return who
