"""Parking: a cycle skips the teams whose decisions cannot have changed since an earlier cycle.

Kueue sets inadmissible workloads aside until a cluster event; here the skip is exact. A team is
*parked* after a cycle in which no admission, claim or reservation touched any gpu type its jobs
may use: each of its decisions was then made on the cycle's starting state of those types, and
none of them changed anything. What those decisions read (see :mod:`gpupool.scheduler.memo` for
the same argument within one cycle) is:

* the team's queue: its pending jobs, compared as the snapshot lists them;
* per gpu type its jobs may use: the pools of the type and the running jobs on it
  (:data:`TypeInputs`), which carry room, usage (GPU-less jobs' CPUs and memory included),
  cohort balances and preemption candidates;
* every team's quota (with its caps on GPU-less work) and cohort (:func:`quota_inputs`), the
  policy and the gpu types present
  (a job that takes any type tries each of them);
* whether its jobs starve (a parked team has no starving job; its longest wait is kept).

While all of these are equal in a later snapshot, deciding the team again would give each of its
jobs the reasons it got then; and since those decisions change nothing, leaving them out changes
no other decision. So the cycle skips the team and hands out the remembered reasons.

A decision of the later cycle may touch a gpu type of a parked team (a new job fits on it, say):
then the parked team's decisions, interleaved with that one in head order, might differ. The
cycle is then run again with the teams of the touched types taken off the parked set
(:class:`Interrupted`), until no parked team's type is touched: at most once per gpu type, and
once with nothing parked after a claim or a reservation (they touch every type).

Invariant: ``run_cycle(s, p, parking)`` returns what ``run_cycle(s, p)`` returns (tested over
random sequences of cycles); parking is only a saving. It needs the snapshot's pending jobs
grouped by team (the controller's query returns them so); otherwise nothing is parked.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from operator import attrgetter

from gpupool.scheduler.snapshot import (
    ParkedTeam,
    Parking,
    PendingJob,
    PendingReason,
    Policy,
    PoolView,
    RunningJob,
    Snapshot,
    TeamView,
)
from gpupool.scheduler.workspace import Workspace

_BY_NAME = attrgetter("name")
_WAITING_SINCE = attrgetter("waiting_since")
# What the decisions on one gpu type read of a snapshot: its pools (name order) and the running
# jobs on it (snapshot order).
TypeInputs = tuple[tuple[PoolView, ...], tuple[RunningJob, ...]]
QuotaInputs = tuple[tuple[str, str | None, tuple[tuple[str, object], ...]], ...]


class Interrupted(Exception):
    """A decision touched these gpu types of parked teams (every type: ``types`` is None)."""

    def __init__(self, types: frozenset[str] | None) -> None:
        super().__init__(types)
        self.types = types


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
    before: Parking, pools: tuple[PoolView, ...], running: tuple[RunningJob, ...]
) -> set[str]:
    """The gpu types whose :data:`TypeInputs` differ between ``before`` and now. The usual
    answer, nothing (the same pools and running jobs), costs one comparison of each tuple."""
    if before.pools == pools and before.running == running:
        return set()
    old, new = type_inputs(before.pools, before.running), type_inputs(pools, running)
    return {t for t in old.keys() | new.keys() if old.get(t) != new.get(t)}


def quota_inputs(teams: Mapping[str, TeamView]) -> QuotaInputs:
    """Every team's cohort and quotas: what any decision may read of the teams (weights and
    usage history order heads only, and a parked team's decisions do not depend on order)."""
    return tuple(
        (name, teams[name].cohort, tuple(sorted(teams[name].quota.items())))
        for name in sorted(teams)
    )


def group_by_team(
    pending: tuple[PendingJob, ...], previous: Mapping[str, tuple[PendingJob, ...]]
) -> dict[str, tuple[PendingJob, ...]] | None:
    """Each team's pending jobs as listed, or None when a team's jobs are not listed together.

    A team whose jobs are those of ``previous`` (the last cycle's groups) is matched with one
    comparison of the slice (in C) and keeps that very tuple; only the other teams' jobs are
    walked one by one."""
    groups: dict[str, tuple[PendingJob, ...]] = {}
    start, n = 0, len(pending)
    while start < n:
        team = pending[start].team
        if team in groups:
            return None
        before = previous.get(team)
        end = start + len(before) if before is not None else -1
        if before is not None and pending[start:end] == before:
            if end < n and pending[end].team == team:
                end = _run_end(pending, end, team)
                groups[team] = pending[start:end]
            else:
                groups[team] = before
        else:
            end = _run_end(pending, start + 1, team)
            groups[team] = pending[start:end]
        start = end
    return groups


def _run_end(pending: tuple[PendingJob, ...], at: int, team: str) -> int:
    """The end of the run of ``team``'s jobs that goes on at ``at``."""
    n = len(pending)
    while at < n and pending[at].team == team:
        at += 1
    return at


def still_parked(
    parking: Parking,
    policy: Policy,
    snapshot: Snapshot,
    quotas: QuotaInputs,
    groups: Mapping[str, tuple[PendingJob, ...]],
    starving_before: float | None,
) -> dict[str, ParkedTeam]:
    """The teams of ``parking`` that stay parked on ``snapshot`` (see the module docstring)."""
    if not parking.teams or parking.policy != policy or parking.quotas != quotas:
        return {}
    changed = changed_types(parking, snapshot.pools, snapshot.running)
    if changed and _types_of(parking.pools) != _types_of(snapshot.pools):
        return {}  # a job that takes any gpu type now has other types to try
    return {
        team: known
        for team, known in parking.teams.items()
        if groups.get(team) == parking.groups[team]
        and known.types.isdisjoint(changed)
        and (starving_before is None or known.waiting_since > starving_before)
    }


def _types_of(pools: tuple[PoolView, ...]) -> set[str]:
    return {pool.gpu_type for pool in pools}


def touched_types(ws: Workspace, among: Iterable[str]) -> frozenset[str] | None:
    """The types of ``among`` that a decision of this cycle changed; None: every type (a claim
    or a reservation moves the rare epoch, and with it everything)."""
    if ws.rare_epoch:
        return None
    return frozenset(t for t in among if ws.room_epoch(t))


def parked_team(given: tuple[PendingJob, ...], types: frozenset[str]) -> ParkedTeam:
    """A team with these jobs, decided in a cycle that touched none of ``types``."""
    return ParkedTeam(types=types, waiting_since=min(map(_WAITING_SINCE, given)))


def remembered_reasons(
    parking: Parking,
    parked: Mapping[str, ParkedTeam],
    groups: Mapping[str, tuple[PendingJob, ...]],
) -> dict[str, tuple[PendingReason, ...]]:
    """A copy of the reasons ``parking`` remembers, less those of jobs no longer pending in a
    team that is not parked now (its pending jobs are decided again and overwrite theirs).
    Nothing is removed in the usual cycle, so the copy stays one table copy (in C)."""
    reasons = dict(parking.reasons)
    for name in parking.teams:
        if name not in parked:
            still = {job.id for job in groups.get(name, ())}
            for job in parking.groups[name]:
                if job.id not in still:
                    reasons.pop(job.id, None)
    return reasons


def next_parking(
    policy: Policy,
    snapshot: Snapshot,
    quotas: QuotaInputs,
    groups: dict[str, tuple[PendingJob, ...]],
    teams: dict[str, ParkedTeam],
    pending: Mapping[str, tuple[PendingReason, ...]],
    dropped: Iterable[tuple[PendingJob, ...]],
) -> Parking:
    """The parking a cycle hands on: ``teams``, and the reasons of their jobs taken from the
    cycle's ``pending`` less the jobs of the teams ``dropped`` (decided, but not parked)."""
    reasons = dict(pending)
    for given in dropped:
        for job in given:
            reasons.pop(job.id, None)
    return Parking(
        policy=policy,
        pools=snapshot.pools,
        running=snapshot.running,
        quotas=quotas,
        groups=groups,
        teams=teams,
        reasons=reasons,
    )
