"""The guarantee, kept: a property over random clusters and workloads (Q1, Q3, Q9).

A team below its nominal quota submits a job that fits in its unused nominal. Then, whatever the
cluster looks like, the job runs within one grace period plus a few cycles, provided reclaim can
free the room at all: some set of running jobs of teams above their nominal, each taken while its
team is still above nominal, leaves ``nodes`` nodes of one pool with the job's GPUs free (a
brute-force search over the few running jobs says so; on a cluster fragmented by jobs within
their own nominal no scheduler could keep the guarantee, and the example is skipped).

The world: 1-3 nodes of 4 or 8 GPUs in one pool, or two pools; 2-3 teams in one cohort, nominal
quotas summing to at most the cluster; running jobs placed at random (gangs of whole nodes among
them), some protected from ordinary preemption (young for their priority's minimum run time, or
preempted the most times allowed already, both overridden by reclaim); a borrowing team's job
starving in the queue (its reservation must not block the guarantee); a small preemption budget.
``run_cycle`` is driven once per cycle: a victim ends ``grace`` cycles after it is signalled and
is queued again; nothing else ends.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import replace
from itertools import combinations

import pytest
from hypothesis import HealthCheck, assume, given, settings
from hypothesis import strategies as st

from gpupool.scheduler import (
    CycleResult,
    NodeView,
    Nomination,
    PendingJob,
    Placement,
    Policy,
    PoolView,
    QuotaView,
    RunningJob,
    Snapshot,
    TeamView,
    preemption,
    run_cycle,
)

COHORT = "research"
PROBE = "probe"
# Cycles after the victims have ended: one to decide, one to admit, and one for slack.
SLACK = 3


def pools_of(layout: list[tuple[int, int]]) -> tuple[PoolView, ...]:
    """One pool per (nodes, GPUs per node) of ``layout``, all of type h100."""
    return tuple(
        PoolView(
            f"p{i}",
            "h100",
            "fake",
            tuple(NodeView(f"p{i}-n{n}", gpus, 64.0, 512.0) for n in range(nodes)),
        )
        for i, (nodes, gpus) in enumerate(layout)
    )


def occupy(pools: tuple[PoolView, ...], running: list[RunningJob]) -> tuple[PoolView, ...]:
    used: dict[str, set[int]] = {}
    for job in running:
        for p in job.placements:
            used.setdefault(p.node, set()).update(p.devices)
    return tuple(
        replace(
            pool,
            nodes=tuple(
                replace(n, used_devices=frozenset(used.get(n.name, ()))) for n in pool.nodes
            ),
        )
        for pool in pools
    )


@st.composite
def worlds(
    draw: st.DrawFn,
) -> tuple[tuple[PoolView, ...], dict[str, TeamView], list[RunningJob], PendingJob, Policy, int]:
    gpus = draw(st.sampled_from([4, 8]))
    layout = [(draw(st.integers(1, 3)), gpus)]
    if draw(st.booleans()):
        layout.append((draw(st.integers(1, 2)), gpus))
    pools = pools_of(layout)
    capacity = sum(nodes * g for nodes, g in layout)
    names = ["team-a", "team-b", "team-c"][: draw(st.integers(2, 3))]
    nominal: dict[str, int] = {}
    left = capacity
    for name in names:
        nominal[name] = draw(st.integers(0, left))
        left -= nominal[name]
    probe_team = draw(st.sampled_from(names))
    # Running jobs placed at random on free devices: single-node jobs of 1..gpus GPUs and gangs
    # of whole nodes; the probe's team holds less than its nominal.
    free = {n.name: list(range(n.gpus)) for p in pools for n in p.nodes}
    pool_of = {n.name: p.name for p in pools for n in p.nodes}
    running: list[RunningJob] = []
    for i in range(draw(st.integers(0, 10))):
        team = draw(st.sampled_from(names))
        whole = draw(st.integers(0, 4)) == 0
        if whole:
            empty = sorted(n for n, devices in free.items() if len(devices) == gpus)
            if not empty:
                continue
            count = draw(st.integers(1, min(2, len(empty))))
            nodes = empty[:count]
            if len({pool_of[n] for n in nodes}) > 1:
                nodes = nodes[:1]
            placements = tuple(Placement(n, tuple(free[n])) for n in nodes)
        else:
            node = draw(st.sampled_from(sorted(free)))
            if not free[node]:
                continue
            take = draw(st.integers(1, len(free[node])))
            placements = (Placement(node, tuple(free[node][:take])),)
        for p in placements:
            free[p.node] = [d for d in free[p.node] if d not in p.devices]
        running.append(
            RunningJob(
                f"r{i}",
                team,
                draw(st.integers(0, 1)),
                "h100",
                pool_of[placements[0].node],
                placements,
                started_at=float(draw(st.integers(-100, 0))),
                preemptions=draw(st.integers(0, 4)),
            )
        )
    used = {t: sum(r.gpus for r in running if r.team == t) for t in names}
    room = nominal[probe_team] - used[probe_team]
    assume(room >= 1)
    per_node = draw(st.integers(1, min(gpus, room)))
    nodes = draw(st.integers(1, max(1, min(2, room // per_node))))
    probe = PendingJob(PROBE, probe_team, draw(st.integers(0, 1)), 1.0, per_node, nodes)
    teams = {
        name: TeamView(name, COHORT, quota={"h100": QuotaView(nominal[name])}) for name in names
    }
    policy = Policy(
        preemption_budget=draw(st.sampled_from([1, 2, 10])),
        starvation_after_s=10.0,
        max_preemptions_per_job=2,
        min_runtime_s={0: 1000.0, 1: 1000.0},
    )
    grace = draw(st.integers(0, 3))
    return pools, teams, running, probe, policy, grace


def reclaim_can_free(
    pools: tuple[PoolView, ...],
    teams: dict[str, TeamView],
    running: list[RunningJob],
    job: PendingJob,
) -> bool:
    """Brute force: some set of other teams' jobs, each taken while its team is above nominal
    (the largest last), leaves ``job.nodes`` nodes of one pool with ``job.gpus`` free GPUs."""
    nominal = {name: view.quota["h100"].nominal for name, view in teams.items()}
    used = {name: sum(r.gpus for r in running if r.team == name) for name in teams}
    candidates = [r for r in running if r.team != job.team and used[r.team] > nominal[r.team]]
    for size in range(len(candidates) + 1):
        for chosen in combinations(candidates, size):
            if not _allowed(chosen, used, nominal):
                continue
            gone = {r.id for r in chosen}
            left = occupy(pools, [r for r in running if r.id not in gone])
            for pool in left:
                roomy = [n for n in pool.nodes if n.gpus - len(n.used_devices) >= job.gpus]
                if len(roomy) >= job.nodes:
                    return True
    return False


def _allowed(chosen: tuple[RunningJob, ...], used: dict[str, int], nominal: dict[str, int]) -> bool:
    by_team: dict[str, list[int]] = {}
    for r in chosen:
        by_team.setdefault(r.team, []).append(r.gpus)
    return all(sum(g) - max(g) < used[t] - nominal[t] for t, g in by_team.items())


def drive(
    pools: tuple[PoolView, ...],
    teams: dict[str, TeamView],
    running: list[RunningJob],
    pending: list[PendingJob],
    policy: Policy,
    grace: int,
    cycles: int,
) -> Iterator[tuple[int, CycleResult]]:
    """Run one cycle per time unit from ``t = 1``; yield each cycle's number and result."""
    active = {r.id: r for r in running}
    queued = {j.id: j for j in pending}
    ends: dict[str, int] = {}
    nominations: tuple[Nomination, ...] = ()
    for t in range(1, cycles + 1):
        for job_id, at in list(ends.items()):
            if at <= t:
                victim = active.pop(job_id)
                del ends[job_id]
                queued[job_id] = PendingJob(
                    job_id, victim.team, victim.priority, -1000.0, victim.gpus, queued_at=float(t)
                )
        snapshot = Snapshot(
            now=float(t),
            pools=occupy(pools, list(active.values())),
            teams=teams,
            running=tuple(active.values()),
            pending=tuple(queued.values()),
            nominations=nominations,
        )
        result = run_cycle(snapshot, policy)
        nominations = result.nominations
        for p in result.preemptions:
            active[p.job_id] = replace(active[p.job_id], terminating=True)
            ends[p.job_id] = t + 1 + grace
        for a in result.admissions:
            job = queued.pop(a.job_id)
            active[a.job_id] = RunningJob(
                a.job_id,
                job.team,
                job.priority,
                a.gpu_type,
                a.pool,
                a.placements,
                started_at=float(t),
            )
        yield t, result


# Derandomized: CI replays the same 300 worlds every run. A counterexample random runs once
# found is kept below as an explicit case.
@settings(
    max_examples=300, deadline=None, suppress_health_check=list(HealthCheck), derandomize=True
)
@given(worlds(), st.booleans())
def test_a_job_within_unused_nominal_starts_within_a_grace_period(world, starving) -> None:  # type: ignore[no-untyped-def]
    pools, teams, running, probe, policy, grace = world
    assume(reclaim_can_free(pools, teams, running, probe))
    pending = [probe]
    borrowers = [
        t
        for t, v in teams.items()
        if t != probe.team
        and sum(r.gpus for r in running if r.team == t) >= v.quota["h100"].nominal
    ]
    if starving and borrowers:
        # A borrower's job that has waited too long: it holds free room for itself.
        pending.append(PendingJob("hungry", borrowers[0], 5, -500.0, 1))
    bound = 1 + grace + SLACK
    why: list[str] = []
    for t, result in drive(pools, teams, running, pending, policy, grace, bound):
        if any(a.job_id == PROBE for a in result.admissions):
            return
        why.append(f"cycle {t}: {[r.message for r in result.pending.get(PROBE, ())]}")
    nominal = {t: v.quota["h100"].nominal for t, v in teams.items()}
    raise AssertionError(
        f"{PROBE} did not start within {bound} cycles (grace {grace}); nominal {nominal}, "
        f"running {running}, probe {probe}, policy {policy}; " + "; ".join(why)
    )


def _fragmented() -> tuple[tuple[PoolView, ...], dict[str, TeamView], list[RunningJob], PendingJob]:
    """Found by the property before node targeting: team-c (nominal 18, holding 12) needs 3
    GPUs on each of 2 nodes; team-b (nominal 2) borrows 5 with one job on p0-n0 and 2 more in
    1-GPU jobs on p0-n1, team-a (nominal 0) borrows 10. Taken in plain victim order, team-b's
    5-GPU job brings it down to its nominal before its small job on p0-n1 can go."""
    pools = pools_of([(2, 8), (2, 8)])
    nominal = {"team-a": 0, "team-b": 2, "team-c": 18}
    teams = {n: TeamView(n, COHORT, quota={"h100": QuotaView(v)}) for n, v in nominal.items()}
    held = [
        ("r0", "team-b", "p0-n0", (0, 1, 2, 3, 4)),
        ("r1", "team-a", "p0-n0", (5,)),
        ("r2", "team-a", "p0-n1", (0,)),
        ("r3", "team-a", "p1-n0", tuple(range(8))),
        ("r4", "team-c", "p1-n1", tuple(range(8))),
        ("r5", "team-c", "p0-n1", (1, 2, 3, 4)),
        ("r7", "team-b", "p0-n1", (5,)),
        ("r8", "team-b", "p0-n1", (6,)),
    ]
    running = [RunningJob(i, t, 0, "h100", n[:2], (Placement(n, d),)) for i, t, n, d in held]
    return pools, teams, running, PendingJob(PROBE, "team-c", 0, 1.0, 3, 2)


def _started_at(targeting: bool, monkeypatch: pytest.MonkeyPatch) -> int | None:
    if not targeting:
        monkeypatch.setattr(preemption, "target_nodes", lambda candidates, *_: candidates)
    pools, teams, running, probe = _fragmented()
    assert reclaim_can_free(pools, teams, running, probe)
    policy = Policy(preemption_budget=2)
    for t, result in drive(pools, teams, running, [probe], policy, grace=1, cycles=6):
        if any(a.job_id == PROBE for a in result.admissions):
            return t
    return None


def test_the_fragmented_cluster_keeps_the_guarantee(monkeypatch: pytest.MonkeyPatch) -> None:
    assert _started_at(True, monkeypatch) == 3  # preempts in cycle 1; victims gone by cycle 3


def test_the_property_fails_without_node_targeting(monkeypatch: pytest.MonkeyPatch) -> None:
    """The checker is not vacuous: victims taken in plain victim order never free the nodes."""
    assert _started_at(False, monkeypatch) is None


def test_a_gang_victim_that_alone_frees_the_nodes_is_found() -> None:
    """team-a (nominal 16) runs a 16-GPU gang on p0-n0 and p0-n1 and an 8-GPU job on p0-n2;
    team-c (nominal 2, nothing running) asks for 1 GPU on each of 2 nodes. Only preempting the
    gang makes room in one pool; team-a is above nominal when it is taken."""
    pools = pools_of([(3, 8), (1, 8)])
    teams = {
        name: TeamView(name, COHORT, quota={"h100": QuotaView(nominal)})
        for name, nominal in (("team-a", 16), ("team-b", 0), ("team-c", 2))
    }
    whole = tuple(range(8))
    running = [
        RunningJob(
            "r0", "team-a", 0, "h100", "p0",
            (Placement("p0-n0", whole), Placement("p0-n1", whole)), started_at=-1.0,
        ),
        RunningJob("r1", "team-b", 0, "h100", "p1", (Placement("p1-n0", (0,)),), started_at=0.0),
        RunningJob("r2", "team-a", 0, "h100", "p0", (Placement("p0-n2", whole),), started_at=0.0),
    ]  # fmt: skip
    probe = PendingJob(PROBE, "team-c", 0, 1.0, 1, 2)
    assert reclaim_can_free(pools, teams, running, probe)
    policy = Policy(
        preemption_budget=1,
        starvation_after_s=10.0,
        max_preemptions_per_job=2,
        min_runtime_s={0: 1000.0, 1: 1000.0},
    )
    started = [
        t
        for t, result in drive(pools, teams, running, [probe], policy, 0, 1 + SLACK)
        if any(a.job_id == PROBE for a in result.admissions)
    ]
    assert started
