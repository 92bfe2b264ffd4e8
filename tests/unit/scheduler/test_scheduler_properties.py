"""Invariants of run_cycle over random clusters (hypothesis), checked by independent replay.

The checker here recomputes capacity and quota from the snapshot and the admissions alone, with
the formulas of docs/architecture.md §5.3-5.4, rather than reusing the scheduler's working copy.
"""

from __future__ import annotations

from dataclasses import replace

from hypothesis import given, settings
from hypothesis import strategies as st

from gpupool.scheduler import (
    CycleResult,
    Placement,
    Policy,
    QuotaView,
    RunningJob,
    Snapshot,
    held_gpus,
    run_cycle,
)
from support.scheduler_inputs import plain_policies, snapshots


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
@given(snapshot=any_snapshot, policy=plain_policies)
def test_cycle_invariants(snapshot: Snapshot, policy: Policy) -> None:
    result = run_cycle(snapshot, policy)
    check_capacity(snapshot, result)
    check_quota(snapshot, result)
    check_complete(snapshot, policy, result)


@settings(max_examples=100, deadline=None)
@given(snapshot=any_snapshot, policy=plain_policies, data=st.data())
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
@given(snapshot=any_snapshot, policy=plain_policies)
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
