"""One scheduling cycle: ``run_cycle(snapshot, policy) -> CycleResult`` (DESIGN §5).

The cycle is a pipeline; each numbered step is one function:

1. :func:`build_workspace` copies the snapshot into a mutable :class:`Workspace`.
2. :func:`build_queues` makes one queue per team (:mod:`gpupool.scheduler.queues`).
3. :func:`admit_heads` repeatedly takes the best head across teams, assigns it
   (:mod:`gpupool.scheduler.assignment`) and either applies the admission to the workspace at
   once or sets the job aside with its reasons, letting the team's next job go (best-effort FIFO).
4. :func:`collect_result` freezes the decisions into a :class:`CycleResult`.

Invariants: the snapshot is never changed; the same snapshot and policy give the same result
(every ordering ends in an id, nothing iterates an unsorted set or uses ``hash()``); every
pending job considered ends up either admitted or in ``pending`` with at least one reason.
When ``policy.max_admissions`` is reached the cycle stops: jobs not yet considered get no entry
in ``pending`` (their previous reasons stay valid for ``why``).

Preemption, starvation reservations and decayed fair share are later steps: preemption will run
inside step 3 for a head that has no outright fit, and report into the same decisions.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field

from gpupool.scheduler.assignment import Assignment, FitMode, assign, job_shape, resolve_gpu_types
from gpupool.scheduler.queues import HeadKey, Heads, TeamQueue, build_queues, head_order
from gpupool.scheduler.snapshot import (
    Admission,
    CycleResult,
    PendingJob,
    PendingReason,
    Policy,
    Snapshot,
)
from gpupool.scheduler.workspace import Workspace

_MemoKey = tuple[str, int, int, float, float, tuple[str, ...]]


@dataclass(slots=True)
class Decisions:
    """What step 3 decided so far, in decision order."""

    admissions: list[Admission] = field(default_factory=list)
    pending: dict[str, tuple[PendingReason, ...]] = field(default_factory=dict)


def run_cycle(snapshot: Snapshot, policy: Policy | None = None) -> CycleResult:
    """Decide which pending jobs start now, where, and why the others wait."""
    policy = policy if policy is not None else Policy()
    workspace = build_workspace(snapshot)  # 1
    queues = build_queues(snapshot.pending)  # 2
    decisions = admit_heads(queues, workspace, policy)  # 3
    return collect_result(decisions)  # 4


def build_workspace(snapshot: Snapshot) -> Workspace:
    """Step 1: the mutable copy that admissions of this cycle are applied to."""
    return Workspace(snapshot)


def admit_heads(queues: list[TeamQueue], ws: Workspace, policy: Policy) -> Decisions:
    """Step 3: decide heads one at a time, best head first, until queues or the bound run out."""
    decisions = Decisions()
    types_of = _GpuTypes(ws, policy)
    heads = Heads(queues, _head_key(ws, types_of))
    failures: dict[_MemoKey, tuple[int, Assignment]] = {}
    limit = policy.max_admissions
    while limit is None or len(decisions.admissions) < limit:
        queue = heads.top()
        if queue is None:
            break
        job = queue.head
        assert job is not None  # only teams with a head are in the heap
        outcome = _assign_remembering(job, types_of(job), ws, failures)
        if outcome.mode is FitMode.FIT:
            decisions.admissions.append(_apply(job, outcome, ws))
        else:
            decisions.pending[job.id] = outcome.reasons
        heads.advance_top()  # after _apply: the team's next key must see its new usage
    return decisions


def _head_key(ws: Workspace, types_of: _GpuTypes) -> Callable[[PendingJob], HeadKey]:
    """The head order of :mod:`gpupool.scheduler.queues`, read from the workspace now."""

    def key(job: PendingJob) -> HeadKey:
        need = job.total_gpus
        within = any(ws.within_nominal(job.team, t, need) for t in types_of(job))
        return head_order(within, ws.share(job.team), job)

    return key


class _GpuTypes:
    """The gpu types to try for a job (:func:`resolve_gpu_types`), remembered per request."""

    def __init__(self, ws: Workspace, policy: Policy) -> None:
        self._present = sorted(ws.pools_by_type)
        self._order = policy.gpu_type_order
        self._known: dict[tuple[str, ...], tuple[str, ...]] = {}

    def __call__(self, job: PendingJob) -> tuple[str, ...]:
        types = self._known.get(job.gpu_types)
        if types is None:
            types = self._known[job.gpu_types] = resolve_gpu_types(
                job.gpu_types, self._order, self._present
            )
        return types


def _assign_remembering(
    job: PendingJob,
    types: tuple[str, ...],
    ws: Workspace,
    failures: dict[_MemoKey, tuple[int, Assignment]],
) -> Assignment:
    """:func:`assign`, reusing the failure of an identical job of the same team.

    The answer depends only on the team, the job's shape and types, and the workspace, which
    changes only when the epoch moves; so a failure at the current epoch is still the answer.
    This makes a cycle in which nothing fits cost one dictionary lookup per repeated job.
    """
    key = (job.team, job.gpus, job.nodes, job.cpus, job.memory_gb, types)
    known = failures.get(key)
    if known is not None and known[0] == ws.epoch:
        return known[1]
    outcome = assign(job, types, ws)
    if outcome.mode is FitMode.NO_FIT:
        failures[key] = (ws.epoch, outcome)
    return outcome


def _apply(job: PendingJob, outcome: Assignment, ws: Workspace) -> Admission:
    """Apply a fit to the workspace at once so later decisions of this cycle see it."""
    pick = outcome.pick
    assert pick is not None  # a FIT always carries its pick
    placements = ws.apply(job.team, outcome.gpu_type, pick.pool, pick.nodes, job_shape(job))
    return Admission(job.id, outcome.gpu_type, pick.pool.name, placements, outcome.borrowed)


def collect_result(decisions: Decisions) -> CycleResult:
    """Step 4: the immutable result; admissions keep their decision order."""
    return CycleResult(admissions=tuple(decisions.admissions), pending=dict(decisions.pending))
