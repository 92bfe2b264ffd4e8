"""Builders for named scheduler cases: nodes, pools, teams, running and pending jobs, and the
:class:`Case` checker. Running jobs sit on real nodes: :func:`occupied` derives each node's
``used_*`` from the jobs placed on it, so a victim frees exactly the room it holds."""

from __future__ import annotations

from dataclasses import dataclass, field, replace

from gpupool.scheduler import (
    CycleResult,
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
from gpupool.scheduler.snapshot import ReasonCode


def node(name: str, gpus: int = 4, *, cpus: float = 32, memory_gb: float = 256) -> NodeView:
    return NodeView(name, gpus, cpus, memory_gb)


def pool(
    name: str,
    gpu_type: str,
    *nodes: NodeView,
    dedicated_to: str | None = None,
    backend: str = "local",
    gang: bool = True,
) -> PoolView:
    return PoolView(name, gpu_type, backend, tuple(nodes), dedicated_to, gang)


def team(
    name: str,
    cohort: str | None = None,
    *,
    weight: float = 1.0,
    history: float = 0.0,
    **quotas: QuotaView,
) -> TeamView:
    return TeamView(name, cohort, weight, dict(quotas), history)


def quota(nominal: int, borrow: int | None = None, lend: int | None = None) -> QuotaView:
    return QuotaView(nominal, borrow, lend)


def run(
    job_id: str,
    team_name: str,
    on: str,
    devices: tuple[int, ...],
    *,
    pool_name: str = "h100-a",
    gpu_type: str = "h100",
    priority: int = 0,
    started: float = 0.0,
    terminating: bool = False,
    ends_by: float | None = None,
    preempted: int = 0,
) -> RunningJob:
    return RunningJob(
        job_id,
        team_name,
        priority,
        gpu_type,
        pool_name,
        (Placement(on, devices),),
        started_at=started,
        terminating=terminating,
        ends_by=ends_by,
        preemptions=preempted,
    )


def job(
    job_id: str,
    team_name: str,
    gpus: int = 1,
    *,
    nodes: int = 1,
    priority: int = 0,
    at: float = 0.0,
    types: tuple[str, ...] = (),
    runtime: float | None = None,
    requeued_at: float | None = None,
    backend: str | None = None,
) -> PendingJob:
    return PendingJob(
        job_id,
        team_name,
        priority,
        at,
        gpus,
        nodes,
        0.0,
        0.0,
        types,
        runtime,
        requeued_at,
        backend,
    )


def occupied(pools: tuple[PoolView, ...], running: tuple[RunningJob, ...]) -> tuple[PoolView, ...]:
    """The pools with every node's ``used_*`` taken from the running jobs placed on it."""
    out = []
    for p in pools:
        nodes = []
        for n in p.nodes:
            devices: set[int] = set()
            cpus = memory = 0.0
            for r in running:
                for placement in r.placements:
                    if r.pool == p.name and placement.node == n.name:
                        devices |= set(placement.devices)
                        cpus += r.cpus
                        memory += r.memory_gb
            nodes.append(replace(n, used_devices=frozenset(devices), used_cpus=cpus))
        out.append(replace(p, nodes=tuple(nodes)))
    return tuple(out)


@dataclass(frozen=True)
class Case:
    pools: tuple[PoolView, ...]
    teams: tuple[TeamView, ...]
    pending: tuple[PendingJob, ...]
    running: tuple[RunningJob, ...] = ()
    policy: Policy = field(default_factory=Policy)
    now: float = 100.0
    want_admitted: dict[str, dict[str, tuple[int, ...]]] = field(default_factory=dict)
    want_preempted: dict[str, str] = field(default_factory=dict)  # victim -> preemptor
    want_pending: dict[str, set[ReasonCode]] = field(default_factory=dict)

    def snapshot(self) -> Snapshot:
        return Snapshot(
            now=self.now,
            pools=occupied(self.pools, self.running),
            teams={t.name: t for t in self.teams},
            running=self.running,
            pending=self.pending,
        )


def check(case: Case, result: CycleResult) -> None:
    got_admitted = {a.job_id: {p.node: p.devices for p in a.placements} for a in result.admissions}
    assert got_admitted == case.want_admitted
    assert {p.job_id: p.preemptor_id for p in result.preemptions} == case.want_preempted
    assert len(result.preemptions) == len({p.job_id for p in result.preemptions})
    got_pending = {job_id: {r.code for r in reasons} for job_id, reasons in result.pending.items()}
    assert got_pending == case.want_pending
