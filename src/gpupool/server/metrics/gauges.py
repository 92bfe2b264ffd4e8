"""The state gauges, computed from what the leading controller last saw: no I/O, no clock.

A scrape reads the last :class:`~gpupool.controller.observer.CycleSeen` (the snapshot the cycle
decided on, each team's queue, its result) and the admissions of that cycle, and turns them
into samples. The cost is one pass over the queued and the active jobs and over the pools'
nodes, in memory; the store is never read.

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

from collections import Counter, defaultdict
from collections.abc import Callable, Iterable
from dataclasses import dataclass

from gpupool.controller.observer import CycleSeen
from gpupool.core.quota import Quota
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


def state_samples(
    seen: CycleSeen, admitted: Iterable[AdmittedNow], available: Callable[[str], bool]
) -> Samples:
    """Every sample of :data:`catalog.STATE`; ``available``: whether a pool's backend answers."""
    admitted = tuple(admitted)
    samples: Samples = {spec: {} for spec in catalog.STATE}
    _jobs(seen, admitted, samples)
    used = _used(seen, admitted)
    _quota(seen, used, samples)
    _pools(seen, admitted, available, samples)
    return samples


def _jobs(seen: CycleSeen, admitted: tuple[AdmittedNow, ...], samples: Samples) -> None:
    just_admitted = {a.job_id for a in admitted}
    pending: Counter[Labels] = Counter()
    for team, jobs in seen.queued.items():
        for job in jobs:
            if job.id in just_admitted:
                continue
            reasons = seen.reasons(job.id)
            if reasons:
                pending[(team, reasons[0].gpu_type, reasons[0].code.value)] += 1
            else:
                first = job.gpu_types[0] if job.gpu_types else ANY_TYPE
                pending[(team, first, UNDECIDED)] += 1
    active: dict[MetricSpec, Counter[Labels]] = {
        catalog.ADMITTED: Counter(),
        catalog.RUNNING: Counter(),
    }
    for running in seen.snapshot.running:
        spec = catalog.RUNNING if seen.started(running.id) else catalog.ADMITTED
        active[spec][(running.team, running.gpu_type)] += 1
    for admission in admitted:
        active[catalog.ADMITTED][(admission.team, admission.gpu_type)] += 1
    samples[catalog.PENDING].update(pending)
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
