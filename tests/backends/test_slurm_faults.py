"""Issue X1/X3 against the real Slurm cluster: slurmctld stops while jobs are submitted and
while they run. gpupool keeps serving, backs the pool off, and once Slurm is back every job
finishes exactly once."""

from __future__ import annotations

import os
import signal
import subprocess
import time
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest

from support.apikit import Api, make_api

SLURM_ROOT = Path(os.environ.get("GPUPOOL_SLURM_ROOT", "/var/lib/gpupool-slurm"))
UP = Path(__file__).resolve().parents[2] / "scripts" / "slurm" / "up.sh"
POOL = "faults-shared-dev-t4-pool"

CONFIG = """
gpu_types: {{t4: {{}}}}
pools:
  - name: {pool}
    backend: slurm
    gpu_type: t4
    nodes: {nodes}
    node: {{gpus: 2, cpus: 4, memory_gb: 8}}
    options: {{partition: t4, job_name_prefix: "{prefix}", command_timeout_s: 5}}
teams:
  team-a: {{quota: {{t4: {{nominal: 8}}}}, members: {{alice: member}}}}
users:
  alice: {{uid: 0, gid: 0}}
  admin: {{uid: 0, gid: 0, platform_admin: true}}
scheduler: {{cycle_interval_s: 0.2, grace_period_s: 2}}
"""


def stop_slurmctld() -> None:
    pid = int((SLURM_ROOT / "run" / "slurmctld.pid").read_text())
    os.kill(pid, signal.SIGTERM)
    deadline = time.monotonic() + 20
    while time.monotonic() < deadline:
        try:
            os.kill(pid, 0)
        except ProcessLookupError:
            return
        time.sleep(0.1)
    raise AssertionError("slurmctld did not stop")


@pytest.fixture
def api_on_slurm(slurm, tmp_path: Path, request: pytest.FixtureRequest) -> Iterator[Api]:  # type: ignore[no-untyped-def]
    config = tmp_path / "slurm.yaml"
    prefix = f"flt-{uuid.uuid4().hex[:6]}-"
    nodes = getattr(request, "param", 2)
    config.write_text(CONFIG.format(pool=POOL, prefix=prefix, nodes=nodes))
    built = make_api(tmp_path / "home", config)
    try:
        yield built
    finally:
        subprocess.run([str(UP)], capture_output=True, timeout=300)  # never leave it down
        # A failed test may leave jobs waiting forever: cancel this test's jobs by name.
        listed = subprocess.run(["squeue", "-h", "-o", "%i %j"], capture_output=True, text=True)
        ours = [line.split()[0] for line in listed.stdout.splitlines() if prefix in line]
        if ours:
            subprocess.run(["scancel", *ours], capture_output=True)
        built.client.close()
        built.runtime.close()


def submit(api: Api, runs: Path, seconds: float) -> str:
    command = f'echo "$GPUPOOL_JOB_ID.$GPUPOOL_ATTEMPT" >> {runs}; sleep {seconds}'
    job = api.submit("alice", command=["sh", "-c", command], resources={"gpus": 1})
    return str(job["id"])


def pool_available(api: Api) -> bool:
    pools = api.client.get("/v1/pools", headers=api.as_("alice")).json()["items"]
    return bool(next(p for p in pools if p["name"] == POOL)["available"])


def test_slurmctld_down_during_submission_and_while_running(
    api_on_slurm: Api, open_dir: Path
) -> None:
    api = api_on_slurm
    runs = open_dir / "runs"
    running = submit(api, runs, 3)
    api.tick_until(lambda: api.status(running) == "running", timeout=60, what="first job runs")

    stop_slurmctld()
    waiting = submit(api, runs, 0)
    api.tick_until(lambda: not pool_available(api), timeout=60, what="pool marked unavailable")
    assert api.status(waiting) == "admitted"  # kept, waiting for Slurm, not failed
    assert api.status(running) == "running"  # unknown while Slurm is down: not lost
    assert api.client.get("/v1/jobs", headers=api.as_("alice")).status_code == 200

    subprocess.run([str(UP)], check=True, capture_output=True, timeout=300)
    api.tick_until(
        lambda: api.status(running) == "succeeded" and api.status(waiting) == "succeeded",
        timeout=120,
        what="both jobs finish after Slurm returns",
    )
    assert sorted(runs.read_text().split()) == sorted([f"{running}.1", f"{waiting}.1"])
    assert pool_available(api)


@pytest.mark.parametrize("api_on_slurm", [3], indirect=True)
def test_capacity_from_sinfo_limits_what_is_admitted(api_on_slurm: Api, open_dir: Path) -> None:
    """The pool declares 3 nodes; sinfo shows 2 usable: the scheduler plans with 2."""
    api = api_on_slurm
    api.tick_until(lambda: POOL in api.runtime.controller.capacity, what="sinfo was read")
    assert api.runtime.controller.capacity[POOL].nodes == 2
    release = open_dir / "release"
    wait = ["sh", "-c", f"while [ ! -f {release} ]; do sleep 0.1; done"]
    jobs = [api.submit("alice", command=wait, resources={"gpus": 2})["id"] for _ in range(3)]
    api.tick_until(
        lambda: sorted(api.status(j) for j in jobs) == ["queued", "running", "running"],
        timeout=90,
        what="two whole nodes in use, the third job waiting",
    )
    queued = next(j for j in jobs if api.status(j) == "queued")
    why = api.client.get(f"/v1/jobs/{queued}/why", headers=api.as_("alice")).json()
    assert why["reasons"][0]["code"] == "capacity"
    release.touch()
    api.tick_until(
        lambda: all(api.status(j) == "succeeded" for j in jobs), timeout=120, what="all done"
    )
