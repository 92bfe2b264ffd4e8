"""A server whose API is served by several processes (``--api-workers``), on SQLite: both
processes answer on the one port, a job submitted through either starts at once (the worker
wakes the parent's controller; its cycle here is 30 s), a killed worker is replaced, and the
workers end with the server."""

from __future__ import annotations

import os
import re
import signal
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from support.server import ServerProcess, wait_for

pytestmark = pytest.mark.slow

WORKER = re.compile(r"API worker (\d+) started")
NOBODY = 65534
# Its cycle runs every 30 s: a job that starts sooner was started by a wake.
CONFIG = """
gpu_types: {cpu: {}}
pools:
  - {name: workers-cpu-pool, backend: local, gpu_type: cpu, nodes: 1,
     node: {gpus: 0, cpus: 64, memory_gb: 256}}
teams:
  runners: {members: {alice: member}, quota: {cpu: {cpus: 64}}}
users:
  alice: {uid: UID, gid: UID}
scheduler: {cycle_interval_s: 30}
"""
JOB = {"command": ["true"], "resources": {"gpus": 0, "gpu_types": ["cpu"], "cpus": 1}}


@pytest.fixture
def server(tmp_path: Path) -> Iterator[ServerProcess]:
    path = tmp_path / "cluster.yaml"
    path.write_text(CONFIG.replace("UID", str(os.getuid() or NOBODY)))
    started = ServerProcess(tmp_path / "home", path, env={"GPUPOOL_API_WORKERS": "2"})
    started.start()
    try:
        yield started
    finally:
        started.stop()


def worker_pid(server: ServerProcess) -> int:
    """The newest worker's pid."""
    found = WORKER.findall(server.log.read_text())
    assert found, server.log.read_text()
    return int(found[-1])


def pids_answering(server: ServerProcess, tries: int = 40) -> set[int]:
    """The pids behind /healthz over fresh connections (each may reach either process)."""
    return {httpx.get(f"{server.url}/healthz", timeout=5).json()["pid"] for _ in range(tries)}


def alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    return True


def test_both_processes_serve_and_every_submit_starts_at_once(server: ServerProcess) -> None:
    assert server.proc is not None
    worker = worker_pid(server)
    wait_for(
        lambda: pids_answering(server) == {server.proc.pid, worker},  # type: ignore[union-attr]
        what="both processes to answer on the port",
    )
    headers = {"Authorization": f"Bearer {server.tokens['alice']}"}
    ids = []
    with server.client("alice") as alice:
        # One at a time, each on a fresh connection (either process may take it): each must
        # start within seconds, so one that went through the worker woke the controller.
        for _ in range(12):
            response = httpx.post(f"{server.url}/v1/jobs", json=JOB, headers=headers, timeout=10)
            assert response.status_code == 201, response.text
            job = response.json()["id"]
            ids.append(job)
            wait_for(
                lambda job=job: alice.get(f"/v1/jobs/{job}").json()["status"] != "queued",
                timeout=8,
                what=f"{job} to start well before the 30 s cycle (a wake from its process)",
            )
        listed = alice.get("/v1/jobs", params={"limit": 100}).json()["items"]
    assert sorted(j["id"] for j in listed) == sorted(ids)  # each submit stored once


def test_a_killed_worker_is_replaced_and_workers_end_with_the_server(
    server: ServerProcess,
) -> None:
    assert server.proc is not None
    first = worker_pid(server)
    os.kill(first, signal.SIGKILL)
    wait_for(lambda: worker_pid(server) != first, what="the parent to start a new worker")
    second = worker_pid(server)
    wait_for(lambda: second in pids_answering(server), what="the new worker to answer on the port")
    server.stop()
    wait_for(lambda: not alive(second), timeout=15, what="the worker to end with its server")
