"""Build the scheduler's :class:`Snapshot` from the configuration and store rows.

Capacity is derived from the active attempts (admitted or running): each holds the devices,
cpus and memory recorded in its placements, so node usage and team usage come from one
source and cannot disagree.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Sequence

from gpupool.scheduler import (
    NodeView,
    PendingJob,
    Placement,
    Policy,
    PoolView,
    QuotaView,
    RunningJob,
    Snapshot,
    TeamView,
)
from gpupool.spec.models import ClusterConfig
from gpupool.state.models import AttemptRow, JobRow


def node_name(pool: str, index: int) -> str:
    return f"{pool}-{index}"


def placements_of(attempt: AttemptRow) -> tuple[Placement, ...]:
    return tuple(
        Placement(node=str(p["node"]), devices=tuple(int(d) for d in p["devices"]))
        for p in attempt.placements
    )


def build_snapshot(
    config: ClusterConfig,
    now: float,
    queued: Sequence[JobRow],
    active: Sequence[tuple[JobRow, AttemptRow]],
) -> Snapshot:
    used_devices: dict[str, set[int]] = defaultdict(set)
    used_cpus: dict[str, float] = defaultdict(float)
    used_memory: dict[str, float] = defaultdict(float)
    running = []
    for job, attempt in active:
        placements = placements_of(attempt)
        for placement in placements:
            used_devices[placement.node].update(placement.devices)
            used_cpus[placement.node] += job.cpus
            used_memory[placement.node] += job.memory_gb
        running.append(
            RunningJob(
                id=job.id,
                team=job.team,
                priority=job.priority,
                gpu_type=attempt.gpu_type,
                pool=attempt.pool,
                placements=placements,
                cpus=job.cpus,
                memory_gb=job.memory_gb,
                started_at=attempt.admitted_at.timestamp(),
            )
        )
    pools = tuple(
        PoolView(
            name=pool.name,
            gpu_type=pool.gpu_type,
            backend=pool.backend,
            dedicated_to=pool.dedicated_to,
            nodes=tuple(
                NodeView(
                    name=(name := node_name(pool.name, i)),
                    gpus=pool.node.gpus,
                    cpus=pool.node.cpus,
                    memory_gb=pool.node.memory_gb,
                    used_devices=frozenset(used_devices.get(name, ())),
                    used_cpus=used_cpus.get(name, 0.0),
                    used_memory_gb=used_memory.get(name, 0.0),
                )
                for i in range(pool.nodes)
            ),
        )
        for pool in config.pools
    )
    teams = {
        name: TeamView(
            name=name,
            cohort=team.cohort,
            weight=team.weight,
            quota={
                gpu_type: QuotaView(q.nominal, q.borrowing_limit, q.lending_limit)
                for gpu_type, q in team.quota.items()
            },
        )
        for name, team in config.teams.items()
    }
    pending = tuple(
        PendingJob(
            id=job.id,
            team=job.team,
            priority=job.priority,
            submitted_at=job.submitted_at.timestamp(),
            gpus=job.gpus,
            nodes=job.nodes,
            cpus=job.cpus,
            memory_gb=job.memory_gb,
            gpu_types=tuple(job.gpu_types),
        )
        for job in queued
        if job.team in teams
    )
    return Snapshot(now=now, pools=pools, teams=teams, running=tuple(running), pending=pending)


def policy_for(config: ClusterConfig) -> Policy:
    return Policy(gpu_type_order=tuple(config.gpu_type_order()))
