"""Invariants of run_cycle over random clusters (hypothesis), checked by independent replay.

The checker here recomputes capacity and quota from the snapshot and the admissions alone, with
the formulas of DESIGN §5.3-5.4, rather than reusing the scheduler's working copy.
"""

from __future__ import annotations

from dataclasses import replace

from hypothesis import given, settings
from hypothesis import strategies as st

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
    held_gpus,
    run_cycle,
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
policies = st.builds(
    Policy,
    st.sampled_from([(), ("t4", "h100"), ("h100", "a100", "t4")]),
    st.none() | st.integers(0, 6),
    preemption_budget=st.just(0),
)


def check_capacity(snapshot: Snapshot, result: CycleResult) -> None:
    """Never more devices, cpus or memory than a node has; no device given twice."""
    pools = {p.name: p for p in snapshot.pools}
    jobs = {j.id: j for j in snapshot.pending}
    taken = {(p.name, n.name): set(n.used_devices) for p in snapshot.pools for n in p.nodes}
    cpus = {(p.name, n.name): n.used_cpus for p in snapshot.pools for n in p.nodes}
    memory = {(p.name, n.name): n.used_memory_gb for p in snapshot.pools for n in p.nodes}
    for admission in result.admissions:
        job, pool = jobs[admission.job_id], pools[admission.pool]
        assert pool.gpu_type == admission.gpu_type
        assert pool.dedicated_to in (None, job.team)
        assert not job.gpu_types or admission.gpu_type in job.gpu_types
        assert len(admission.placements) == job.nodes
        assert len({p.node for p in admission.placements}) == job.nodes
        sizes = {n.name: n for n in pool.nodes}
        for placement in admission.placements:
            key, node = (pool.name, placement.node), sizes[placement.node]
            assert len(placement.devices) == job.gpus
            assert all(0 <= d < node.gpus for d in placement.devices)
            assert not taken[key] & set(placement.devices)
            assert len(set(placement.devices)) == len(placement.devices)
            taken[key] |= set(placement.devices)
            cpus[key] += job.cpus
            memory[key] += job.memory_gb
            assert cpus[key] <= node.cpus + 1e-6
            assert memory[key] <= node.memory_gb + 1e-6


def check_quota(snapshot: Snapshot, result: CycleResult) -> None:
    """Never beyond nominal + borrowing limit; borrowing only via a cohort with idle quota.

    Cohort invariant after every borrowing admission (per cohort and gpu type):
    ``Σ_T max(0, used_T - nominal_T) <= Σ_U min(max(0, nominal_U - used_U), lending_limit_U)``,
    i.e. the borrowed GPUs can be attributed to lenders without any lending beyond its limit.
    """
    used: dict[tuple[str, str], int] = {}
    for r in snapshot.running:
        used[(r.team, r.gpu_type)] = used.get((r.team, r.gpu_type), 0) + r.gpus
    jobs = {j.id: j for j in snapshot.pending}

    def quota(team: str, gpu_type: str) -> QuotaView:
        view = snapshot.teams.get(team)
        return (view.quota.get(gpu_type) if view else None) or QuotaView()

    def cohort_sums(cohort: str, gpu_type: str) -> tuple[int, int]:
        borrowed = lendable = 0
        for name, view in snapshot.teams.items():
            if view.cohort != cohort:
                continue
            q, u = quota(name, gpu_type), used.get((name, gpu_type), 0)
            borrowed += max(0, u - q.nominal)
            unused = max(0, q.nominal - u)
            lendable += unused if q.lending_limit is None else min(unused, q.lending_limit)
        return borrowed, lendable

    for admission in result.admissions:
        job = jobs[admission.job_id]
        key = (job.team, admission.gpu_type)
        q = quota(*key)
        before = used.get(key, 0)
        after = used[key] = before + job.total_gpus
        assert admission.borrowed == max(0, after - q.nominal) - max(0, before - q.nominal)
        if admission.borrowed:
            team = snapshot.teams[job.team]
            assert team.cohort is not None
            if q.borrowing_limit is not None:
                assert after <= q.nominal + q.borrowing_limit
            borrowed, lendable = cohort_sums(team.cohort, admission.gpu_type)
            assert borrowed <= lendable


def check_complete(snapshot: Snapshot, policy: Policy, result: CycleResult) -> None:
    admitted = [a.job_id for a in result.admissions]
    assert len(admitted) == len(set(admitted))
    assert not set(admitted) & set(result.pending)
    assert all(result.pending.values())
    if policy.max_admissions is None:
        assert set(admitted) | set(result.pending) == {j.id for j in snapshot.pending}
    else:
        assert len(admitted) <= policy.max_admissions


any_snapshot = st.one_of(snapshots(), snapshots(roomy=True))


@settings(max_examples=100, deadline=None)
@given(snapshot=any_snapshot, policy=policies)
def test_cycle_invariants(snapshot: Snapshot, policy: Policy) -> None:
    result = run_cycle(snapshot, policy)
    check_capacity(snapshot, result)
    check_quota(snapshot, result)
    check_complete(snapshot, policy, result)


@settings(max_examples=100, deadline=None)
@given(snapshot=any_snapshot, policy=policies, data=st.data())
def test_same_input_same_output(snapshot: Snapshot, policy: Policy, data: st.DataObject) -> None:
    """Deterministic, and blind to the order the snapshot lists things in."""
    result = run_cycle(snapshot, policy)
    assert run_cycle(snapshot, policy) == result
    reordered = replace(
        snapshot,
        pools=tuple(
            replace(p, nodes=tuple(data.draw(st.permutations(p.nodes))))
            for p in data.draw(st.permutations(snapshot.pools))
        ),
        teams=dict(data.draw(st.permutations(list(snapshot.teams.items())))),
        running=tuple(data.draw(st.permutations(snapshot.running))),
        pending=tuple(data.draw(st.permutations(snapshot.pending))),
    )
    assert run_cycle(reordered, policy) == result


@settings(max_examples=100, deadline=None)
@given(snapshot=any_snapshot, policy=policies)
def test_usage_handed_over_decides_as_usage_summed(snapshot: Snapshot, policy: Policy) -> None:
    """A builder's ``usage`` (held_gpus of running) changes nothing but who sums it."""
    handed = replace(snapshot, usage=held_gpus(snapshot.running))
    assert run_cycle(handed, policy) == run_cycle(snapshot, policy)


def test_held_gpus_counts_every_running_job_terminating_ones_too() -> None:
    def job(job_id: str, team: str, gpu_type: str, gpus: int, ending: bool = False) -> RunningJob:
        placement = Placement("n1", tuple(range(gpus)))
        return RunningJob(job_id, team, 0, gpu_type, "p", (placement,), terminating=ending)

    running = [
        job("r1", "team-a", "h100", 2),
        job("r2", "team-a", "h100", 4, ending=True),
        job("r3", "team-a", "t4", 1),
        job("r4", "team-b", "h100", 8),
    ]
    assert held_gpus(running) == {"team-a": {"h100": 6, "t4": 1}, "team-b": {"h100": 8}}


@settings(max_examples=100, deadline=None)
@given(snapshot=any_snapshot)
def test_nothing_more_fits_after_applying_the_cycle(snapshot: Snapshot) -> None:
    """Room and idle quota only shrink within a cycle, so a second cycle admits nothing new.

    Without preemption: a preemptor's claims and held room are recomputed in the second cycle's
    head order, which may differ (see test_scheduler_preemption_properties for preemption)."""
    policy = Policy(preemption_budget=0)
    result = run_cycle(snapshot, policy)
    # Apply the admissions as the controller would and run again: nothing moves backwards.
    jobs = {j.id: j for j in snapshot.pending}
    pools = []
    for p in snapshot.pools:
        nodes = []
        for n in p.nodes:
            devices, cpus, memory = set(n.used_devices), n.used_cpus, n.used_memory_gb
            for a in result.admissions:
                for placement in a.placements:
                    if a.pool == p.name and placement.node == n.name:
                        devices |= set(placement.devices)
                        cpus += jobs[a.job_id].cpus
                        memory += jobs[a.job_id].memory_gb
            nodes.append(
                replace(n, used_devices=frozenset(devices), used_cpus=cpus, used_memory_gb=memory)
            )
        pools.append(replace(p, nodes=tuple(nodes)))
    admitted = {a.job_id for a in result.admissions}
    running = snapshot.running + tuple(
        RunningJob(a.job_id, jobs[a.job_id].team, 0, a.gpu_type, a.pool, a.placements)
        for a in result.admissions
    )
    pending = tuple(j for j in snapshot.pending if j.id not in admitted)
    again = run_cycle(
        replace(snapshot, pools=tuple(pools), running=running, pending=pending), policy
    )
    # Best-effort FIFO already gave every job its chance: nothing new fits.
    assert again.admissions == ()
