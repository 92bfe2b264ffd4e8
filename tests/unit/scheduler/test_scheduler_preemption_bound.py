"""The preemption bound (issue 10, M3): a property over random borrowing workloads.

Words: a job's *wait* runs from entering the queue (submitted, or requeued once preempted) to
its admission. A *preemption decision* is one cycle's choice of victims for one pending job, its
*preemptor*; one decision may preempt several jobs (a multi-GPU job may need several victims),
at most ``preemption_budget`` in a cycle.

The bound, on a cluster whose capacity and quotas do not change while the run lasts:

1. a preemptor makes at most one preemption decision per wait; so no job is preempted twice by
   the same preemptor while that preemptor waits;
2. hence the preemption decisions of a run number at most ``Σ_p (1 + r_p)`` over the
   preemptors ``p``, where ``r_p`` counts the times ``p`` was itself preempted: one per
   preemptor when no preemptor is preempted; and the jobs preempted are at most
   ``preemption_budget`` per decision.

Why (:mod:`gpupool.scheduler.nominations`): a preemptor is nominated until it starts. Every
later cycle decides it first, on the room its plan held, and it preempts no one new while its
victims end; its plan's quota stays granted: its team's own limits are checked again, but not
the cohort's idle quota, so a lender taking its unused nominal back meanwhile voids nothing (a
GPU-less preemptor's share of its team's cap is charged at its claim, for the same reason). A
nomination lapses only when room or a quota went away, which this world never does.

What the bound is not: across waits the same pair may meet again (a preemptor reclaimed by a
lender, requeued, may preempt its old victim again in its next wait, which is owed), and a node
lost, a quota lowered or a controller restart (nominations live in memory) may cost each
waiting preemptor one more decision.

The world: 1-2 nodes of 4 GPUs, 2-3 teams in one cohort with random nominal, borrowing and
lending limits; jobs of 1-4 GPUs, priorities 0-2, arriving over 12 cycles and running 1-8; a
random preemption policy for the cohort (within the team, reclaim, borrowing within the cohort
with a priority threshold) and budget; victims end 0-3 cycles after they are signalled.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, replace

import pytest
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from gpupool.scheduler import (
    CycleResult,
    NodeView,
    Nomination,
    PendingJob,
    Policy,
    PoolView,
    QuotaView,
    RunningJob,
    Snapshot,
    TeamView,
    run_cycle,
)
from gpupool.scheduler.snapshot import BorrowWithinCohort, PreemptionPolicy, Reclaim, WithinTeam

# (arrival cycle, team, gpus, priority, cycles it runs)
JobSpec = tuple[int, str, int, int, int]


@dataclass(frozen=True)
class Tally:
    decisions: int
    preemptions: int
    preemptors: int
    waits: int  # Σ over preemptors of 1 + the times each was itself preempted


def one_decision_per_wait(results: Iterable[CycleResult]) -> tuple[int, int]:
    """Fail unless every preemptor's preemptions fall in one cycle per wait (and so no job is
    preempted twice by one preemptor while it waits); (decisions, preemptions) of the run."""
    tally = preemption_tally(results)
    return tally.decisions, tally.preemptions


def preemption_tally(results: Iterable[CycleResult]) -> Tally:
    """Check bound 1 of the module docstring cycle by cycle; the run's counts for bound 2."""
    waiting: dict[str, tuple[int, set[str]]] = {}  # preemptor -> (its cycle, victims) this wait
    preempted: Counter[str] = Counter()
    decisions = preemptions = 0
    for cycle, result in enumerate(results):
        for p in result.preemptions:
            preemptions += 1
            preempted[p.job_id] += 1
            known = waiting.get(p.preemptor_id)
            if known is None:
                decisions += 1
                known = waiting[p.preemptor_id] = (cycle, set())
            assert known[0] == cycle, (
                f"{p.preemptor_id} preempted in cycles {known[0]} and {cycle} of one wait"
            )
            assert p.job_id not in known[1], f"{p.job_id} preempted twice by {p.preemptor_id}"
            known[1].add(p.job_id)
        for admission in result.admissions:
            waiting.pop(admission.job_id, None)
    preemptors = {p.preemptor_id for result in results for p in result.preemptions}
    waits = sum(1 + preempted[p] for p in preemptors)
    return Tally(decisions, preemptions, len(preemptors), waits)


@dataclass
class Job:
    pending: PendingJob
    duration: int  # cycles it runs once admitted
    running: RunningJob | None = None
    ends_at: int = 0  # the cycle before which it ends (natural end, or killed)
    killed: bool = False


def world(
    nodes: int,
    teams: Mapping[str, QuotaView | int],
    jobs: Sequence[JobSpec],
    grace: Sequence[int],
    policy: Policy,
    nominate: bool = True,
    cycles: int = 300,
) -> list[CycleResult]:
    """Run ``run_cycle`` once per cycle over a small world (teams of the cohort ``research``,
    an int being a nominal quota): jobs arrive, run their duration and end; a victim ends
    ``grace[i]`` cycles after its preemption (0: before the next cycle) and is queued again
    with its submit time. Returns every cycle's result."""
    team_views = {
        name: TeamView(name, "research", quota={"h100": QuotaView(q) if isinstance(q, int) else q})
        for name, q in teams.items()
    }
    all_jobs = [
        Job(PendingJob(f"j{i:02d}", team, prio, float(at), gpus), duration)
        for i, (at, team, gpus, prio, duration) in enumerate(jobs)
    ]
    queued: dict[str, Job] = {}
    active: dict[str, Job] = {}
    results: list[CycleResult] = []
    nominations: tuple[Nomination, ...] = ()
    kills = 0
    for t in range(cycles):
        for job in all_jobs:
            if job.pending.submitted_at == t:
                queued[job.pending.id] = job
        for job in [j for j in active.values() if j.ends_at <= t]:
            del active[job.pending.id]
            if job.killed:
                job.pending = replace(job.pending, queued_at=float(t))
                queued[job.pending.id] = job
            job.running, job.killed = None, False
        if not queued and not active and t > max(at for at, *_ in jobs):
            break
        views = []
        for n in range(nodes):
            used = {
                d
                for j in active.values()
                for p in j.running.placements  # type: ignore[union-attr]
                if p.node == f"n{n}"
                for d in p.devices
            }
            views.append(NodeView(f"n{n}", 4, 64.0, 256.0, frozenset(used)))
        snapshot = Snapshot(
            now=float(t),
            pools=(PoolView("p", "h100", "fake", tuple(views)),),
            teams=team_views,
            running=tuple(j.running for j in active.values() if j.running is not None),
            pending=tuple(j.pending for j in queued.values()),
            nominations=nominations if nominate else (),
        )
        result = run_cycle(snapshot, policy)
        nominations = result.nominations
        results.append(result)
        for admission in result.admissions:
            job = queued.pop(admission.job_id)
            job.running = RunningJob(
                job.pending.id,
                job.pending.team,
                job.pending.priority,
                "h100",
                "p",
                admission.placements,
                started_at=float(t),
            )
            job.ends_at = t + job.duration
            active[job.pending.id] = job
        for preemption in result.preemptions:
            job = active[preemption.job_id]
            assert job.running is not None and not job.running.terminating
            job.running = replace(job.running, terminating=True)
            kill_at = t + 1 + grace[kills % len(grace)]
            kills += 1
            if kill_at < job.ends_at:
                job.ends_at, job.killed = kill_at, True
    return results


_LIMIT = st.sampled_from([None, None, 0, 1, 2])
_BUDGET = st.sampled_from([None, 1, 10])


@st.composite
def workloads(draw: st.DrawFn) -> tuple:  # type: ignore[type-arg]
    """A world of the module docstring: (nodes, quotas, jobs, grace, policy)."""
    nodes = draw(st.integers(1, 2))
    names = ["team-a", "team-b", "team-c"][: draw(st.integers(2, 3))]
    quotas = {
        name: QuotaView(draw(st.integers(0, 4 * nodes)), draw(_LIMIT), draw(_LIMIT))
        for name in names
    }
    job = st.tuples(
        st.integers(0, 12),
        st.sampled_from(names),
        st.sampled_from([1, 1, 2, 4]),
        st.integers(0, 2),
        st.integers(1, 8),
    )
    jobs = draw(st.lists(job, min_size=4, max_size=24))
    grace = draw(st.lists(st.integers(0, 3), min_size=1, max_size=5))
    rules = PreemptionPolicy(
        draw(st.sampled_from(WithinTeam)),
        draw(st.sampled_from(Reclaim)),
        draw(st.sampled_from(BorrowWithinCohort)),
        draw(st.sampled_from([None, 0, 1])),
    )
    budget = draw(st.sampled_from([None, 1, 10]))
    return (
        nodes,
        quotas,
        jobs,
        grace,
        Policy(preemption={"research": rules}, preemption_budget=budget),
    )


# Found by this property when a lender taking its quota back voided a nomination: j05 (team-b,
# 4 GPUs, priority 1) preempted its teammate j06 to borrow team-a's lent GPU; j07 of team-a took
# it back within its nominal; j05 lapsed, j06 ran again, and j05 preempted it again 2 cycles later.
LENDER_CAME_BACK = (
    2,
    {"team-a": QuotaView(1), "team-b": QuotaView(3)},
    [
        *[(0, "team-a", 1, 0, 1)] * 4,
        (0, "team-a", 1, 0, 7),
        (0, "team-b", 4, 1, 1),
        (2, "team-b", 1, 0, 8),
        (8, "team-a", 1, 0, 2),
        (8, "team-b", 1, 0, 1),
    ],
    [0],
    Policy(
        preemption={
            "research": PreemptionPolicy(
                WithinTeam.LOWER_PRIORITY, Reclaim.NEVER, BorrowWithinCohort.NEVER
            )
        },
        preemption_budget=None,
    ),
)


@settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@example(LENDER_CAME_BACK)
@given(workloads())
def test_preemptions_are_bounded_by_the_preemptors(workload: tuple) -> None:  # type: ignore[type-arg]
    nodes, quotas, jobs, grace, policy = workload
    results = world(nodes, quotas, jobs, grace, policy)
    tally = preemption_tally(results)
    assert tally.decisions <= tally.waits
    for result in results:
        if len(result.preemptions) > (policy.preemption_budget or len(jobs)):
            # Only a reclaim of a guarantee, the cycle's first preemption, goes past the budget.
            assert len({p.preemptor_id for p in result.preemptions}) == 1


def test_the_lender_case_preempts_once() -> None:
    """The example above, spelled out: one decision, one victim, and j05 runs once j06 ended."""
    results = world(*LENDER_CAME_BACK)
    tally = preemption_tally(results)
    assert (tally.decisions, tally.preemptions, tally.preemptors) == (1, 1, 1)
    preempted_at = next(c for c, r in enumerate(results) if r.preemptions)
    admitted_at = next(c for c, r in enumerate(results) for a in r.admissions if a.job_id == "j05")
    assert admitted_at == preempted_at + 1  # grace 0: the victim ended before the next cycle


def test_the_property_finds_the_livelock_without_nominations() -> None:
    """The checker is not vacuous: without nominations the world fails it (found by the
    property on the code before the fix): team-c reclaims team-b's borrowed GPU twice."""
    jobs = [(0, "team-a", 1, 0, 1), (0, "team-b", 4, 0, 3), (0, "team-b", 1, 0, 1)]
    jobs.append((0, "team-c", 1, 0, 1))
    args = (1, {"team-a": 0, "team-b": 1, "team-c": 3}, jobs, [0], Policy())
    with pytest.raises(AssertionError, match="preempted in cycles"):
        preemption_tally(world(*args, nominate=False))
    preemption_tally(world(*args))
