"""Attack M1 of issue 10: GPU-less jobs must not bypass quota.

A job with ``gpus: 0`` needs none of its team's GPU quota, and ``cpus: 0.001`` fits a node a
thousand times over. On the demo configuration such jobs from alice (team-a, whose h100 quota is
2 GPUs) all ran at once: 100 of them. Now each team's GPU-less work on a gpu type is capped by
its quota there (default: its nominal share of the type's CPUs and memory), each node counting at
least one CPU. For team-a on the demo: h100 nominal 2 and t4 nominal 2, 4 CPUs per GPU on both
pools, so 8 + 8 CPUs, at most 16 such jobs at once.

A real server on ``examples/demo.yaml`` (no real Unix users needed: as root, jobs run under the
configured uids, which need not exist). Fails before the fix: all 100 jobs start at once.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from support.server import ServerProcess, wait_for

pytestmark = pytest.mark.slow

JOBS = 100
BOUND = 16  # team-a: (2 h100 + 2 t4) x 4 CPUs per GPU, one CPU counted per job
ACTIVE = {"admitted", "running"}


@pytest.fixture
def server(tmp_path: Path, demo_path: Path) -> Iterator[ServerProcess]:
    started = ServerProcess(tmp_path / "home", demo_path)
    started.start()
    try:
        yield started
    finally:
        started.stop()


def statuses(client: httpx.Client) -> dict[str, str]:
    page = client.get("/v1/jobs", params={"team": "team-a", "limit": 500})
    page.raise_for_status()
    return {job["id"]: job["status"] for job in page.json()["items"]}


def active(client: httpx.Client) -> int:
    return sum(status in ACTIVE for status in statuses(client).values())


def test_gpuless_jobs_are_bounded_by_the_teams_quota(server: ServerProcess) -> None:
    with server.client("alice") as alice:
        body = {"command": ["sleep", "20"], "resources": {"gpus": 0, "cpus": 0.001}}
        ids = []
        try:
            for _ in range(JOBS):
                response = alice.post("/v1/jobs", json=body)
                assert response.status_code == 201, response.text
                ids.append(response.json()["id"])
            wait_for(lambda: active(alice) >= BOUND, timeout=20, what=f"{BOUND} jobs to start")
            most = 0
            deadline = time.monotonic() + 4  # several cycles (0.5 s each) after the first
            while time.monotonic() < deadline:
                most = max(most, active(alice))
                time.sleep(0.1)
            assert most == BOUND, f"{most} GPU-less jobs of team-a ran at once, bound {BOUND}"

            now = statuses(alice)
            waiting = [job for job, status in now.items() if status == "queued"]
            assert (len(waiting), active(alice)) == (JOBS - BOUND, BOUND), now
            why = alice.get(f"/v1/jobs/{waiting[0]}/why").json()
            reasons = {r["gpu_type"]: (r["code"], r["message"]) for r in why["reasons"]}
            assert set(reasons) == {"h100", "t4"}
            for gpu_type, (code, message) in reasons.items():
                assert code == "quota"
                assert message.startswith(
                    f"team-a's limit for GPU-less jobs on {gpu_type} (8 CPUs and 32 GB memory"
                ), message
                assert "8 of 8 CPUs in use" in message
        finally:
            for job in ids:
                alice.post(f"/v1/jobs/{job}/cancel")
            wait_for(lambda: active(alice) == 0, timeout=30, what="the jobs to end")
