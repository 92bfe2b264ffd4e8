"""One scheduling cycle: ``run_cycle(snapshot, policy) -> CycleResult`` (DESIGN §5).

The cycle is a pipeline; each numbered step is one function:

1. :func:`build_workspace` copies the snapshot into a mutable :class:`Workspace`.
2. :func:`build_queues` makes one queue per team (:mod:`gpupool.scheduler.queues`), starving
   jobs first.
3. :func:`admit_heads` repeatedly takes the best head across teams and decides it
   (:func:`decide`): admit it where it fits outright (:mod:`gpupool.scheduler.assignment`) or by
   backfilling held room; else claim victims or ending jobs (:mod:`gpupool.scheduler.preemption`);
   else set it aside with its reasons, holding room for it when it starves
   (:mod:`gpupool.scheduler.reservations`), and let the team's next job go (best-effort FIFO).
4. :func:`collect_result` freezes the decisions into a :class:`CycleResult`.

Invariants: the snapshot is never changed; the same snapshot and policy give the same result
(every ordering ends in an id, nothing iterates an unsorted set or uses ``hash()``); every
pending job considered ends up either admitted or in ``pending`` with at least one reason. A
preemptor is never admitted in the cycle it preempts (it waits with PREEMPTING until its victims
have ended); at most ``policy.preemption_budget`` jobs are preempted per cycle. When
``policy.max_admissions`` is reached the cycle stops: jobs not yet considered get no entry in
``pending`` (their previous reasons stay valid for ``why``).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field

from gpupool.scheduler import reasons
from gpupool.scheduler.assignment import Assignment, FitMode, assign, job_shape, resolve_gpu_types
from gpupool.scheduler.preemption import Preemptor
from gpupool.scheduler.queues import (
    HeadKey,
    Heads,
    TeamQueue,
    build_queues,
    head_order,
    history_key,
    share_key,
)
from gpupool.scheduler.reservations import Reservations
from gpupool.scheduler.snapshot import (
    Admission,
    CycleResult,
    PendingJob,
    PendingReason,
    Policy,
    Preemption,
    Snapshot,
)
from gpupool.scheduler.workspace import Workspace

_MemoKey = tuple[str, int, int, float, float, tuple[str, ...]]
# The fallback also depends on priority (who may be preempted), the budget left and, while
# reservations exist, the runtime (which held room it may backfill).
_FallbackKey = tuple[_MemoKey, int, int | None, float | None]


@dataclass(slots=True)
class Decisions:
    """What step 3 decided so far, in decision order."""

    admissions: list[Admission] = field(default_factory=list)
    preemptions: list[Preemption] = field(default_factory=list)
    pending: dict[str, tuple[PendingReason, ...]] = field(default_factory=dict)


def run_cycle(snapshot: Snapshot, policy: Policy | None = None) -> CycleResult:
    """Decide which pending jobs start now, where, what is preempted, and why the others wait."""
    policy = policy if policy is not None else Policy()
    workspace = build_workspace(snapshot)  # 1
    reservations = Reservations(workspace, policy)
    queues = build_queues(snapshot.pending, reservations.starving)  # 2
    decisions = admit_heads(queues, workspace, policy, reservations)  # 3
    return collect_result(decisions)  # 4


def build_workspace(snapshot: Snapshot) -> Workspace:
    """Step 1: the mutable copy that admissions of this cycle are applied to."""
    return Workspace(snapshot)


class _Cycle:
    """Step 3's state: the workspace and everything remembered while deciding."""

    def __init__(self, ws: Workspace, policy: Policy, reservations: Reservations) -> None:
        self.ws = ws
        self.policy = policy
        self.reservations = reservations
        self.preemptor = Preemptor(ws, policy)
        self.types_of = _GpuTypes(ws, policy)
        self.decisions = Decisions()
        self.failures: dict[_MemoKey, tuple[int, Assignment]] = {}
        self.fallbacks: dict[_FallbackKey, tuple[int, Assignment]] = {}

    def budget_left(self) -> int | None:
        budget = self.policy.preemption_budget
        return None if budget is None else max(0, budget - len(self.decisions.preemptions))


def admit_heads(
    queues: list[TeamQueue],
    ws: Workspace,
    policy: Policy,
    reservations: Reservations | None = None,
) -> Decisions:
    """Step 3: decide heads one at a time, best head first, until queues or the bound run out."""
    cycle = _Cycle(ws, policy, reservations or Reservations(ws, policy))
    heads = Heads(queues, _head_key(cycle))
    limit = policy.max_admissions
    while limit is None or len(cycle.decisions.admissions) < limit:
        queue = heads.top()
        if queue is None:
            break
        job = queue.head
        assert job is not None  # only teams with a head are in the heap
        others_changed = decide(job, cycle)
        heads.advance_top()  # after deciding: the team's next key must see its new usage
        if others_changed:
            heads.refresh()
    return cycle.decisions


def decide(job: PendingJob, cycle: _Cycle) -> bool:
    """Decide one head; True when the decision changed other teams' usage (a claim)."""
    ws, decisions = cycle.ws, cycle.decisions
    types = cycle.types_of(job)
    outcome = _assign_remembering(job, types, ws, cycle.failures)
    if outcome.mode is FitMode.FIT:
        decisions.admissions.append(_apply(job, outcome, ws))
        return False
    if cycle.reservations.items:
        admission = cycle.reservations.backfill(job, types)
        if admission is not None:
            decisions.admissions.append(admission)
            return False
    fallback = _fallback_remembering(job, types, outcome, cycle)
    if fallback.mode is FitMode.PREEMPT:
        cycle.preemptor.commit(job, fallback)
        for victim, note in zip(fallback.victims, fallback.notes, strict=True):
            decisions.preemptions.append(Preemption(victim.id, job.id, note))
        decisions.pending[job.id] = (
            reasons.preempting(fallback.gpu_type, len(fallback.victims), len(fallback.ending)),
        )
        return True
    found = fallback.reasons
    if cycle.reservations.starving(job):
        held = cycle.reservations.reserve(job, types)
        if held is not None:
            found = (
                *found,
                reasons.holding(held.gpu_type, held.node_names(), job.submitted_at, held.due),
            )
    decisions.pending[job.id] = found
    return False


def _head_key(cycle: _Cycle) -> Callable[[PendingJob], HeadKey]:
    """The head order of :mod:`gpupool.scheduler.queues`, read from the workspace now."""
    ws, types_of = cycle.ws, cycle.types_of
    tolerance = cycle.policy.fair_share_tolerance
    starving = cycle.reservations.starving

    def key(job: PendingJob) -> HeadKey:
        need = job.total_gpus
        within = any(ws.within_nominal(job.team, t, need) for t in types_of(job))
        team = ws.team(job.team)
        return head_order(
            within,
            share_key(ws.share(job.team), tolerance),
            job,
            starving=starving(job),
            history=history_key(team.usage_history, team.weight),
        )

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


def _memo_key(job: PendingJob, types: tuple[str, ...]) -> _MemoKey:
    return (job.team, job.gpus, job.nodes, job.cpus, job.memory_gb, types)


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
    key = _memo_key(job, types)
    known = failures.get(key)
    if known is not None and known[0] == ws.epoch:
        return known[1]
    outcome = assign(job, types, ws)
    if outcome.mode is FitMode.NO_FIT:
        failures[key] = (ws.epoch, outcome)
    return outcome


def _fallback_remembering(
    job: PendingJob, types: tuple[str, ...], no_fit: Assignment, cycle: _Cycle
) -> Assignment:
    """Preemption, then the RESERVED explanation, for a job with no outright fit; a NO_FIT
    answer is reused for an identical job at the same epoch (see :func:`_assign_remembering`),
    so preemption searches stay one per distinct job and change of the workspace."""
    ws, reservations = cycle.ws, cycle.reservations
    budget_left = cycle.budget_left()
    runtime = job.max_runtime_s if reservations.items else None
    key = (_memo_key(job, types), job.priority, budget_left, runtime)
    known = cycle.fallbacks.get(key)
    if known is not None and known[0] == ws.epoch:
        return known[1]
    outcome = cycle.preemptor.resolve(job, types, no_fit, budget_left)
    if outcome.mode is FitMode.NO_FIT:
        outcome = Assignment(FitMode.NO_FIT, reservations.explain(job, types, outcome.reasons))
        cycle.fallbacks[key] = (ws.epoch, outcome)
    return outcome


def _apply(job: PendingJob, outcome: Assignment, ws: Workspace) -> Admission:
    """Apply a fit to the workspace at once so later decisions of this cycle see it."""
    pick = outcome.pick
    assert pick is not None  # a FIT always carries its pick
    ends_by = None if job.max_runtime_s is None else ws.now + job.max_runtime_s
    placements = ws.apply(
        job.team, outcome.gpu_type, pick.pool, pick.nodes, job_shape(job), ends_by
    )
    return Admission(job.id, outcome.gpu_type, pick.pool.name, placements, outcome.borrowed)


def collect_result(decisions: Decisions) -> CycleResult:
    """Step 4: the immutable result; admissions and preemptions keep their decision order."""
    return CycleResult(
        admissions=tuple(decisions.admissions),
        preemptions=tuple(decisions.preemptions),
        pending=dict(decisions.pending),
    )
