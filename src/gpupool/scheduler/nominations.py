"""Nominated preemptors: the room a preemption frees goes to its preemptor (DESIGN §5.6).

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
2. it fits once those of its victims that are still ending have ended: it claims them (no other
   job may wait on them), holds the free room it needs besides theirs, waits with PREEMPTING and
   is nominated again; it picks no new victims;
3. otherwise the nomination has lapsed (its victims ended and still it does not fit: capacity
   went away or its quota changed; or they were never signalled): its room is free again, and
   the job is decided with the others, as any job, and may preempt anew.

A preemptor's plan was made after those of the preemptors decided before it, on the room they
had not taken; holding every planned room until its owner's turn keeps that so in later cycles:
no nominated preemptor takes the room another one counts on, and an unchanged cluster gives
each the fit it had (so preempts no one again while it waits).

Invariants: no job is decided before a nominated preemptor, and no later decision of the cycle
takes room or quota that one in case 2 counts on; each nominated preemptor is decided once (it
is left out of the queues); it claims only terminating running jobs that its nomination names
and no one claimed before. Nominations are honoured in the snapshot's order, so the result stays
a function of the snapshot. Nominations of jobs that are not pending are ignored (the job was
admitted, cancelled or has ended), and are not listed again.
"""

from __future__ import annotations

from collections.abc import Callable

from gpupool.core.quota import check_quota
from gpupool.scheduler import reasons
from gpupool.scheduler.assignment import (
    Assignment,
    FitMode,
    assign,
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
            continue  # like the heads, not considered this cycle (its room is free again)
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
        plan = _wait_for(job, types, ending, ws)
        if plan is None:
            continue  # lapsed: decided with the others
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


def _wait_for(
    job: PendingJob, types: tuple[str, ...], ending: list[RunningJob], ws: Workspace
) -> Assignment | None:
    """A PREEMPT plan waiting for ``ending`` (nothing new preempted) when the job fits, room
    and quota, once they have ended; else None."""
    if not ending:
        return None
    gpu_type = ending[0].gpu_type
    if gpu_type not in types or any(victim.gpu_type != gpu_type for victim in ending):
        return None  # one preemption frees one gpu type; anything else was not decided here
    shape = job_shape(job)
    with Simulation(ws) as sim:
        for victim in ending:
            sim.remove(victim)
        if not any(pool.pick(shape) for pool in usable_pools(job.team, shape, gpu_type, ws)):
            return None
        quota, used = ws.quota(job.team, gpu_type), ws.used(job.team, gpu_type)
        balance = ws.cohort_balance(job.team, gpu_type)
        if not check_quota(quota, used, job.total_gpus, balance).fits:
            return None
    return Assignment(FitMode.PREEMPT, gpu_type=gpu_type, ending=tuple(ending))
