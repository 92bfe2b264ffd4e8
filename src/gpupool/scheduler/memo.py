"""Remembered decisions of one cycle: identical jobs are decided once per relevant change.

Many pending jobs are identical for the scheduler (same team, shape and gpu types; for the
fallback also the same priority). While nothing a decision reads has changed, an identical
job gets the same answer, so only NO_FIT answers are remembered (a fit is applied at once and
changes the workspace) and reused when the workspace's epochs say the inputs are unchanged:

* every entry first compares ``Workspace.epoch`` (anything changed at all?): one integer
  comparison, so a cycle where nothing fits costs one lookup per repeated job;
* otherwise it compares the finer epochs of what it depends on (see
  :mod:`gpupool.scheduler.workspace`), so an admission of one team on one gpu type does not
  invalidate what other cohorts or gpu types remembered.

Per gpu type, :func:`~gpupool.scheduler.assignment.assign_type` fails at a check that says what
the answer read: NO_POOL and TOO_LARGE only the (never changing) pools, QUOTA and COHORT the
quota epoch too (a GPU-less job's QUOTA reads its team's GPU-less usage of the type, which only
the team's admissions on the type change, and each moves that epoch), CAPACITY room as well.
The fallback (preemption, then RESERVED explanations) reads room and quota of every gpu type of
the job, claims and reservations.

Invariant: a remembered answer is returned only when a fresh computation would return an equal
one; callers must not change the workspace without moving its epochs (what-if changes in a
:class:`~gpupool.scheduler.workspace.Simulation` are undone before any lookup).
"""

from __future__ import annotations

from gpupool.scheduler import reasons
from gpupool.scheduler.assignment import Assignment, FitMode, assign_type, job_shape
from gpupool.scheduler.snapshot import PendingJob, PendingReason, ReasonCode
from gpupool.scheduler.workspace import Workspace

# team, gpus per node, nodes, cpus, memory, gpu types, backend: everything assignment reads of
# a job.
JobKey = tuple[str, int, int, float, float, tuple[str, ...], str | None]
# The fallback also depends on priority (who may be preempted), the budget left and, while
# reservations exist, the runtime (which held room it may backfill).
FallbackKey = tuple[JobKey, int, int | None, float | None]
_TypeKey = tuple[str, int, int, float, float, str, str | None]
_Stamp = tuple[int, int, int]

_STATIC = frozenset({ReasonCode.NO_POOL, ReasonCode.TOO_LARGE})
_QUOTA = frozenset({ReasonCode.QUOTA, ReasonCode.COHORT})


def job_key(job: PendingJob, types: tuple[str, ...]) -> JobKey:
    return (job.team, job.gpus, job.nodes, job.cpus, job.memory_gb, types, job.backend)


class AssignMemo:
    """:func:`~gpupool.scheduler.assignment.assign`, remembering NO_FIT answers per job and per
    gpu type; see the module docstring."""

    __slots__ = ("_jobs", "_types", "_ws")

    def __init__(self, ws: Workspace) -> None:
        self._ws = ws
        self._jobs: dict[JobKey, tuple[int, Assignment]] = {}
        # (epoch checked at, stamp or None when it never changes, the one-type answer)
        self._types: dict[_TypeKey, tuple[int, _Stamp | None, Assignment]] = {}

    def assign(self, job: PendingJob, types: tuple[str, ...], key: JobKey) -> Assignment:
        """The first type that fits, or every type's reason (``key`` is :func:`job_key`)."""
        ws = self._ws
        known = self._jobs.get(key)
        if known is not None and known[0] == ws.epoch:
            return known[1]
        if not types:
            outcome = Assignment(FitMode.NO_FIT, (reasons.no_gpu_type(),))
        elif len(types) == 1:  # the one type's answer is the whole answer (a NO_FIT: reasons)
            outcome = self._assign_type(job, types[0])
            if outcome.mode is FitMode.FIT:
                return outcome
        else:
            found: list[PendingReason] = []
            for gpu_type in types:
                one = self._assign_type(job, gpu_type)
                if one.mode is FitMode.FIT:
                    return one
                found.extend(one.reasons)
            outcome = Assignment(FitMode.NO_FIT, tuple(found))
        self._jobs[key] = (ws.epoch, outcome)
        return outcome

    def _assign_type(self, job: PendingJob, gpu_type: str) -> Assignment:
        ws = self._ws
        key = (job.team, job.gpus, job.nodes, job.cpus, job.memory_gb, gpu_type, job.backend)
        known = self._types.get(key)
        if known is not None:
            epoch, stamp, outcome = known
            if epoch == ws.epoch or stamp is None:
                return outcome
            if stamp == self._stamp(outcome, job.team, gpu_type):
                self._types[key] = (ws.epoch, stamp, outcome)
                return outcome
        outcome = assign_type(job, job_shape(job), gpu_type, ws)
        if outcome.mode is FitMode.NO_FIT:
            self._types[key] = (ws.epoch, self._stamp(outcome, job.team, gpu_type), outcome)
        return outcome

    def _stamp(self, no_fit: Assignment, team: str, gpu_type: str) -> _Stamp | None:
        """What the one-type NO_FIT read, by the check that failed (module docstring)."""
        code = no_fit.reasons[0].code
        if code in _STATIC:
            return None
        ws = self._ws
        if code in _QUOTA:
            return (ws.rare_epoch, -1, ws.quota_epoch(team, gpu_type))
        return ws.type_stamp(team, gpu_type)


class FallbackMemo:
    """NO_FIT answers of the fallback (preemption, then RESERVED explanations) per
    :data:`FallbackKey`, valid while no epoch of the job's gpu types moved."""

    __slots__ = ("_known", "_ws")

    def __init__(self, ws: Workspace) -> None:
        self._ws = ws
        self._known: dict[FallbackKey, tuple[int, tuple[_Stamp, ...], Assignment]] = {}

    def current(self, key: FallbackKey) -> Assignment | None:
        """The answer remembered at the current epoch, if any.

        Only an identical job that got no fit and no backfill at this very epoch stored it, so
        an identical job now gets no fit and no backfill either: its whole decision (unless it
        starves) is this answer's reasons."""
        known = self._known.get(key)
        if known is not None and known[0] == self._ws.epoch:
            return known[2]
        return None

    def lookup(self, key: FallbackKey, team: str, types: tuple[str, ...]) -> Assignment | None:
        """The remembered answer if nothing it read has changed since."""
        ws = self._ws
        known = self._known.get(key)
        if known is None:
            return None
        epoch, stamps, outcome = known
        if epoch == ws.epoch:
            return outcome
        if stamps == self._stamps(team, types):
            self._known[key] = (ws.epoch, stamps, outcome)
            return outcome
        return None

    def store(
        self, key: FallbackKey, team: str, types: tuple[str, ...], outcome: Assignment
    ) -> None:
        """Remember a NO_FIT answer computed on the workspace as it is now."""
        self._known[key] = (self._ws.epoch, self._stamps(team, types), outcome)

    def _stamps(self, team: str, types: tuple[str, ...]) -> tuple[_Stamp, ...]:
        ws = self._ws
        return ((ws.rare_epoch, 0, 0), *(ws.type_stamp(team, f) for f in types))
