"""The state gauges, computed from what the leading controller last saw: no I/O, no clock.

A scrape reads the last :class:`~gpupool.controller.observer.CycleSeen` (the snapshot the cycle
decided on, each team's queue, its result) and the admissions of that cycle, and turns them
into samples. The cost is one pass over the active jobs and the pools' nodes, in memory (the
store is never read), and over the queued jobs of the teams a cycle decided since the last
scrape: a team parked since then has the same queue and the same reasons, so its counts are
kept (:class:`PendingCache`).

What the numbers mean, so that they add up:

* every queued job is counted once in ``pending_jobs``, under its first reason (the gpu type
  it prefers); a job admitted by the last cycle is not pending but admitted;
* ``admitted_jobs + running_jobs`` are the jobs holding GPUs; ``quota_used_gpus`` and
  ``pool_allocated_gpus`` count the same GPUs, per team and per pool;
* ``quota_borrowed_gpus = max(0, used - nominal)`` and, per cohort and gpu type, the lent
  GPUs sum to the borrowed ones (shared among lenders in proportion to what each may lend;
  ``core.quota`` says why that attribution always exists).
"""

from __future__ import annotations

import threading
from collections import Counter, defaultdict
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field

from gpupool.controller.observer import CycleSeen
from gpupool.core.quota import Quota
from gpupool.scheduler import PendingJob, PendingReason
from gpupool.server.metrics import catalog
from gpupool.server.metrics.catalog import MetricSpec

Labels = tuple[str, ...]
Samples = dict[MetricSpec, dict[Labels, float]]
UNDECIDED = "undecided"  # a queued job no cycle has given a reason yet
ANY_TYPE = "any"  # ... that accepts any gpu type


@dataclass(frozen=True)
class AdmittedNow:
    """An admission of the last cycle: its job is neither in the queue nor in the snapshot's
    active jobs until the next cycle reads the store again."""

    job_id: str
    team: str
    gpu_type: str
    pool: str
    gpus: int


@dataclass(frozen=True)
class Published:
    """The last cycle as the gauges read it: ``cycle`` numbers the cycles of this process,
    ``decided`` says per team the last cycle that decided it (did not park it)."""

    seen: CycleSeen
    admitted: tuple[AdmittedNow, ...]
    cycle: int = 0
    decided: Mapping[str, int] = field(default_factory=dict)


def state_samples(
    seen: CycleSeen,
    admitted: Iterable[AdmittedNow],
    available: Callable[[str], bool],
    pending: Mapping[Labels, float] | None = None,
) -> Samples:
    """Every sample of :data:`catalog.STATE`; ``available``: whether a pool's backend answers;
    ``pending``: the pending counts when already known (:class:`PendingCache`)."""
    admitted = tuple(admitted)
    samples: Samples = {spec: {} for spec in catalog.STATE}
    if pending is None:
        just_admitted = {a.job_id for a in admitted}
        pending = Counter()
        for team, jobs in seen.queued.items():
            pending.update(team_pending(team, jobs, seen.reasons, just_admitted))
    samples[catalog.PENDING].update(pending)
    _jobs(seen, admitted, samples)
    used = _used(seen, admitted)
    _quota(seen, used, samples)
    _pools(seen, admitted, available, samples)
    return samples


def team_pending(
    team: str,
    jobs: tuple[PendingJob, ...],
    reasons_of: Callable[[str], tuple[PendingReason, ...] | None],
    just_admitted: set[str],
) -> Counter[Labels]:
    """One team's queued jobs by (team, gpu type, reason) of their first reason."""
    pending: Counter[Labels] = Counter()
    for job in jobs:
        if job.id in just_admitted:
            continue
        reasons = reasons_of(job.id)
        if reasons:
            pending[(team, reasons[0].gpu_type, reasons[0].code.value)] += 1
        else:
            first = job.gpu_types[0] if job.gpu_types else ANY_TYPE
            pending[(team, first, UNDECIDED)] += 1
    return pending


class PendingCache:
    """Pending counts per team, kept between scrapes for teams no cycle decided since.

    A team's entry holds the queue it was counted from (the very tuple: the controller's state
    keeps a team's tuple while its jobs are unchanged) and the cycle it was counted at. It is
    reused while the queue is the same tuple and no later cycle decided the team: then every
    job of it has the reasons it had (a parked team's reasons are not rewritten). Thread-safe:
    concurrent scrapes take turns.
    """

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._teams: dict[str, tuple[tuple[PendingJob, ...], int, Counter[Labels]]] = {}

    def counts(self, published: Published) -> Counter[Labels]:
        seen = published.seen
        just_admitted = {a.job_id for a in published.admitted}
        total: Counter[Labels] = Counter()
        with self._lock:
            kept = {}
            for team, jobs in seen.queued.items():
                entry = self._teams.get(team)
                if (
                    entry is None
                    or entry[0] is not jobs
                    or published.decided.get(team, published.cycle) > entry[1]
                ):
                    counted = team_pending(team, jobs, seen.reasons, just_admitted)
                    entry = (jobs, published.cycle, counted)
                kept[team] = entry
                total.update(entry[2])
            self._teams = kept
        return total


def _jobs(seen: CycleSeen, admitted: tuple[AdmittedNow, ...], samples: Samples) -> None:
    active: dict[MetricSpec, Counter[Labels]] = {
        catalog.ADMITTED: Counter(),
        catalog.RUNNING: Counter(),
    }
    for running in seen.snapshot.running:
        spec = catalog.RUNNING if seen.started(running.id) else catalog.ADMITTED
        active[spec][(running.team, running.gpu_type)] += 1
    for admission in admitted:
        active[catalog.ADMITTED][(admission.team, admission.gpu_type)] += 1
    for spec, counts in active.items():
        samples[spec].update(counts)


def _used(seen: CycleSeen, admitted: tuple[AdmittedNow, ...]) -> Counter[tuple[str, str]]:
    used: Counter[tuple[str, str]] = Counter()
    for running in seen.snapshot.running:
        used[(running.team, running.gpu_type)] += running.gpus
    for admission in admitted:
        used[(admission.team, admission.gpu_type)] += admission.gpus
    return used


def _quota(seen: CycleSeen, used: Counter[tuple[str, str]], samples: Samples) -> None:
    # cohort, gpu type -> [(team, what it may lend now)], and what the cohort borrows
    lendable: dict[tuple[str, str], list[tuple[str, int]]] = defaultdict(list)
    borrowed: Counter[tuple[str, str]] = Counter()
    for name, team in seen.snapshot.teams.items():
        for gpu_type, view in team.quota.items():
            quota = Quota(view.nominal, view.borrowing_limit, view.lending_limit)
            held = used[(name, gpu_type)]
            key = (name, gpu_type)
            samples[catalog.NOMINAL][key] = quota.nominal
            if quota.borrowing_limit is not None:
                samples[catalog.BORROWING_LIMIT][key] = quota.borrowing_limit
            if quota.lending_limit is not None:
                samples[catalog.LENDING_LIMIT][key] = quota.lending_limit
            samples[catalog.USED][key] = held
            samples[catalog.BORROWED][key] = quota.borrowed(held)
            samples[catalog.LENT][key] = 0
            if team.cohort is not None:
                lendable[(team.cohort, gpu_type)].append((name, quota.lendable(held)))
                borrowed[(team.cohort, gpu_type)] += quota.borrowed(held)
    for (cohort, gpu_type), lenders in lendable.items():
        total = sum(can for _, can in lenders)
        if total == 0:
            continue
        # More borrowed than lendable happens only until reclaim repairs it: lend all then.
        share = min(1.0, borrowed[(cohort, gpu_type)] / total)
        for name, can in lenders:
            samples[catalog.LENT][(name, gpu_type)] = can * share


def _pools(
    seen: CycleSeen,
    admitted: tuple[AdmittedNow, ...],
    available: Callable[[str], bool],
    samples: Samples,
) -> None:
    taken: Counter[str] = Counter()
    for admission in admitted:
        taken[admission.pool] += admission.gpus
    for pool in seen.snapshot.pools:
        capacity = sum(node.gpus for node in pool.nodes)
        allocated = taken[pool.name] + sum(len(node.used_devices) for node in pool.nodes)
        samples[catalog.POOL_CAPACITY][(pool.name, pool.gpu_type, pool.backend)] = capacity
        samples[catalog.POOL_ALLOCATED][(pool.name, pool.gpu_type)] = allocated
        samples[catalog.POOL_IDLE][(pool.name, pool.gpu_type)] = max(0, capacity - allocated)
        samples[catalog.POOL_AVAILABLE][(pool.name, pool.backend)] = float(available(pool.name))
