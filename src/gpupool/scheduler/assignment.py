"""Assignment: which gpu type, pool and nodes a job gets, graded and explained
(docs/architecture.md §5.3-5.5).

For each acceptable gpu type in order, :func:`assign` checks, cheapest and most permanent first:

1. a pool of the type exists that the team may use (else NO_POOL);
2. one of those pools, empty, could hold the job (else TOO_LARGE);
3. the team's quota and its cohort allow the GPUs (else QUOTA or COHORT), and for a GPU-less job
   the team's cap on the CPUs and memory of its GPU-less jobs on the type (else QUOTA: the cap
   is hard, so preemption and reservations skip such a type, see :func:`gpuless_fits`);
4. a pool has the nodes free now (else CAPACITY).

The first type that fits wins (spill-over). The result is graded by :class:`FitMode`; the
preemption pass (:mod:`gpupool.scheduler.preemption`) grades ``PREEMPT`` between ``NO_FIT`` and
``FIT`` and runs only when no type fits outright. Nothing here changes the workspace: the caller
applies a fit.

Pool order (one comparator): fewest free GPUs left on the picked nodes (packs best, keeping
whole nodes free for gangs), then the weighted rendezvous hash of the job id over the tied pools
(weight = pool GPUs, so ties spread over equivalent pools in proportion to their size).
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import IntEnum
from functools import lru_cache

from gpupool.core.hashing import rendezvous_order
from gpupool.core.quota import GpulessCheck, check_gpuless, check_quota, gpuless_charge
from gpupool.scheduler import reasons
from gpupool.scheduler.capacity import NodePick, PoolRoom, Shape
from gpupool.scheduler.snapshot import PendingJob, PendingReason, RunningJob
from gpupool.scheduler.workspace import Workspace


class FitMode(IntEnum):
    """How well a job fits; higher is better. ``PREEMPT``: it fits once running jobs end."""

    NO_FIT = 0
    PREEMPT = 1
    FIT = 2


@dataclass(frozen=True, slots=True)
class Assignment:
    """The decision for one job. With ``FIT``: where it goes and how much of it is borrowed.

    With ``PREEMPT``: the gpu type, the running jobs to preempt now (``victims``, in candidate
    order), why each is preempted (``notes``, a sentence per victim) and the terminating jobs
    it waits for besides (``ending``).
    """

    mode: FitMode
    reasons: tuple[PendingReason, ...] = ()
    gpu_type: str = ""
    pick: NodePick | None = None
    borrowed: int = 0
    victims: tuple[RunningJob, ...] = ()
    notes: tuple[str, ...] = ()
    ending: tuple[RunningJob, ...] = ()


def job_shape(job: PendingJob) -> Shape:
    return _shape(job.gpus, job.nodes, job.cpus, job.memory_gb)


@lru_cache(maxsize=4096, typed=True)
def _shape(gpus: int, nodes: int, cpus: float, memory_gb: float) -> Shape:
    """One :class:`Shape` per distinct request (a queue has a few): a decision asks for a job's
    shape several times, and building a frozen dataclass costs more than this lookup."""
    return Shape(gpus, nodes, cpus, memory_gb)


def resolve_gpu_types(
    requested: tuple[str, ...], policy_order: tuple[str, ...], present: list[str]
) -> tuple[str, ...]:
    """The gpu types to try, in order: the job's own list, or for ``any`` the policy order and
    then every other type that has a pool, by name. Duplicates keep their first place."""
    if requested:
        return tuple(dict.fromkeys(requested))
    return tuple(dict.fromkeys((*policy_order, *sorted(present))))


def assign(job: PendingJob, gpu_types: tuple[str, ...], ws: Workspace) -> Assignment:
    """Try ``gpu_types`` in order and return the first fit, or every type's reason."""
    if not gpu_types:
        return Assignment(FitMode.NO_FIT, (reasons.no_gpu_type(),))
    shape = job_shape(job)
    found: list[PendingReason] = []
    for gpu_type in gpu_types:
        outcome = assign_type(job, shape, gpu_type, ws)
        if outcome.mode is FitMode.FIT:
            return outcome
        found.extend(outcome.reasons)
    return Assignment(FitMode.NO_FIT, tuple(found))


def usable_pools(
    job: PendingJob, shape: Shape, gpu_type: str, ws: Workspace
) -> tuple[PoolRoom, ...]:
    """The pools of ``gpu_type`` the job's team may use (of its pinned backend, if any) that,
    empty, could hold ``shape``."""
    return ws.usable_pools(job.team, shape, gpu_type, job.backend)


def assign_type(job: PendingJob, shape: Shape, gpu_type: str, ws: Workspace) -> Assignment:
    """One gpu type of :func:`assign`: FIT, or NO_FIT with the one reason of the first failed
    check (its code says which check, hence what the answer depends on)."""
    pools = ws.team_pools(job.team, gpu_type, job.backend)
    if not pools:
        if job.backend is not None and ws.team_pools(job.team, gpu_type):
            return _no_fit(reasons.no_pool_of_backend(gpu_type, job.backend))
        exists = ws.has_pools(gpu_type)
        return _no_fit(reasons.no_pool(gpu_type, job.team, exists=exists))
    holding = ws.usable_pools(job.team, shape, gpu_type, job.backend)
    if not holding:
        no_gangs = sorted({p.view.backend for p in pools if not p.view.gang})
        if shape.nodes > 1 and no_gangs:
            return _no_fit(reasons.no_gang(gpu_type, shape, no_gangs))
        return _no_fit(reasons.too_large(gpu_type, shape))
    check = check_quota(
        ws.quota(job.team, gpu_type),
        ws.used(job.team, gpu_type),
        job.total_gpus,
        ws.cohort_balance(job.team, gpu_type),
    )
    if not check.fits:
        return _no_fit(reasons.quota(gpu_type, job.team, ws.team(job.team).cohort, check))
    if shape.gpus == 0:
        capped = check_gpuless_cap(job, gpu_type, ws)
        if not capped.fits:
            return _no_fit(reasons.gpuless_cap(gpu_type, job.team, capped))
    # A pool that could never hold the job has no pick: only ``holding`` needs asking.
    picks = [pick for pool in holding if (pick := pool.pick(shape)) is not None]
    if not picks:
        max_free = max(pool.max_free_gpus() for pool in pools)
        return _no_fit(reasons.capacity(gpu_type, shape, len(pools), max_free))
    return Assignment(
        FitMode.FIT, gpu_type=gpu_type, pick=best_pick(job.id, picks), borrowed=check.borrowed
    )


def check_gpuless_cap(job: PendingJob, gpu_type: str, ws: Workspace) -> GpulessCheck:
    """The team's cap on its GPU-less jobs' CPUs and memory on ``gpu_type``, for ``job``."""
    return check_gpuless(
        ws.quota(job.team, gpu_type),
        ws.gpuless_used(job.team, gpu_type),
        gpuless_charge(job.cpus, job.memory_gb, job.nodes),
    )


def gpuless_fits(job: PendingJob, gpu_type: str, ws: Workspace) -> bool:
    """False only for a GPU-less job its team's cap stops on ``gpu_type``: nothing but its own
    team's GPU-less jobs ending can change that, so neither preempting others nor holding room
    for it helps."""
    return job.gpus != 0 or check_gpuless_cap(job, gpu_type, ws).fits


def _no_fit(reason: PendingReason) -> Assignment:
    return Assignment(FitMode.NO_FIT, (reason,))


def best_pick(job_id: str, picks: list[NodePick]) -> NodePick:
    """Tightest packing first; ties by weighted rendezvous hash of the job id over pool names."""
    tightest = min(pick.slack for pick in picks)
    tied = {pick.pool.name: pick for pick in picks if pick.slack == tightest}
    if len(tied) == 1:
        return next(iter(tied.values()))
    order = rendezvous_order(
        job_id, [(name, _pool_weight(tied[name].pool)) for name in sorted(tied)]
    )
    return tied[order[0]]


def _pool_weight(pool: PoolRoom) -> float:
    # CPU-only pools have no GPUs; their node count stands in so the weight stays positive.
    return float(pool.total_gpus or len(pool.nodes) or 1)
