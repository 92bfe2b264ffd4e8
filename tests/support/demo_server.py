"""A real ``gpupool server`` on the demo configuration, for attacks on the API server itself.

The API attacks (log followers, slow clients, big bodies, tampered cursors) need no Unix
users: the demo configuration's numeric uids do. As root, jobs run under those uids as the
attacked set-up had them; as another user they run as that user, which these tests do not
depend on. ``env`` sets ``GPUPOOL_*`` limits of the server; ``preexec`` runs in the server
process before it starts (to lower a resource limit, say).
"""

from __future__ import annotations

import shutil
import tempfile
import time
from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import httpx

from support.server import ServerProcess

DEMO = Path(__file__).resolve().parents[2] / "examples" / "demo.yaml"
TERMINAL = frozenset({"succeeded", "failed", "cancelled", "lost"})


@contextmanager
def demo_server(
    env: Mapping[str, str] | None = None, preexec: Callable[[], None] | None = None
) -> Iterator[ServerProcess]:
    base = Path(tempfile.mkdtemp(prefix="gpupool-api-"))
    base.chmod(0o755)  # jobs run as the demo's uids when the tests run as root
    server = ServerProcess(base / "home", DEMO, env=env, preexec=preexec)
    try:
        server.start(timeout=60)
        yield server
    finally:
        server.stop()
        shutil.rmtree(base, ignore_errors=True)


def submit(client: httpx.Client, command: list[str], **fields: Any) -> str:
    body = {"command": command, "resources": {"gpu_types": ["h100"]}, **fields}
    reply = client.post("/v1/jobs", json=body)
    assert reply.status_code == 201, reply.text
    return str(reply.json()["id"])


def wait_status(
    client: httpx.Client, job_id: str, want: frozenset[str], timeout: float = 60.0
) -> dict[str, Any]:
    deadline = time.monotonic() + timeout
    while True:
        job: dict[str, Any] = client.get(f"/v1/jobs/{job_id}").json()
        if job["status"] in want:
            return job
        assert time.monotonic() < deadline, f"job {job_id} still {job['status']}"
        time.sleep(0.1)
