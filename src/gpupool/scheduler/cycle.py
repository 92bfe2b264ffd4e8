"""One scheduling cycle: ``run_cycle(snapshot, policy) -> CycleResult`` (docs/architecture.md §5).

The cycle is a pipeline; each numbered step is one function:

1. :func:`build_workspace` copies the snapshot into a mutable :class:`Workspace`.
2. :func:`~gpupool.scheduler.nominations.honour_nominations` decides first the preemptors of
   earlier cycles that still wait for the room their victims free (``Snapshot.nominations``):
   admitted onto it, or holding it while their victims end, so that the room goes to no one else
   (not back to a requeued victim) and they pick no new victims.
3. :func:`build_queues` makes one queue per team (:mod:`gpupool.scheduler.queues`), starving
   jobs first; the preemptors step 2 decided are left out.
4. :func:`admit_heads` repeatedly takes the best head across teams and decides it
   (:func:`decide`): admit it where it fits outright (:mod:`gpupool.scheduler.assignment`) or by
   backfilling held room; else claim victims or ending jobs (:mod:`gpupool.scheduler.preemption`);
   else set it aside with its reasons, holding room for it when it starves
   (:mod:`gpupool.scheduler.reservations`), and let the team's next job go (best-effort FIFO;
   with strict FIFO the team's later jobs wait BLOCKED behind it). The jobs right behind a
   waiting head that ask exactly what a job of the team that waited at the same epoch asked
   are set aside with it, for the same reasons (:func:`~gpupool.scheduler.queues.request_of`):
   so a queue of thousands of jobs costs one decision per distinct request and change of the
   workspace, not one per job.
5. :func:`collect_result` freezes the decisions into a :class:`CycleResult`.

Invariants: the snapshot is never changed; the same snapshot and policy give the same result
(every ordering ends in an id, nothing iterates an unsorted set or uses ``hash()``); every
pending job considered ends up either admitted or in ``pending`` with at least one reason. A
preemptor is never admitted in the cycle it preempts (it waits with PREEMPTING until its victims
have ended); at most ``policy.preemption_budget`` jobs are preempted per cycle. When
``policy.max_admissions`` is reached the cycle stops: jobs not yet considered get no entry in
``pending`` (their previous reasons stay valid for ``why``). The result says which gpu types
its decisions touched (``CycleResult.touched``): the controller's parking
(:mod:`gpupool.controller.parking`) hands a cycle only the teams whose inputs changed, and
runs it again with more teams when a decision touched a type of one it left out.
"""

from __future__ import annotations

import gc
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from operator import attrgetter

from gpupool.scheduler import reasons
from gpupool.scheduler.assignment import (
    Assignment,
    FitMode,
    gpuless_fits,
    job_shape,
    resolve_gpu_types,
)
from gpupool.scheduler.budgets import BudgetRules, without_borrowing
from gpupool.scheduler.memo import AssignMemo, FallbackKey, FallbackMemo, job_key
from gpupool.scheduler.nominations import honour_nominations
from gpupool.scheduler.preemption import Preemptor
from gpupool.scheduler.queues import (
    HeadKey,
    Heads,
    Request,
    TeamQueue,
    build_queues,
    head_order,
    history_key,
    request_of,
    share_key,
)
from gpupool.scheduler.reservations import Reservations
from gpupool.scheduler.snapshot import (
    Admission,
    CycleResult,
    Nomination,
    PendingJob,
    PendingReason,
    Policy,
    Preemption,
    Queueing,
    Snapshot,
)
from gpupool.scheduler.workspace import Workspace

_ID = attrgetter("id")


@dataclass(slots=True)
class Decisions:
    """What steps 2 and 4 decided so far, in decision order."""

    admissions: list[Admission] = field(default_factory=list)
    preemptions: list[Preemption] = field(default_factory=list)
    pending: dict[str, tuple[PendingReason, ...]] = field(default_factory=dict)
    nominations: list[Nomination] = field(default_factory=list)
    protected_until: float | None = None  # see CycleResult.protected_until


def run_cycle(snapshot: Snapshot, policy: Policy | None = None) -> CycleResult:
    """Decide which pending jobs start now, where, what is preempted, and why the others wait."""
    policy = policy if policy is not None else Policy()
    with _cyclic_gc_paused():  # the cycle's working objects are freed before it resumes
        return _run(snapshot, policy)


def _run(snapshot: Snapshot, policy: Policy) -> CycleResult:
    workspace = build_workspace(snapshot, policy)  # 1
    reservations = Reservations(workspace, policy)
    first = Decisions()
    decided = honour_nominations(  # 2
        snapshot, workspace, policy, _apply, first.admissions, first.pending, first.nominations
    )
    pending = snapshot.pending
    if decided:
        pending = tuple(job for job in pending if job.id not in decided)
    queues = build_queues(pending, reservations.starving_before)  # 3
    decisions = admit_heads(queues, workspace, policy, reservations, decided=first)  # 4
    return collect_result(decisions, touched_types(workspace))  # 5


def touched_types(ws: Workspace) -> frozenset[str] | None:
    """The gpu types a decision of this cycle changed; None: every type (a claim or a
    reservation moves the rare epoch, and with it everything)."""
    if ws.rare_epoch:
        return None
    return frozenset(t for t in ws.gpu_types if ws.room_epoch(t))


@contextmanager
def _cyclic_gc_paused() -> Iterator[None]:
    """A cycle allocates many short-lived objects, freed by reference counting as it goes; the
    cyclic collector would meanwhile walk every object the snapshot holds (hundreds of
    thousands at scale) again and again, so it waits until the cycle ends, when the working
    copy is gone and only the result is left to look at. Left off when the caller had
    switched it off."""
    enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if enabled:
            gc.enable()


def build_workspace(snapshot: Snapshot, policy: Policy | None = None) -> Workspace:
    """Step 1: the mutable copy that admissions of this cycle are applied to (no-borrow
    budgets already applied to its quotas: :mod:`gpupool.scheduler.budgets`; gpu types weighed
    in the fair share by ``policy.gpu_type_weights``)."""
    weights = None if policy is None else policy.gpu_type_weights
    return Workspace(without_borrowing(snapshot), weights)


class _Cycle:
    """Step 4's state: the workspace and everything remembered while deciding."""

    def __init__(self, ws: Workspace, policy: Policy, reservations: Reservations) -> None:
        self.ws = ws
        self.policy = policy
        self.reservations = reservations
        self.preemptor = Preemptor(ws, policy)
        self.types_of = _GpuTypes(ws, policy)
        self.decisions = Decisions()
        self.assigner = AssignMemo(ws)
        self.fallbacks = FallbackMemo(ws)
        self.budgets = BudgetRules(ws.budgets)

    def budget_left(self) -> int | None:
        budget = self.policy.preemption_budget
        return None if budget is None else max(0, budget - len(self.decisions.preemptions))


def admit_heads(
    queues: list[TeamQueue],
    ws: Workspace,
    policy: Policy,
    reservations: Reservations | None = None,
    decided: Decisions | None = None,
) -> Decisions:
    """Step 4: decide heads one at a time, best head first, until queues or the bound run out.
    ``decided``: what step 2 decided, added to."""
    cycle = _Cycle(ws, policy, reservations or Reservations(ws, policy))
    if decided is not None:
        cycle.decisions = decided
    smallest = {queue.team: queue.smallest for queue in queues}
    heads = Heads(queues, _head_key(cycle, smallest))
    limit = policy.max_admissions
    strict = policy.queueing is Queueing.STRICT_FIFO
    # team -> (epoch, request -> reasons) of the jobs that waited at that epoch
    waited: dict[str, tuple[int, dict[Request, tuple[PendingReason, ...]]]] = {}
    while limit is None or len(cycle.decisions.admissions) < limit:
        queue = heads.top()
        if queue is None:
            break
        job = queue.head
        assert job is not None  # only teams with a head are in the heap
        others_changed = decide(job, cycle)
        waits = cycle.decisions.pending.get(job.id)
        if waits is not None and not others_changed:
            # Jobs behind a head that waits and that ask what a job of the team that waited
            # at this very epoch asked wait for the same reasons: within a cycle room only
            # shrinks, so none of them could start where that job could not.
            known = waited.get(queue.team)
            if known is None or known[0] != ws.epoch:
                known = waited[queue.team] = (ws.epoch, {})
            known[1][request_of(job)] = waits
            same, why = queue.skip_known(known[1])
            if same:
                cycle.decisions.pending.update(zip([j.id for j in same], why, strict=True))
        if strict and waits is not None:
            blocked = (reasons.behind_head(job),)
            cycle.decisions.pending.update(dict.fromkeys(map(_ID, queue.drain()), blocked))
            heads.drop_top()
        else:
            heads.advance_top()  # after deciding: the team's next key must see its new usage
        if others_changed:
            heads.refresh()
    cycle.decisions.protected_until = cycle.preemptor.protected_until
    return cycle.decisions


def decide(job: PendingJob, cycle: _Cycle) -> bool:
    """Decide one head; True when the decision changed other teams' usage (a claim)."""
    ws, decisions, reservations = cycle.ws, cycle.decisions, cycle.reservations
    types, on_hold = cycle.budgets.held(job, cycle.types_of(job))
    if on_hold and not types:
        decisions.pending[job.id] = on_hold
        return False
    key = job_key(job, types)
    runtime = job.max_runtime_s if reservations.items else None
    fallback_key = (key, job.priority, cycle.budget_left(), runtime)
    starving = reservations.starving(job)
    # The common repeat: an identical job already waits at this epoch. A starving job takes it
    # too when it could hold no room anyway (its team holds a reservation, or an identical
    # request found none at this epoch): its decision is then the same reasons.
    if not starving or not reservations.may_reserve(job, types):
        known = cycle.fallbacks.current(fallback_key)
        if known is not None:
            decisions.pending[job.id] = cycle.budgets.explain(job, known.reasons, on_hold)
            return False
    outcome = cycle.assigner.assign(job, types, key)
    if outcome.mode is FitMode.FIT:
        decisions.admissions.append(_apply(job, outcome, ws))
        return False
    if reservations.items:
        admission = reservations.backfill(job, types)
        if admission is not None:
            decisions.admissions.append(admission)
            return False
    fallback = _fallback(job, types, fallback_key, outcome, cycle)
    if fallback.mode is FitMode.PREEMPT:
        decisions.nominations.append(cycle.preemptor.commit(job, fallback))
        for victim, note in zip(fallback.victims, fallback.notes, strict=True):
            decisions.preemptions.append(Preemption(victim.id, job.id, note))
        decisions.pending[job.id] = (
            reasons.preempting(fallback.gpu_type, len(fallback.victims), len(fallback.ending)),
        )
        return True
    found = fallback.reasons
    if starving:
        held = reservations.reserve(job, types, outcome)
        if held is not None:
            found = (
                *found,
                reasons.holding(held.gpu_type, held.node_names(), job.submitted_at, held.due),
            )
    decisions.pending[job.id] = cycle.budgets.explain(job, found, on_hold)
    return False


def _head_key(
    cycle: _Cycle, smallest: dict[str, dict[tuple[str, ...], int]]
) -> Callable[[PendingJob], HeadKey]:
    """The head order of :mod:`gpupool.scheduler.queues`, read from the workspace now.

    What a key reads of the team (its share, history and, per need and gpu types, whether a job
    fits within nominal) depends only on the team's own usage, so it is remembered per team
    until ``Workspace.usage_versions`` says that usage changed. ``smallest`` is each team's
    smallest request per gpu types (:attr:`TeamQueue.smallest`): the team is owed its guarantee
    while one of them fits within nominal.
    """
    ws, types_of = cycle.ws, cycle.types_of
    tolerance = cycle.policy.fair_share_tolerance
    starving = cycle.reservations.starving
    versions = ws.usage_versions
    teams: dict[str, tuple[int, float, float, bool]] = {}
    # team -> gpu type -> the smallest need of the team's jobs that accept that type: the team
    # is owed its guarantee when one of them fits within nominal (a few checks, not one per
    # distinct request).
    needs: dict[str, dict[str, int]] = {}

    def smallest_per_type(name: str) -> dict[str, int]:
        per_type: dict[str, int] = {}
        for types, need in smallest.get(name, {}).items():
            for t in types_of.of(types):
                known = per_type.get(t)
                if known is None or need < known:
                    per_type[t] = need
        needs[name] = per_type
        return per_type

    def key(job: PendingJob) -> HeadKey:
        name = job.team
        version = versions.get(name, 0)
        known = teams.get(name)
        if known is None or known[0] != version:
            team = ws.team(name)
            share = share_key(ws.share(name), tolerance)
            history = history_key(team.usage_history, team.weight)
            per_type = needs.get(name)
            if per_type is None:
                per_type = smallest_per_type(name)
            owed = any(ws.within_nominal(name, t, need) for t, need in per_type.items())
            known = teams[name] = (version, share, history, owed)
        return head_order(known[3], known[1], job, starving=starving(job), history=known[2])

    return key


class _GpuTypes:
    """The gpu types to try for a job (:func:`resolve_gpu_types`), remembered per request."""

    def __init__(self, ws: Workspace, policy: Policy) -> None:
        self._present = ws.gpu_types
        self._order = policy.gpu_type_order
        self._known: dict[tuple[str, ...], tuple[str, ...]] = {}

    def __call__(self, job: PendingJob) -> tuple[str, ...]:
        return self.of(job.gpu_types)

    def of(self, accepted: tuple[str, ...]) -> tuple[str, ...]:
        types = self._known.get(accepted)
        if types is None:
            types = self._known[accepted] = resolve_gpu_types(accepted, self._order, self._present)
        return types


def _fallback(
    job: PendingJob,
    types: tuple[str, ...],
    key: FallbackKey,
    no_fit: Assignment,
    cycle: _Cycle,
) -> Assignment:
    """Preemption, then the RESERVED explanation, for a job with no outright fit; NO_FIT
    answers are reused for identical jobs while nothing they read changed
    (:class:`~gpupool.scheduler.memo.FallbackMemo`), so preemption searches stay one per
    distinct job and relevant change of the workspace."""
    known = cycle.fallbacks.lookup(key, job.team, types)
    if known is not None:
        return known
    # A GPU-less job waits out its team's cap on a type: preempting never lowers it there.
    open_types = types if job.gpus else tuple(f for f in types if gpuless_fits(job, f, cycle.ws))
    outcome = no_fit
    if open_types:
        outcome = cycle.preemptor.resolve(job, open_types, no_fit, key[2])
    if outcome.mode is FitMode.NO_FIT:
        found = cycle.reservations.explain(job, types, outcome.reasons)
        if found is not outcome.reasons:  # a NO_FIT is only its reasons: reuse it if unchanged
            outcome = Assignment(FitMode.NO_FIT, found)
        cycle.fallbacks.store(key, job.team, types, outcome)
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


def collect_result(
    decisions: Decisions, touched: frozenset[str] | None = frozenset()
) -> CycleResult:
    """Step 5: the result; admissions and preemptions keep their decision order. The pending
    reasons are handed over, not copied (a hundred thousand entries at scale): ``decisions`` is
    not used again."""
    return CycleResult(
        admissions=tuple(decisions.admissions),
        preemptions=tuple(decisions.preemptions),
        pending=decisions.pending,
        nominations=tuple(decisions.nominations),
        touched=touched,
        protected_until=decisions.protected_until,
    )
