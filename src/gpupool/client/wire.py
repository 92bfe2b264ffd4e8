"""Request building and answer parsing shared by ``Client`` and ``AsyncClient``.

Pure functions, no I/O: the two clients differ only in how they send, so everything about
*what* is sent (paths, bodies, query strings, headers) and how answers are read lives here once.
"""

from __future__ import annotations

from datetime import datetime
from typing import Any
from urllib.parse import quote

import httpx

from gpupool import __version__

API = "/v1"
USER_AGENT = f"gpupool-client/{__version__}"


def base_headers(token: str | None) -> dict[str, str]:
    headers = {"User-Agent": USER_AGENT, "Accept": "application/json"}
    if token:
        headers["Authorization"] = f"Bearer {token}"
    return headers


def job_path(job_id: str, action: str = "") -> str:
    # Quote the id so that a hostile or mistyped id ("../teams") cannot address another route.
    path = f"{API}/jobs/{quote(job_id, safe='')}"
    return f"{path}/{action}" if action else path


def array_path(array_id: str, action: str = "") -> str:
    path = f"{API}/arrays/{quote(array_id, safe='')}"
    return f"{path}/{action}" if action else path


# The options of ``submit`` (but its idempotency key) and their defaults, for ``submit_array``.
SUBMIT_DEFAULTS: dict[str, Any] = {
    "team": None,
    "gpus": 1,
    "gpu_types": None,
    "nodes": 1,
    "cpus": None,
    "memory_gb": None,
    "priority_class": None,
    "name": None,
    "kind": None,
    "backend": None,
    "env": None,
    "inputs": None,
    "outputs": None,
    "max_runtime_s": None,
    "checkpoint_interval_s": None,
    "image": None,
    "image_pull_secret": None,
    "container": None,
}


def array_body(array: str, command: list[str], options: dict[str, Any]) -> dict[str, Any]:
    """The body of an array submit: ``options`` are those of ``submit`` (no idempotency key)."""
    if not isinstance(array, str):
        raise TypeError("array must be a string of indices, e.g. '0-999', '0-9:2' or '1,3,5'")
    unknown = sorted(set(options) - set(SUBMIT_DEFAULTS))
    if unknown:
        raise TypeError(f"submit_array() got unexpected options: {', '.join(unknown)}")
    return {**submit_body(command, **{**SUBMIT_DEFAULTS, **options}), "array": array}


def team_path(team: str) -> str:
    return f"{API}/teams/{quote(team, safe='')}"


def drop_none(values: dict[str, Any]) -> dict[str, Any]:
    """Leave unset options out so the server applies its own defaults."""
    return {key: value for key, value in values.items() if value is not None}


def submit_body(
    command: list[str],
    *,
    team: str | None,
    gpus: int,
    gpu_types: list[str] | None,
    nodes: int,
    cpus: float | None,
    memory_gb: float | None,
    priority_class: str | None,
    name: str | None,
    kind: str | None,
    backend: str | None,
    env: dict[str, str] | None,
    inputs: list[str] | None,
    outputs: list[str] | None,
    max_runtime_s: int | None,
    checkpoint_interval_s: int | None = None,
    image: str | None = None,
    image_pull_secret: str | None = None,
    container: dict[str, Any] | None = None,
) -> dict[str, Any]:
    if isinstance(command, str):
        # A bare string would be sent as one argv element and fail on the node; say so now.
        raise TypeError("command must be a list of arguments, e.g. ['python', 'train.py']")
    resources = drop_none(
        {
            "gpus": gpus,
            "gpu_types": list(gpu_types) if gpu_types else None,
            "nodes": nodes,
            "cpus": cpus,
            "memory_gb": memory_gb,
        }
    )
    return drop_none(
        {
            "name": name,
            "team": team,
            "command": list(command),
            "resources": resources,
            "priority_class": priority_class,
            "kind": kind,
            "backend": backend,
            "env": dict(env) if env else None,
            "inputs": list(inputs) if inputs else None,
            "outputs": list(outputs) if outputs else None,
            "max_runtime_s": max_runtime_s,
            "checkpoint_interval_s": checkpoint_interval_s,
            "image": image,
            "image_pull_secret": image_pull_secret,
            "container": dict(container) if container else None,
        }
    )


def submit_headers(idempotency_key: str | None) -> dict[str, str]:
    # The header (not the body field) so that retries of the same body stay byte-identical.
    return {"Idempotency-Key": idempotency_key} if idempotency_key else {}


def jobs_params(
    team: str | None,
    status: str | None,
    limit: int | None,
    cursor: str | None,
    group: bool = False,
    array: str | None = None,
) -> dict[str, Any]:
    return drop_none(
        {
            "team": team,
            "status": status,
            "limit": limit,
            "cursor": cursor,
            "group": "true" if group else None,
            "array": array,
        }
    )


def audit_params(
    *,
    team: str | None,
    actor: str | None,
    action: str | None,
    outcome: str | None,
    since: datetime | None,
    until: datetime | None,
    limit: int | None,
    cursor: str | None,
) -> dict[str, Any]:
    return drop_none(
        {
            "team": team,
            "actor": actor,
            "action": action,
            "outcome": outcome,
            "since": since.isoformat() if since else None,
            "until": until.isoformat() if until else None,
            "limit": limit,
            "cursor": cursor,
        }
    )


def logs_result(response: httpx.Response, offset: int) -> tuple[bytes, int, bool]:
    """``(data, next_offset, complete)`` from a ``GET .../logs`` answer."""
    data = response.content
    header = response.headers.get("X-Next-Offset")
    next_offset = int(header) if header is not None else offset + len(data)
    complete = response.headers.get("X-Log-Complete", "false").lower() == "true"
    return data, next_offset, complete
