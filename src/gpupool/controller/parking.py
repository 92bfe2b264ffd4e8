"""Parking: the controller hands a cycle only the teams whose decisions may have changed.

Kueue sets inadmissible workloads aside until a cluster event; here the skip is exact. A team is
*parked* after a cycle in which it was decided and no admission, claim or reservation touched
any gpu type its jobs may use (``CycleResult.touched``): each of its decisions was then made on
the snapshot's state of those types, and none of them changed anything. What those decisions
read is:

* the team's queue: its pending jobs, as listed (``groups``);
* per gpu type its jobs may use: the pools of the type and the running jobs on it
  (:data:`TypeInputs`), which carry room, usage (GPU-less jobs' CPUs and memory included),
  cohort balances and preemption candidates;
* every team's quota (with its caps on GPU-less work) and cohort (:func:`quota_inputs`), the
  policy and the gpu types present (a job that takes any type tries each of them);
* whether its jobs starve (a parked team has no starving job; its longest wait is kept);
* the used-up budgets the cycle enforces (``Snapshot.budgets``): a change unparks every team;
* the clock, through the running jobs' protection from preemption: a job younger than its
  priority's ``Policy.min_runtime_s`` may become a victim once it has run that long, so when
  that moment passed between two cycles nothing stays parked.

While all of these are equal in a later snapshot, deciding the team again would give each of
its jobs the reasons it got then; and since those decisions change nothing, leaving its jobs
out of the cycle changes no other decision. So the cycle is run without them, and their
reasons are the remembered ones.

A decision of the later cycle may touch a gpu type of a parked team (a new job fits on it,
say): then the parked team's decisions, interleaved with that one in head order, might differ.
The cycle is then run again with the teams of the touched types unparked, until no parked
team's type is touched: at most once per gpu type, and once with nothing parked after a claim
or a reservation (they touch every type). A snapshot with nominations, or a policy with
``max_admissions``, parks nothing.

Invariant: for ``result = lot.cycle(snapshot, policy, groups)``, ``result`` is what
``run_cycle`` gives on the same snapshot with every group's jobs pending, except that
``result.pending`` holds the reasons of the teams decided only; ``lot.parked_reasons()`` holds
the others (tested over random sequences of cycles). Parking is only a saving.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, replace
from itertools import chain
from operator import attrgetter

from gpupool.scheduler import (
    BudgetBlock,
    CycleResult,
    PendingJob,
    PendingReason,
    Policy,
    PoolView,
    RunningJob,
    Snapshot,
    TeamView,
    run_cycle,
)
from gpupool.scheduler.assignment import resolve_gpu_types

_BY_NAME = attrgetter("name")
# What the decisions on one gpu type read of a snapshot: its pools (name order) and the running
# jobs on it (snapshot order).
TypeInputs = tuple[tuple[PoolView, ...], tuple[RunningJob, ...]]
QuotaInputs = tuple[tuple[str, str | None, tuple[tuple[str, object], ...]], ...]
Groups = Mapping[str, tuple[PendingJob, ...]]


@dataclass(frozen=True, slots=True)
class ParkedTeam:
    """A team set aside: its queue when it was decided, the gpu types its jobs may use, its
    longest wait (a team with a starving job is decided again) and its jobs' reasons."""

    jobs: tuple[PendingJob, ...]
    types: frozenset[str]
    waiting_since: float
    reasons: dict[str, tuple[PendingReason, ...]]


class Parking:
    """The teams parked by the last cycle and what that cycle saw (see the module docstring)."""

    def __init__(self) -> None:
        self.teams: dict[str, ParkedTeam] = {}
        self._policy: Policy | None = None
        self._pools: tuple[PoolView, ...] = ()
        self._running: tuple[RunningJob, ...] = ()
        self._quotas: QuotaInputs = ()
        self._budgets: tuple[BudgetBlock, ...] = ()
        self._now = 0.0
        # Per team: (its queue, that queue's longest wait and accepted gpu types lists).
        self._facts: dict[str, tuple[tuple[PendingJob, ...], float, set[tuple[str, ...]]]] = {}

    def clear(self) -> None:
        self.teams = {}

    def parked_reasons(self) -> dict[str, tuple[PendingReason, ...]]:
        """The remembered reasons of every parked team's jobs."""
        return dict(chain.from_iterable(team.reasons.items() for team in self.teams.values()))

    def cycle(self, snapshot: Snapshot, policy: Policy, groups: Groups) -> CycleResult:
        """``run_cycle`` on ``snapshot`` with the jobs of ``groups`` (each team's pending jobs,
        in the queue order the store lists them; ``snapshot.pending`` is not read), deciding
        only the teams not parked. Teams unknown to ``snapshot`` are left out."""
        groups = {team: jobs for team, jobs in groups.items() if jobs and team in snapshot.teams}
        quotas = quota_inputs(snapshot.teams)
        kept = self._still_parked(snapshot, policy, quotas, groups)
        unparked: set[str] = set()
        while True:
            parked = {name: team for name, team in kept.items() if name not in unparked}
            pending = tuple(
                chain.from_iterable(jobs for team, jobs in groups.items() if team not in parked)
            )
            result = run_cycle(replace(snapshot, pending=pending), policy)
            touched = result.touched
            hit = {
                name
                for name, team in parked.items()
                if touched is None or not team.types.isdisjoint(touched)
            }
            if not hit:
                break
            unparked |= hit
        self._policy, self._pools, self._running = policy, snapshot.pools, snapshot.running
        self._quotas, self._now = quotas, snapshot.now
        self._budgets = snapshot.budgets
        self.teams = parked
        if touched is None or snapshot.nominations or policy.max_admissions is not None:
            return result
        present = sorted({pool.gpu_type for pool in snapshot.pools})
        for name, jobs in groups.items():
            if name in parked:
                continue
            types = _types_of(self._queue_facts(name, jobs)[1], policy, present)
            if not types.isdisjoint(touched):
                continue
            reasons = {}
            for job in jobs:
                found = result.pending.get(job.id)
                if found is None:
                    break  # not decided (a nominated preemptor): decided again next time
                reasons[job.id] = found
            else:
                waiting = self._queue_facts(name, jobs)[0]
                self.teams[name] = ParkedTeam(jobs, types, waiting, reasons)
        return result

    def _queue_facts(
        self, team: str, jobs: tuple[PendingJob, ...]
    ) -> tuple[float, set[tuple[str, ...]]]:
        """The earliest ``waiting_since`` of ``jobs`` and the gpu types lists they accept;
        remembered per team for the very tuple they were taken of (a store's queue hands the
        same tuple until the queue changes), so an unchanged queue is not walked each cycle."""
        known = self._facts.get(team)
        if known is None or known[0] is not jobs:
            waiting = min([job.waiting_since for job in jobs])
            known = self._facts[team] = (jobs, waiting, {job.gpu_types for job in jobs})
        return known[1], known[2]

    def _still_parked(
        self, snapshot: Snapshot, policy: Policy, quotas: QuotaInputs, groups: Groups
    ) -> dict[str, ParkedTeam]:
        if (
            not self.teams
            or snapshot.nominations
            or policy.max_admissions is not None
            or policy != self._policy
            or quotas != self._quotas
            or snapshot.budgets != self._budgets
            or _protection_ended(snapshot.running, policy, self._now, snapshot.now)
        ):
            return {}
        changed = changed_types(self._pools, self._running, snapshot.pools, snapshot.running)
        if changed and _present(self._pools) != _present(snapshot.pools):
            return {}  # a job that takes any gpu type now has other types to try
        after = policy.starvation_after_s
        starving_before = None if after is None else snapshot.now - after
        return {
            name: team
            for name, team in self.teams.items()
            if groups.get(name) == team.jobs
            and team.types.isdisjoint(changed)
            and (starving_before is None or team.waiting_since > starving_before)
        }


def type_inputs(
    pools: tuple[PoolView, ...], running: tuple[RunningJob, ...]
) -> dict[str, TypeInputs]:
    """Per gpu type (of a pool or of a running job): its pools by name and its running jobs."""
    by_type: dict[str, list[PoolView]] = {}
    for view in sorted(pools, key=_BY_NAME):
        by_type.setdefault(view.gpu_type, []).append(view)
    on: dict[str, list[RunningJob]] = {}
    for job in running:
        same = on.get(job.gpu_type)
        if same is None:
            same = on[job.gpu_type] = []
        same.append(job)
    return {
        gpu_type: (tuple(by_type.get(gpu_type, ())), tuple(on.get(gpu_type, ())))
        for gpu_type in sorted(by_type.keys() | on.keys())
    }


def changed_types(
    pools_before: tuple[PoolView, ...],
    running_before: tuple[RunningJob, ...],
    pools: tuple[PoolView, ...],
    running: tuple[RunningJob, ...],
) -> set[str]:
    """The gpu types whose :data:`TypeInputs` differ. The usual answer, nothing (the same pools
    and running jobs), costs one comparison of each tuple."""
    if pools_before == pools and running_before == running:
        return set()
    old, new = type_inputs(pools_before, running_before), type_inputs(pools, running)
    return {t for t in old.keys() | new.keys() if old.get(t) != new.get(t)}


def quota_inputs(teams: Mapping[str, TeamView]) -> QuotaInputs:
    """Every team's cohort and quotas: what any decision may read of the teams (weights and
    usage history order heads only, and a parked team's decisions do not depend on order)."""
    return tuple(
        (name, teams[name].cohort, tuple(sorted(teams[name].quota.items())))
        for name in sorted(teams)
    )


def groups_of(pending: Iterable[PendingJob]) -> dict[str, tuple[PendingJob, ...]]:
    """Pending jobs grouped by team, in the order given within each team."""
    groups: dict[str, list[PendingJob]] = {}
    for job in pending:
        groups.setdefault(job.team, []).append(job)
    return {team: tuple(jobs) for team, jobs in groups.items()}


def _types_of(accepted: set[tuple[str, ...]], policy: Policy, present: list[str]) -> frozenset[str]:
    """The gpu types jobs accepting ``accepted`` lists may use."""
    order = policy.gpu_type_order
    return frozenset(t for types in accepted for t in resolve_gpu_types(types, order, present))


def _protection_ended(
    running: tuple[RunningJob, ...], policy: Policy, before: float, now: float
) -> bool:
    """True when some running job reached its priority's minimum run time after ``before`` and
    by ``now``: it may be preempted now, which no decision of the last cycle saw."""
    least = policy.min_runtime_s
    if not least:
        return False
    for job in running:
        runtime = least.get(job.priority)
        if runtime is not None and before < job.started_at + runtime <= now:
            return True
    return False


def _present(pools: tuple[PoolView, ...]) -> set[str]:
    return {pool.gpu_type for pool in pools}
