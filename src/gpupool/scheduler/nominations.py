"""Nominated preemptors: the room a preemption frees goes to its preemptor (docs/architecture.md
§5.6).

A preemption takes effect cycles after it is decided: the victims are signalled, end within
their grace period, and only then is their room free. A cycle remembers nothing of earlier ones,
so without help that room goes to whichever job the next cycle decides first. That can be the
victim itself: requeued with its old submit time it heads its team's queue, and with the GPUs it
gave up its team may be owed its guarantee again, decided before the preemptor's. It borrows the
room back, the preemptor reclaims it again, and so on: a livelock of thousands of preemptions
(issue 10, M3). The same happens when another job waits on the preemptor's ending victims
(pass 1 of :mod:`gpupool.scheduler.preemption`) or takes the free room the preemptor counted on
besides theirs: the preemptor, still short, picks new victims.

So a preemption is remembered until it has had its effect, as Kueue nominates a node for a
preemptor: every job a cycle leaves waiting with PREEMPTING is listed in
``CycleResult.nominations`` with the victims it claimed and the room it planned to run on (the
victims' devices and the free ones it held besides); the caller hands them to the next cycle as
:attr:`Snapshot.nominations`, and the scheduler lists them again for as long as they wait. Before
any other decision of a cycle, the room of every nomination that is free now is held, and then
each nominated preemptor that is pending is decided, in the order they were decided, with its
own room given back to it:

1. it fits outright: it is admitted (the room its victims freed is free for it now);
2. it fits now, or once those of its victims that are still ending have ended, on the gpu type
   it planned and with the cohort's quota it was granted: it is admitted, or it claims them (no
   other job may wait on them), holds the free room it needs besides theirs, waits with
   PREEMPTING and is nominated again; it picks no new victims. Its team's own limits (nominal,
   borrowing limit) and, for a GPU-less job, its team's cap are checked again, but not the
   cohort's idle quota: the borrowing was granted when it preempted, and a lender that took its
   unused nominal back since (a team within its nominal is never refused) is repaired by
   reclaim, as it would be had the victims ended at once. Checking it would void the
   preemption: the victim would take its room back and the preemptor preempt it again;
3. otherwise the nomination has lapsed (room went away, a quota was lowered, the cap stops a
   GPU-less job, or its victims were never signalled): its room is free again, and the job is
   decided with the others, as any job, and may preempt anew.

So on a cluster whose capacity and quotas do not change a nomination never lapses, and a job
makes at most one preemption decision while it waits (from entering the queue to its
admission): no job is preempted twice by the same preemptor while it waits, and a run's
preemption decisions are at most its preemptors' waits (the property of
``tests/unit/scheduler/test_scheduler_preemption_bound.py``; ``docs/security.md``).

A preemptor's plan was made after those of the preemptors decided before it, on the room they
had not taken; holding every planned room until its owner's turn keeps that so in later cycles:
no nominated preemptor takes the room another one counts on, and an unchanged cluster gives
each the fit it had (so preempts no one again while it waits).

Invariants: no job is decided before a nominated preemptor, and no later decision of the cycle
takes room or quota that one in case 2 counts on; each nominated preemptor is decided once (it
is left out of the queues); it claims only terminating running jobs that its nomination names
and no one claimed before. Nominations are honoured in the snapshot's order, so the result stays
a function of the snapshot. Nominations of jobs that are not pending are ignored (the job was
admitted, cancelled or has ended), and are not listed again; those the admission bound
(``max_admissions``) leaves undecided are listed again unchanged.
"""

from __future__ import annotations

from collections.abc import Callable

from gpupool.core.quota import QuotaVerdict, check_quota
from gpupool.scheduler import reasons
from gpupool.scheduler.assignment import (
    Assignment,
    FitMode,
    assign,
    best_pick,
    gpuless_fits,
    job_shape,
    resolve_gpu_types,
    usable_pools,
)
from gpupool.scheduler.capacity import Held
from gpupool.scheduler.preemption import Preemptor
from gpupool.scheduler.snapshot import (
    Admission,
    Nomination,
    PendingJob,
    PendingReason,
    Policy,
    RunningJob,
    Snapshot,
)
from gpupool.scheduler.workspace import Simulation, Workspace

Apply = Callable[[PendingJob, Assignment, Workspace], Admission]

# What a nominated preemptor's own quota must still allow: its team's limits. The cohort's idle
# quota it borrows was granted when it preempted; a lender that took its unused nominal back
# since is repaired by reclaim, as it would be had the victims ended at once.
_GRANTED = frozenset({QuotaVerdict.WITHIN_NOMINAL, QuotaVerdict.BORROWS, QuotaVerdict.COHORT_SHORT})


def honour_nominations(
    snapshot: Snapshot,
    ws: Workspace,
    policy: Policy,
    apply: Apply,
    admissions: list[Admission],
    pending: dict[str, tuple[PendingReason, ...]],
    nominated: list[Nomination],
) -> frozenset[str]:
    """Decide the nominated preemptors first (see the module docstring); their admissions,
    reasons and new nominations are added to ``admissions``, ``pending`` and ``nominated``.
    Returns the ids decided here (cases 1 and 2), which the rest of the cycle leaves out."""
    if not snapshot.nominations:
        return frozenset()
    wanted = {n.preemptor for n in snapshot.nominations}
    jobs = {job.id: job for job in snapshot.pending if job.id in wanted}
    live: dict[str, Nomination] = {}
    for nomination in snapshot.nominations:
        if nomination.preemptor in jobs:
            live.setdefault(nomination.preemptor, nomination)
    if not live:
        return frozenset()
    named = {victim for n in live.values() for victim in n.victims}
    running = {job.id: job for job in ws.running if job.id in named}
    held = {p: _hold(n, jobs[p], running, ws) for p, n in live.items()}
    preemptor = Preemptor(ws, policy)
    limit = policy.max_admissions
    decided: set[str] = set()
    for nomination in live.values():
        for room in held.pop(nomination.preemptor):
            room.pool.release(room.index, room.devices, room.cpus, room.memory_gb)
        if limit is not None and len(admissions) >= limit:
            # Like the heads, not considered this cycle; nothing else is admitted or preempted
            # in it either, so the nomination stands as it was for the next one.
            nominated.append(nomination)
            continue
        job = jobs[nomination.preemptor]
        types = resolve_gpu_types(job.gpu_types, policy.gpu_type_order, ws.gpu_types)
        outcome = assign(job, types, ws)
        if outcome.mode is FitMode.FIT:
            admissions.append(apply(job, outcome, ws))
            decided.add(job.id)
            continue
        ending = [
            victim
            for victim_id in nomination.victims
            if (victim := running.get(victim_id)) is not None
            and victim.terminating
            and victim.id not in ws.claimed
        ]
        plan = _as_planned(job, nomination, types, ending, ws)
        if plan is None:
            continue  # lapsed: decided with the others
        if plan.mode is FitMode.FIT:
            admissions.append(apply(job, plan, ws))
        else:
            nominated.append(preemptor.commit(job, plan))
            pending[job.id] = (reasons.preempting(plan.gpu_type, 0, len(plan.ending)),)
        decided.add(job.id)
    return frozenset(decided)


def _hold(
    nomination: Nomination, job: PendingJob, running: dict[str, RunningJob], ws: Workspace
) -> list[Held]:
    """Hold what is free now of the room ``nomination`` planned: its devices, and on each node
    the cpus and memory the job needs there besides what its victims still running hold."""
    pool = ws.pool_named(nomination.pool)
    if pool is None:
        return []
    victims = [running[v] for v in nomination.victims if v in running]
    holds = []
    for placement in nomination.placements:
        index = pool.node_index(placement.node)
        if index is None:
            continue
        cpus, memory = job.cpus, job.memory_gb
        for victim in victims:
            on = victim.pool == pool.name and placement.node in {p.node for p in victim.placements}
            if on:
                cpus, memory = cpus - victim.cpus, memory - victim.memory_gb
        holds.append(pool.hold(index, placement.devices, cpus, memory))
    return holds


def _as_planned(
    job: PendingJob,
    nomination: Nomination,
    types: tuple[str, ...],
    ending: list[RunningJob],
    ws: Workspace,
) -> Assignment | None:
    """The job on the gpu type its nomination planned, with the cohort's share it was granted:
    FIT where it fits now, a PREEMPT plan waiting for ``ending`` (nothing new preempted) where
    it fits once they have ended; None (lapsed) where room, its team's own limits or, for a
    GPU-less job, its team's cap stop it."""
    pool = ws.pool_named(nomination.pool)
    gpu_type = pool.view.gpu_type if pool is not None else ending[0].gpu_type if ending else ""
    if gpu_type not in types or any(victim.gpu_type != gpu_type for victim in ending):
        return None  # one preemption frees one gpu type; anything else was not decided here
    if not gpuless_fits(job, gpu_type, ws):
        return None  # the cap is hard: holding room for it would only keep others out
    shape = job_shape(job)
    with Simulation(ws) as sim:
        for victim in ending:
            sim.remove(victim)
        if not any(pool.pick(shape) for pool in usable_pools(job, shape, gpu_type, ws)):
            return None
        quota, used = ws.quota(job.team, gpu_type), ws.used(job.team, gpu_type)
        check = check_quota(quota, used, job.total_gpus, ws.cohort_balance(job.team, gpu_type))
        if check.verdict not in _GRANTED:
            return None
    if ending:
        return Assignment(FitMode.PREEMPT, gpu_type=gpu_type, ending=tuple(ending))
    picks = [p for room in usable_pools(job, shape, gpu_type, ws) if (p := room.pick(shape))]
    return Assignment(
        FitMode.FIT, gpu_type=gpu_type, pick=best_pick(job.id, picks), borrowed=check.borrowed
    )
