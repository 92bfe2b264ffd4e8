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

import heapq
from dataclasses import dataclass, field

from gpupool.scheduler.assignment import Assignment, FitMode, assign, job_shape, resolve_gpu_types
from gpupool.scheduler.queues import HeadKey, TeamQueue, build_queues, head_order
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


class _Heads:
    """The head of every team's queue in :func:`~gpupool.scheduler.queues.head_order`."""

    def __init__(self, ws: Workspace, policy: Policy) -> None:
        self._ws = ws
        self._present = sorted(ws.pools_by_type)
        self._policy = policy
        self._types: dict[tuple[str, ...], tuple[str, ...]] = {}
        self._heap: list[tuple[HeadKey, str]] = []
        self._queues: dict[str, TeamQueue] = {}

    def gpu_types(self, job: PendingJob) -> tuple[str, ...]:
        types = self._types.get(job.gpu_types)
        if types is None:
            types = resolve_gpu_types(job.gpu_types, self._policy.gpu_type_order, self._present)
            self._types[job.gpu_types] = types
        return types

    def push(self, queue: TeamQueue) -> None:
        """(Re-)enter a team with its current head; a team with an empty queue leaves."""
        job = queue.head
        if job is None:
            return
        self._queues[queue.team] = queue
        within = any(
            self._ws.within_nominal(job.team, t, job.total_gpus) for t in self.gpu_types(job)
        )
        key = head_order(within, self._ws.share(queue.team), job)
        heapq.heappush(self._heap, (key, queue.team))

    def pop(self) -> TeamQueue | None:
        if not self._heap:
            return None
        _, team = heapq.heappop(self._heap)
        return self._queues[team]


def admit_heads(queues: list[TeamQueue], ws: Workspace, policy: Policy) -> Decisions:
    """Step 3: decide heads one at a time, best head first, until queues or the bound run out."""
    decisions = Decisions()
    heads = _Heads(ws, policy)
    for team_queue in queues:
        heads.push(team_queue)
    failures: dict[_MemoKey, tuple[int, Assignment]] = {}
    limit = policy.max_admissions
    while limit is None or len(decisions.admissions) < limit:
        queue = heads.pop()
        if queue is None:
            break
        job = queue.head
        assert job is not None  # only teams with a head are in the heap
        outcome = _assign_remembering(job, heads.gpu_types(job), ws, failures)
        if outcome.mode is FitMode.FIT:
            decisions.admissions.append(_apply(job, outcome, ws))
        else:
            decisions.pending[job.id] = outcome.reasons
        queue.advance()
        heads.push(queue)
    return decisions


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
