"""The Ray head goes away while jobs run and while they are submitted: gpupool keeps serving,
backs the pool off, and after the head returns nothing is lost or run twice per attempt."""

from __future__ import annotations

import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest

from support.apikit import Api, make_api

SCRIPTS = Path(__file__).resolve().parents[2] / "scripts" / "ray"
POOL = "faults-shared-dev-ray-pool"

CONFIG = """
gpu_types: {t4: {}}
pools:
  - name: faults-shared-dev-ray-pool
    backend: ray
    gpu_type: t4
    nodes: 1
    node: {gpus: 2, cpus: 4, memory_gb: 8}
    options: {request_timeout_s: 5}
teams:
  team-a: {quota: {t4: {nominal: 2}}, members: {alice: member}}
users:
  alice: {uid: 0, gid: 0}
  admin: {uid: 0, gid: 0, platform_admin: true}
scheduler: {cycle_interval_s: 0.2, grace_period_s: 2}
"""


@pytest.fixture
def api_on_ray(harness, tmp_path: Path) -> Iterator[Api]:  # type: ignore[no-untyped-def]
    config = tmp_path / "ray.yaml"
    config.write_text(CONFIG)
    built = make_api(tmp_path / "home", config)
    try:
        yield built
    finally:
        subprocess.run([str(SCRIPTS / "up.sh")], capture_output=True, timeout=300)
        built.client.close()
        built.runtime.close()


def pool_available(api: Api) -> bool:
    pools = api.client.get("/v1/pools", headers=api.as_("alice")).json()["items"]
    return bool(next(p for p in pools if p["name"] == POOL)["available"])


@pytest.mark.parametrize("harness", ["ray"], indirect=True)
def test_ray_head_down_then_back(api_on_ray: Api, open_dir: Path) -> None:
    api = api_on_ray
    runs = open_dir / "runs"
    command = ["sh", "-c", f'echo "$GPUPOOL_JOB_ID.$GPUPOOL_ATTEMPT" >> {runs}; sleep 30']
    running = api.submit("alice", command=command, resources={"gpus": 1})["id"]
    api.tick_until(lambda: api.status(running) == "running", timeout=60, what="job runs")

    subprocess.run([str(SCRIPTS / "down.sh")], check=True, capture_output=True, timeout=120)
    quick = ["sh", "-c", f'echo "$GPUPOOL_JOB_ID.$GPUPOOL_ATTEMPT" >> {runs}']
    waiting = api.submit("alice", command=quick, resources={"gpus": 1})["id"]
    api.tick_until(lambda: not pool_available(api), timeout=60, what="pool marked unavailable")
    assert api.status(waiting) == "admitted"  # kept for Ray, not failed
    assert api.client.get("/v1/jobs", headers=api.as_("alice")).status_code == 200

    subprocess.run([str(SCRIPTS / "up.sh")], check=True, capture_output=True, timeout=300)
    api.tick_until(lambda: api.status(waiting) == "succeeded", timeout=120, what="submitted once")
    # The head took its jobs down with it: the running attempt is lost and runs again as
    # attempt 2. No attempt ever runs twice.
    api.tick_until(lambda: api.job("alice", running)["attempt"] == 2, timeout=120, what="retry")
    assert api.job("alice", running)["attempts"][0]["status"] == "lost"
    api.client.post(f"/v1/jobs/{running}/cancel", headers=api.as_("alice"))
    api.tick_until(lambda: api.status(running) == "cancelled", timeout=60, what="cancelled")
    seen = runs.read_text().split()
    assert len(seen) == len(set(seen))
    assert f"{waiting}.1" in seen and f"{running}.1" in seen
