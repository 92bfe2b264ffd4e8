"""Spot eviction (R5) against the real Slurm cluster: the node a job runs on is set DOWN (and
kept out with a drain, as a provider that took it back would); Slurm ends the job NODE_FAIL,
gpupool requeues it as a new attempt with status ``evicted`` (not a failure, not lost), and it
reruns on the other node. The eviction is in the ledger and in the Prometheus counter."""

from __future__ import annotations

import subprocess
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest
from prometheus_client import CollectorRegistry
from sqlalchemy import select

from gpupool.server.metrics.recorder import Recorder
from gpupool.state.models import AttemptRow, UsageRow
from support.apikit import Api, make_api

POOL = "evict-shared-dev-t4-pool"
CONFIG = """
gpu_types: {{t4: {{price_per_gpu_hour: 0.35, spot_price_per_gpu_hour: 0.10}}}}
pools:
  - name: {pool}
    backend: slurm
    gpu_type: t4
    nodes: 2
    node: {{gpus: 2, cpus: 4, memory_gb: 8}}
    autoscale: {{node_type: spot}}
    options: {{partition: t4, job_name_prefix: "{prefix}", command_timeout_s: 5}}
teams:
  team-a: {{quota: {{t4: {{nominal: 4}}}}, members: {{alice: member}}}}
users:
  alice: {{uid: 0, gid: 0}}
  admin: {{uid: 0, gid: 0, platform_admin: true}}
scheduler: {{cycle_interval_s: 0.2, grace_period_s: 2}}
"""


def scontrol_node(node: str, state: str) -> None:
    subprocess.run(
        ["scontrol", "update", f"nodename={node}", f"state={state}", "reason=gpupool-eviction"],
        check=True,
        capture_output=True,
    )


def slurm_node_of(prefix: str) -> str:
    """The node of this test's running Slurm job ('' while none runs)."""
    listed = subprocess.run(
        ["squeue", "-h", "-t", "RUNNING", "-o", "%j %N"], capture_output=True, text=True
    )
    found = [line.split()[1] for line in listed.stdout.splitlines() if line.startswith(prefix)]
    return found[0] if found else ""


@pytest.fixture
def api_on_slurm(slurm, tmp_path: Path) -> Iterator[tuple[Api, str]]:  # type: ignore[no-untyped-def]
    config = tmp_path / "slurm.yaml"
    prefix = f"evc-{uuid.uuid4().hex[:6]}-"
    config.write_text(CONFIG.format(pool=POOL, prefix=prefix))
    built = make_api(tmp_path / "home", config)
    try:
        yield built, prefix
    finally:
        listed = subprocess.run(["squeue", "-h", "-o", "%i %j"], capture_output=True, text=True)
        ours = [line.split()[0] for line in listed.stdout.splitlines() if prefix in line]
        if ours:
            subprocess.run(["scancel", *ours], capture_output=True)
        built.client.close()
        built.runtime.close()


def test_a_node_set_down_evicts_the_job_which_reruns_on_the_other_node(
    api_on_slurm: tuple[Api, str], open_dir: Path
) -> None:
    api, prefix = api_on_slurm
    registry = CollectorRegistry()
    api.runtime.controller.observe(Recorder(registry))
    runs = open_dir / "runs"
    # The first attempt waits to be evicted; the second finishes at once.
    script = f'echo "$GPUPOOL_ATTEMPT" >> {runs}; [ "$GPUPOOL_ATTEMPT" = 1 ] && sleep 300; true'
    job = str(api.submit("alice", command=["sh", "-c", script], resources={"gpus": 2})["id"])
    api.tick_until(lambda: api.status(job) == "running", timeout=90, what="the job runs")
    api.tick_until(lambda: runs.exists(), timeout=60, what="the first attempt's command runs")
    api.tick_until(lambda: bool(slurm_node_of(prefix)), timeout=30, what="Slurm names its node")
    node = slurm_node_of(prefix)
    try:
        scontrol_node(node, "down")  # Slurm kills the job: NODE_FAIL
        scontrol_node(node, "drain")  # the provider keeps it (DOWN alone returns to service)
        api.tick_until(
            lambda: api.status(job) == "succeeded", timeout=180, what="the rerun succeeds"
        )
        reran_on = slurm_node_history(prefix)
    finally:
        scontrol_node(node, "resume")
    with api.runtime.sessions() as session:
        attempts = session.scalars(
            select(AttemptRow).where(AttemptRow.job_id == job).order_by(AttemptRow.number)
        ).all()
        outcomes = {row.attempt_id: row.outcome for row in session.scalars(select(UsageRow)).all()}
    assert [a.status for a in attempts] == ["evicted", "succeeded"]
    assert attempts[0].message.startswith("evicted: its node failed (Slurm NODE_FAIL)")
    assert outcomes[attempts[0].id] == "evicted"
    assert reran_on and node not in reran_on
    assert registry.get_sample_value("gpupool_evicted_attempts_total", {"pool": POOL}) == 1.0
    assert runs.read_text().split() == ["1", "2"]


def slurm_node_history(prefix: str) -> set[str]:
    """The nodes this test's Slurm jobs that completed ran on (sacct is not kept here: the
    controller's memory of ended jobs, ``scontrol show job``, is)."""
    listed = subprocess.run(
        ["squeue", "-h", "-t", "all", "-o", "%j %T %N"], capture_output=True, text=True
    )
    return {
        parts[2]
        for line in listed.stdout.splitlines()
        if line.startswith(prefix) and len(parts := line.split()) == 3 and parts[1] == "COMPLETED"
    }
