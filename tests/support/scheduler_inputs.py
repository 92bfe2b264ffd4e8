"""Random scheduler inputs for the hypothesis tests of tests/unit/scheduler.

``snapshots``: small clusters of every kind (with ``plain_policies``, preemption off);
``clusters``: full-ish clusters with mixed priorities and end times (with ``cluster_policies``:
preemption and starvation protection); ``without``: a snapshot after some running jobs ended.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import replace

from hypothesis import strategies as st

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
from gpupool.scheduler.snapshot import (
    BorrowWithinCohort,
    PreemptionPolicy,
    Reclaim,
    WithinTeam,
)

GPU_TYPES = ("h100", "a100", "t4")
TEAMS = ("team-a", "team-b", "team-c", "team-d")


@st.composite
def snapshots(draw: st.DrawFn, roomy: bool = False) -> Snapshot:
    """Random small clusters; ``roomy`` ones (large shared nodes, one cohort) make borrowing
    the usual limit instead of room, so the quota invariants get exercised often."""
    teams: dict[str, TeamView] = {}
    for name in TEAMS[: draw(st.integers(1, len(TEAMS)))]:
        quotas = {
            gpu_type: QuotaView(
                draw(st.sampled_from([0, 0, 1, 2, 4, 8, 16])),
                draw(st.none() | st.integers(0, 6)),
                draw(st.none() | st.integers(0, 6)),
            )
            for gpu_type in draw(st.lists(st.sampled_from(GPU_TYPES), unique=True, min_size=2))
        }
        cohort = "research" if roomy else draw(st.sampled_from([None, "research", "prod"]))
        weight = draw(st.sampled_from([0.5, 1.0, 2.0]))
        teams[name] = TeamView(name, cohort, weight, quotas)
    team_names = sorted(teams)

    pools: list[PoolView] = []
    running: list[RunningJob] = []
    for p in range(draw(st.integers(1, 4))):
        gpu_type = draw(st.sampled_from(GPU_TYPES))
        pool_name = f"{gpu_type}-{p}"
        nodes: list[NodeView] = []
        for n in range(draw(st.integers(1, 4))):
            gpus = 8 if roomy else draw(st.integers(0, 8))
            cpus, memory = (
                (64.0, 512.0)
                if roomy
                else (
                    float(draw(st.integers(1, 16))),
                    float(draw(st.integers(1, 64))),
                )
            )
            used = draw(st.lists(st.integers(0, max(gpus - 1, 0)), unique=True, max_size=gpus))
            used = [d for d in used if d < gpus]
            used_cpus = draw(st.floats(0, cpus, allow_nan=False))
            node_name = f"{pool_name}-n{n}"
            nodes.append(NodeView(node_name, gpus, cpus, memory, frozenset(used), used_cpus))
            if used:
                owner = draw(st.sampled_from(team_names))
                placement = Placement(node_name, tuple(sorted(used)))
                running.append(
                    RunningJob(f"r-{node_name}", owner, 0, gpu_type, pool_name, (placement,))
                )
        dedicated = None if roomy else draw(st.none() | st.none() | st.sampled_from(team_names))
        pools.append(PoolView(pool_name, gpu_type, "local", tuple(nodes), dedicated))

    # Mostly types that have pools, so jobs get past NO_POOL; sometimes one that has none.
    present = sorted({p.gpu_type for p in pools} | {draw(st.sampled_from(GPU_TYPES))})
    pending = [
        PendingJob(
            f"job-{i}",
            draw(st.sampled_from(team_names)),
            draw(st.integers(0, 2)),
            float(draw(st.integers(0, 5))),
            draw(st.integers(0, 4)),
            draw(st.sampled_from([1, 1, 1, 2, 3])),
            float(draw(st.integers(0, 4))),
            float(draw(st.integers(0, 16))),
            tuple(draw(st.permutations(present))[: draw(st.integers(0, 3))]),
        )
        for i in range(draw(st.integers(0, 16)))
    ]
    return Snapshot(0.0, tuple(pools), teams, tuple(running), tuple(pending))


# Preemption off: these checks replay admissions on the snapshot's usage, while a preemption
# claim moves quota to the state after its victims end (test_scheduler_preemption_properties
# checks cycles with preemption).
plain_policies = st.builds(
    Policy,
    st.sampled_from([(), ("t4", "h100"), ("h100", "a100", "t4")]),
    st.none() | st.integers(0, 6),
    preemption_budget=st.just(0),
)


CLUSTER_GPU_TYPES = ("h100", "t4")
CLUSTER_TEAMS = ("team-a", "team-b", "team-c")


@st.composite
def clusters(draw: st.DrawFn) -> Snapshot:
    """Small full-ish clusters whose running jobs have mixed priorities, teams and end times;
    each node's ``used_*`` is exactly what the jobs on it hold."""
    teams = {
        name: TeamView(
            name,
            draw(st.sampled_from(["research", "research", None])),
            draw(st.sampled_from([0.5, 1.0, 2.0])),
            {
                f: QuotaView(
                    draw(st.sampled_from([0, 2, 4, 8])),
                    draw(st.none() | st.integers(0, 8)),
                    draw(st.none() | st.integers(0, 4)),
                )
                for f in CLUSTER_GPU_TYPES
            },
            float(draw(st.integers(0, 3)) * 100),
        )
        for name in CLUSTER_TEAMS[: draw(st.integers(2, 3))]
    }
    names = sorted(teams)
    pools, running = [], []
    for p in range(draw(st.integers(1, 3))):
        f = draw(st.sampled_from(CLUSTER_GPU_TYPES))
        pool_name, nodes = f"{f}-{p}", []
        for n in range(draw(st.integers(1, 3))):
            node_name, gpus = f"{pool_name}-n{n}", draw(st.sampled_from([4, 8]))
            free, used = list(range(gpus)), set()
            for j in range(draw(st.integers(0, 3))):
                size = draw(st.integers(1, 4))
                if size > len(free):
                    break
                devices, free = tuple(free[:size]), free[size:]
                used |= set(devices)
                running.append(
                    RunningJob(
                        f"r-{node_name}-{j}",
                        draw(st.sampled_from(names)),
                        draw(st.integers(0, 3)),
                        f,
                        pool_name,
                        (Placement(node_name, devices),),
                        started_at=float(draw(st.integers(0, 50))),
                        terminating=draw(st.sampled_from([False, False, False, True])),
                        ends_by=draw(st.none() | st.integers(100, 400).map(float)),
                    )
                )
            nodes.append(NodeView(node_name, gpus, 64.0, 512.0, frozenset(used)))
        pools.append(PoolView(pool_name, f, "local", tuple(nodes)))
    pending = [
        PendingJob(
            f"job-{i}",
            draw(st.sampled_from(names)),
            draw(st.integers(0, 4)),
            float(draw(st.integers(0, 99))),
            draw(st.integers(1, 8)),
            draw(st.sampled_from([1, 1, 2])),
            gpu_types=tuple(draw(st.permutations(CLUSTER_GPU_TYPES))[: draw(st.integers(0, 2))]),
            max_runtime_s=draw(st.none() | st.integers(10, 300).map(float)),
        )
        for i in range(draw(st.integers(1, 10)))
    ]
    return Snapshot(100.0, tuple(pools), teams, tuple(running), tuple(pending))


preemption_policies = st.builds(
    PreemptionPolicy,
    st.sampled_from(list(WithinTeam)),
    st.sampled_from(list(Reclaim)),
    st.sampled_from(list(BorrowWithinCohort)),
    st.none() | st.integers(0, 3),
)
cluster_policies = st.builds(
    Policy,
    preemption=st.dictionaries(st.just("research"), preemption_policies),
    default_preemption=preemption_policies,
    preemption_budget=st.none() | st.integers(0, 3),
    starvation_after_s=st.none() | st.just(50.0),
)


def without(snapshot: Snapshot, gone: Iterable[RunningJob]) -> Snapshot:
    """The snapshot after ``gone`` ended: their devices free, their usage gone."""
    gone_ids = {r.id for r in gone}
    freed: dict[tuple[str, str], set[int]] = {}
    for r in snapshot.running:
        if r.id in gone_ids:
            for p in r.placements:
                freed.setdefault((r.pool, p.node), set()).update(p.devices)
    pools = tuple(
        replace(
            p,
            nodes=tuple(
                replace(n, used_devices=n.used_devices - freed.get((p.name, n.name), set()))
                for n in p.nodes
            ),
        )
        for p in snapshot.pools
    )
    running = tuple(r for r in snapshot.running if r.id not in gone_ids)
    return replace(snapshot, pools=pools, running=running)
