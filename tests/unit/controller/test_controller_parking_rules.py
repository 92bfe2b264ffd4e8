"""Parking (gpupool.controller.parking): the controller hands a cycle only the teams whose
decisions may have changed, and gets exactly what a full cycle returns."""

from __future__ import annotations

import itertools
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import replace
from unittest import mock

from hypothesis import given, settings
from hypothesis import strategies as st

from gpupool.controller.parking import Parking, groups_of
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
    run_cycle,
)
from gpupool.scheduler import cycle as cycle_module
from support.scheduler_inputs import cluster_policies, clusters, plain_policies, snapshots, without

SUBMITTED = itertools.count()  # job ids stay unique over a whole sequence
ACTIONS = ("same", "same", "apply", "end", "submit", "submit", "cancel", "later", "reorder")


def grouped(snapshot: Snapshot) -> Snapshot:
    """Pending jobs listed team by team, as the controller's query returns them."""
    return replace(snapshot, pending=tuple(sorted(snapshot.pending, key=lambda j: j.team)))


def applied(snapshot: Snapshot, result: CycleResult) -> Snapshot:
    """The next snapshot when the controller carried ``result`` out: admitted jobs run on their
    placements, victims are signalled."""
    jobs = {job.id: job for job in snapshot.pending}
    victims = {p.job_id for p in result.preemptions}
    running = [replace(r, terminating=True) if r.id in victims else r for r in snapshot.running]
    taken: dict[tuple[str, str], tuple[set[int], float, float]] = {}
    for admission in result.admissions:
        job = jobs[admission.job_id]
        ends_by = None if job.max_runtime_s is None else snapshot.now + job.max_runtime_s
        running.append(
            RunningJob(
                job.id,
                job.team,
                job.priority,
                admission.gpu_type,
                admission.pool,
                admission.placements,
                job.cpus,
                job.memory_gb,
                snapshot.now,
                ends_by=ends_by,
            )
        )
        for placement in admission.placements:
            devices, cpus, memory = taken.get((admission.pool, placement.node), (set(), 0.0, 0.0))
            devices.update(placement.devices)
            taken[(admission.pool, placement.node)] = (
                devices,
                cpus + job.cpus,
                memory + job.memory_gb,
            )
    pools = tuple(
        replace(
            pool,
            nodes=tuple(_taken(node, taken.get((pool.name, node.name))) for node in pool.nodes),
        )
        for pool in snapshot.pools
    )
    admitted = {a.job_id for a in result.admissions}
    pending = tuple(job for job in snapshot.pending if job.id not in admitted)
    return replace(snapshot, pools=pools, running=tuple(running), pending=pending)


def _taken(node: NodeView, taken: tuple[set[int], float, float] | None) -> NodeView:
    if taken is None:
        return node
    devices, cpus, memory = taken
    return replace(
        node,
        used_devices=node.used_devices | devices,
        used_cpus=node.used_cpus + cpus,
        used_memory_gb=node.used_memory_gb + memory,
    )


def advance(snapshot: Snapshot, result: CycleResult, action: str, data: st.DataObject) -> Snapshot:
    if action == "apply":
        return applied(snapshot, result)
    if action == "end" and snapshot.running:
        gone = data.draw(st.sampled_from(snapshot.running))
        return without(snapshot, [gone])
    if action == "submit" and snapshot.teams:
        job = PendingJob(
            f"new-{next(SUBMITTED)}",
            data.draw(st.sampled_from(sorted(snapshot.teams))),
            data.draw(st.integers(0, 2)),
            snapshot.now,
            data.draw(st.integers(0, 4)),
            gpu_types=tuple(data.draw(st.sets(st.sampled_from(["h100", "a100", "t4"])))),
        )
        return grouped(replace(snapshot, pending=(*snapshot.pending, job)))
    if action == "cancel" and snapshot.pending:
        gone = data.draw(st.sampled_from(snapshot.pending))
        return replace(snapshot, pending=tuple(j for j in snapshot.pending if j is not gone))
    if action == "later":
        return replace(snapshot, now=snapshot.now + 30.0)
    if action == "reorder":  # another order within a team: decided again, results still equal
        return replace(snapshot, pending=tuple(reversed(snapshot.pending)))
    return snapshot


def parked_cycle(lot: Parking, snapshot: Snapshot, policy: Policy) -> CycleResult:
    """The lot's cycle, with the parked teams' remembered reasons put back: what a full
    cycle would return."""
    result = lot.cycle(snapshot, policy, groups_of(snapshot.pending))
    return replace(result, pending={**lot.parked_reasons(), **result.pending})


def check_sequence(snapshot: Snapshot, policy: Policy, data: st.DataObject) -> None:
    lot = Parking()
    snapshot = grouped(snapshot)
    for _ in range(6):
        parked = parked_cycle(lot, snapshot, policy)
        assert parked == run_cycle(snapshot, policy)
        snapshot = advance(snapshot, parked, data.draw(st.sampled_from(ACTIONS)), data)


@settings(max_examples=150, deadline=None)
@given(snapshot=snapshots(), policy=plain_policies, data=st.data())
def test_a_parked_cycle_decides_as_a_full_one(
    snapshot: Snapshot, policy: Policy, data: st.DataObject
) -> None:
    check_sequence(snapshot, policy, data)


@settings(max_examples=150, deadline=None)
@given(snapshot=clusters(), policy=cluster_policies, data=st.data())
def test_a_parked_cycle_decides_as_a_full_one_with_preemption_and_starvation(
    snapshot: Snapshot, policy: Policy, data: st.DataObject
) -> None:
    check_sequence(snapshot, policy, data)


# --- what parking skips ------------------------------------------------------------------

H100 = PoolView(
    "h100-a",
    "h100",
    "local",
    tuple(NodeView(f"h{i}", 4, 64.0, 512.0, frozenset(range(4))) for i in range(2)),
)
T4 = PoolView("t4-a", "t4", "local", (NodeView("t1", 4, 64.0, 512.0),))
TEAMS = {
    "team-a": TeamView("team-a", "research", quota={"h100": QuotaView(4), "t4": QuotaView(0, 0)}),
    "team-b": TeamView("team-b", "research", quota={"h100": QuotaView(4), "t4": QuotaView(2)}),
    # Holds every h100 within its own nominal, in another cohort: nobody may preempt it.
    "team-c": TeamView("team-c", "prod", quota={"h100": QuotaView(8)}),
}


def full_cluster(*extra: PendingJob) -> Snapshot:
    """Every h100 held by team-c; team-a and team-b each wait with five h100 jobs, and team-a
    with one that would also take a t4 its quota does not allow."""
    running = tuple(
        RunningJob(f"r{i}", "team-c", 0, "h100", "h100-a", (Placement(f"h{i}", (0, 1, 2, 3)),))
        for i in range(2)
    )
    pending = tuple(
        PendingJob(f"{team[-1]}{i}", team, 0, float(i), 2, gpu_types=("h100",))
        for team in ("team-a", "team-b")
        for i in range(5)
    )
    spill = PendingJob("a5", "team-a", 0, 5.0, 2, gpu_types=("h100", "t4"))
    return grouped(Snapshot(0.0, (H100, T4), TEAMS, running, (*pending, spill, *extra)))


@contextmanager
def counted_decisions() -> Iterator[list[str]]:
    seen: list[str] = []
    real = cycle_module.decide

    def counting(job: PendingJob, cycle: object) -> bool:
        seen.append(job.id)
        return real(job, cycle)  # type: ignore[arg-type]

    with mock.patch.object(cycle_module, "decide", counting):
        yield seen


def test_nothing_changed_nothing_decided() -> None:
    lot = Parking()
    first = parked_cycle(lot, full_cluster(), Policy())
    assert sorted(lot.teams) == ["team-a", "team-b"]
    again = full_cluster()  # rebuilt, equal: what a controller's next snapshot is
    with counted_decisions() as decided:
        second = parked_cycle(lot, again, Policy())
    assert decided == []
    assert second == run_cycle(again, Policy()) == first


def test_a_new_job_has_its_team_decided_again_and_no_other() -> None:
    lot = Parking()
    parked_cycle(lot, full_cluster(), Policy())
    late = PendingJob("a9", "team-a", 0, 9.0, 2, gpu_types=("h100",))
    snapshot = full_cluster(late)
    with counted_decisions() as decided:
        second = parked_cycle(lot, snapshot, Policy())
    assert decided and all(job_id.startswith("a") for job_id in decided)
    assert second == run_cycle(snapshot, Policy())


def test_a_fit_on_a_parked_teams_gpu_type_decides_that_team_again() -> None:
    """team-b's new t4 job fits: team-a, parked with a job that accepts t4, is decided again
    in a second run of the cycle."""
    lot = Parking()
    parked_cycle(lot, full_cluster(), Policy())
    assert lot.teams["team-a"].types == {"h100", "t4"}
    fresh = PendingJob("b9", "team-b", 5, 9.0, 2, gpu_types=("t4",))
    snapshot = full_cluster(fresh)
    with counted_decisions() as decided:
        parked = parked_cycle(lot, snapshot, Policy())
    assert parked == run_cycle(snapshot, Policy())
    assert [a.job_id for a in parked.admissions] == ["b9"]
    assert "a5" in decided
    assert "team-a" not in lot.teams  # t4 changed in this cycle


def test_a_rerun_forgets_the_reasons_of_jobs_that_left_a_changed_team() -> None:
    """team-a's a1 left the queue and team-e's new t4 job touches t4, which team-d (parked)
    and team-a may use; team-b stays parked: the re-run must not hand out a1's old reasons."""
    teams = {
        **TEAMS,
        "team-d": TeamView("team-d", "research", quota={"t4": QuotaView(0, 0)}),
        "team-e": TeamView("team-e", "research", quota={"t4": QuotaView(2)}),
    }
    waiting = PendingJob("d0", "team-d", 0, 0.0, 1, gpu_types=("t4",))

    def snapshot(*extra: PendingJob, without: str = "") -> Snapshot:
        base = full_cluster(waiting, *extra)
        pending = tuple(job for job in base.pending if job.id != without)
        return grouped(replace(base, teams=teams, pending=pending))

    lot = Parking()
    parked_cycle(lot, snapshot(), Policy())
    assert "team-d" in lot.teams
    fresh = PendingJob("e0", "team-e", 5, 9.0, 2, gpu_types=("t4",))
    later = snapshot(fresh, without="a1")
    result = parked_cycle(lot, later, Policy())
    assert [a.job_id for a in result.admissions] == ["e0"]
    assert "team-b" in lot.teams
    assert "a1" not in result.pending
    assert result == run_cycle(later, Policy())


def test_a_new_gpu_type_decides_a_team_that_takes_any_type_again() -> None:
    anything = PendingJob("x0", "team-b", 0, 0.0, 2)  # no gpu types: any
    only_h100 = replace(full_cluster(anything), pools=(H100,))
    lot = Parking()
    parked_cycle(lot, only_h100, Policy())
    assert lot.teams["team-b"].types == {"h100"}
    with_t4 = full_cluster(anything)  # the t4 pool appears, with room
    result = parked_cycle(lot, with_t4, Policy())
    assert result == run_cycle(with_t4, Policy())
    assert "x0" in {a.job_id for a in result.admissions}


def test_a_starving_team_is_never_parked() -> None:
    policy = Policy(starvation_after_s=10.0)
    lot = Parking()
    parked_cycle(lot, full_cluster(), policy)
    assert lot.teams
    later = replace(full_cluster(), now=100.0)  # every job has waited 95 s or more
    with counted_decisions() as decided:
        result = parked_cycle(lot, later, policy)
    assert decided
    assert result == run_cycle(later, policy)


def test_no_parking_under_an_admission_bound() -> None:
    policy = Policy(max_admissions=1)
    lot = Parking()
    parked_cycle(lot, full_cluster(), policy)
    assert not lot.teams


def test_a_victim_past_its_minimum_run_time_decides_parked_teams_again() -> None:
    """team-c's urgent job waits while team-c's running jobs are younger than their minimum run
    time; nothing else changes, yet once they are old enough it must preempt one."""
    policy = Policy(min_runtime_s={0: 50.0})
    urgent = PendingJob("c-hi", "team-c", 10, 0.0, 4, gpu_types=("h100",))
    lot = Parking()
    first = parked_cycle(lot, full_cluster(urgent), policy)
    assert not first.preemptions and "team-c" in lot.teams
    later = replace(full_cluster(urgent), now=60.0)
    result = parked_cycle(lot, later, policy)
    assert result == run_cycle(later, policy)
    assert [p.preemptor_id for p in result.preemptions] == ["c-hi"]
