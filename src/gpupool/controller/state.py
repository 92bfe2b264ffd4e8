"""The controller's memory of the queue and the running jobs, kept between cycles.

Kueue keeps a cache and a queue manager between its cycles; this is gpupool's. It holds, as the
scheduler sees them, every queued job (team by team, in queue order) and every active job (with
the placements its attempt holds, from which node usage and team usage are derived). It is
loaded whole from the store when a controller starts or takes over (:meth:`QueueState.load`),
then brought up to date from the jobs that changed since its last read
(:meth:`QueueState.refresh`, through ``state.changes``): a cycle over a long queue reads a few
rows, not the queue.

The store stays the source of truth: the controller writes every decision before acting on it,
and its own writes come back through the change log like anyone's, so this memory never runs
ahead of the store. A view is rebuilt only for a row that differs from the one it was made of,
so an unchanged team keeps the very tuple of its jobs (parking compares it at once) and the
running jobs keep theirs.

Invariant (tested over random sequences of submits, cancels, admissions, starts and ends): after
:meth:`refresh`, the state equals what :meth:`load` makes of the store.
"""

from __future__ import annotations

import bisect
import functools
import json
from collections.abc import Iterable
from operator import attrgetter

from gpupool.scheduler import PendingJob, Placement, RunningJob
from gpupool.state import changes, queue
from gpupool.state.db import Session
from gpupool.state.queue import ColumnRow

_ID = attrgetter("id")
# Queue order within a team: priority high first, submit time, id (the store's listing order).
QueueKey = tuple[int, float, str]


def pending_job(row: ColumnRow) -> PendingJob:
    """A row of ``state.queue.PENDING_COLUMNS`` as the scheduler sees it."""
    return PendingJob(
        id=row.id,
        team=row.team,
        priority=row.priority,
        submitted_at=row.submitted_at.timestamp(),
        gpus=row.gpus,
        nodes=row.nodes,
        cpus=row.cpus,
        memory_gb=row.memory_gb,
        gpu_types=_gpu_types(row.gpu_types),
        max_runtime_s=row.max_runtime_s,
        queued_at=None if row.queued_at is None else row.queued_at.timestamp(),
        # A job pinned to a backend at submit runs only on its pools ("auto": any pool).
        backend=None if row.backend in (None, "auto") else row.backend,
    )


@functools.lru_cache(maxsize=1024)
def _gpu_types(stored: str) -> tuple[str, ...]:
    """A job's gpu types as stored (JSON text), decoded once per distinct value."""
    return tuple(json.loads(stored))


def running_job(row: ColumnRow) -> RunningJob:
    """A row of ``state.queue.ACTIVE_COLUMNS``: a job holding its placements now."""
    started = (row.started_at or row.admitted_at).timestamp()
    return RunningJob(
        id=row.id,
        team=row.team,
        priority=row.priority,
        gpu_type=row.gpu_type,
        pool=row.pool,
        placements=tuple(
            Placement(node=str(p["node"]), devices=tuple(int(d) for d in p["devices"]))
            for p in row.placements
        ),
        cpus=row.cpus,
        memory_gb=row.memory_gb,
        started_at=started,
        # Signalled (cancelled or chosen as a victim): it still holds its GPUs until it ends.
        terminating=bool(row.cancel_requested or row.cancel_sent or row.preempted_by),
        ends_by=None if row.max_runtime_s is None else started + row.max_runtime_s,
        preemptions=int(row.preemptions or 0),
    )


def queue_key(job: PendingJob) -> QueueKey:
    return (-job.priority, job.submitted_at, job.id)


class TeamQueue:
    """One team's queued jobs in queue order; :meth:`jobs` is the same tuple until a change."""

    __slots__ = ("_jobs", "_keys", "_views")

    def __init__(self) -> None:
        self._keys: list[QueueKey] = []
        self._views: dict[str, PendingJob] = {}
        self._jobs: tuple[PendingJob, ...] | None = ()

    def __len__(self) -> int:
        return len(self._views)

    def fill(self, jobs: Iterable[PendingJob]) -> None:
        """Add many jobs at once (a load): one sort, not one insertion each."""
        for job in jobs:
            self._views[job.id] = job
        self._keys = sorted(map(queue_key, self._views.values()))
        self._jobs = None

    def put(self, job: PendingJob) -> None:
        old = self._views.get(job.id)
        if old is not None:
            if old == job:
                return
            self.remove(job.id)
        bisect.insort(self._keys, queue_key(job))
        self._views[job.id] = job
        self._jobs = None

    def remove(self, job_id: str) -> None:
        old = self._views.pop(job_id, None)
        if old is None:
            return
        key = queue_key(old)
        del self._keys[bisect.bisect_left(self._keys, key)]
        self._jobs = None

    def jobs(self) -> tuple[PendingJob, ...]:
        if self._jobs is None:
            views = self._views
            self._jobs = tuple([views[key[2]] for key in self._keys])  # a list builds faster
        return self._jobs


class QueueState:
    """Queued and active jobs as the scheduler sees them (see the module docstring)."""

    def __init__(self) -> None:
        self.seq: int | None = None  # the change number read up to; None: not loaded
        self._teams: dict[str, TeamQueue] = {}
        self._queued: dict[str, ColumnRow] = {}  # id -> the row its view was made of
        self._team_of: dict[str, str] = {}
        self._active: dict[str, tuple[ColumnRow, RunningJob]] = {}
        self._running: tuple[RunningJob, ...] | None = ()

    @property
    def loaded(self) -> bool:
        return self.seq is not None

    def forget(self) -> None:
        """Drop everything: the next :meth:`refresh` loads the store whole."""
        self.__init__()  # type: ignore[misc]

    # -- reading the store --------------------------------------------------------------------

    def load(self, session: Session) -> None:
        """Read every queued and active job (the change number first: nothing is missed)."""
        seq = changes.current(session)
        queued, active = queue.queued(session), queue.active(session)
        self.forget()
        by_team: dict[str, list[PendingJob]] = {}
        for row in queued:
            by_team.setdefault(row.team, []).append(pending_job(row))
            self._queued[row.id] = row
            self._team_of[row.id] = row.team
        for name, jobs in by_team.items():
            team = self._teams[name] = TeamQueue()
            team.fill(jobs)
        for row in active:
            self._active[row.id] = (row, running_job(row))
        self._running = None
        self.seq = seq

    def refresh(self, session: Session) -> bool:
        """Apply the jobs changed since the last read (loading first if never loaded); whether
        any view the scheduler reads changed."""
        if self.seq is None:
            self.load(session)
            return True
        seq, ids = changes.changed_since(session, self.seq)
        self.seq = seq
        if not ids:
            return False
        return self.apply(ids, queue.queued_among(session, ids), queue.active_among(session, ids))

    def apply(
        self, ids: Iterable[str], queued: Iterable[ColumnRow], active: Iterable[ColumnRow]
    ) -> bool:
        """Bring the jobs ``ids`` up to date: those in ``queued`` are queued now, those in
        ``active`` hold placements, the others left both (ended, cancelled, failed)."""
        changed = False
        now_queued = {row.id: row for row in queued}
        now_active = {row.id: row for row in active}
        for job_id in ids:
            row = now_queued.get(job_id)
            if row is not None:
                if self._queued.get(job_id) != row:
                    self._drop_queued(job_id)
                    self._put_queued(row)
                    changed = True
            elif job_id in self._queued:
                self._drop_queued(job_id)
                changed = True
            row = now_active.get(job_id)
            known = self._active.get(job_id)
            if row is not None:
                if known is None or known[0] != row:
                    view = running_job(row)
                    if known is not None and known[1] == view:
                        view = known[1]  # the same view: keep the object
                    else:
                        self._running = None
                        changed = True
                    self._active[job_id] = (row, view)
            elif known is not None:
                del self._active[job_id]
                self._running = None
                changed = True
        return changed

    # -- what a cycle reads -------------------------------------------------------------------

    def groups(self) -> dict[str, tuple[PendingJob, ...]]:
        """Each team's queued jobs in queue order, by team name."""
        return {name: self._teams[name].jobs() for name in sorted(self._teams)}

    def running(self) -> tuple[RunningJob, ...]:
        """Every active job, by id; the same tuple while none changed."""
        if self._running is None:
            self._running = tuple(view for _, view in sorted(self._active.values(), key=_first_id))
        return self._running

    def attempt_of(self, job_id: str) -> int | None:
        """The attempt number a queued job had when read (admissions are conditional on it)."""
        row = self._queued.get(job_id)
        return None if row is None else int(row.attempt)

    def queued_ids(self) -> set[str]:
        return set(self._queued)

    def pending_view(self, job_id: str) -> PendingJob | None:
        """A queued job as the scheduler sees it; None when it is not queued."""
        row = self._queued.get(job_id)
        return None if row is None else pending_job(row)

    def started(self, job_id: str) -> bool:
        """Whether an active job's attempt runs (started), not only admitted. One dictionary
        read, so an observer may call it from another thread."""
        entry = self._active.get(job_id)
        return entry is not None and entry[0].started_at is not None

    def __len__(self) -> int:
        return len(self._queued)

    # -- bookkeeping --------------------------------------------------------------------------

    def _put_queued(self, row: ColumnRow) -> None:
        team = self._teams.get(row.team)
        if team is None:
            team = self._teams[row.team] = TeamQueue()
        team.put(pending_job(row))
        self._queued[row.id] = row
        self._team_of[row.id] = row.team

    def _drop_queued(self, job_id: str) -> None:
        if self._queued.pop(job_id, None) is None:
            return
        name = self._team_of.pop(job_id)
        team = self._teams[name]
        team.remove(job_id)
        if not len(team):
            del self._teams[name]


def _first_id(entry: tuple[ColumnRow, RunningJob]) -> str:
    return str(entry[1].id)
