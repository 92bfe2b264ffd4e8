"""Team queues and the two orderings of the cycle (docs/architecture.md §5.1-5.2).

Job order within a team (:func:`job_order`): starving jobs first (Q8, see
:mod:`gpupool.scheduler.reservations`), oldest first among them; then priority high first,
submit time, id.

Head order across teams (:func:`head_order`) is documented there; in short: within-nominal
heads, starving heads, lowest weighted dominant share (equal within a tolerance), lowest decayed
history per weight, priority, submit time, id.

A team's head key depends only on that team's own usage and head job. An admission changes only
the deciding team's usage, so after it the team is pushed again with its next head and no other
entry needs refreshing. A preemption claim also changes its victims' teams:
:meth:`Heads.refresh` then re-keys every team.
"""

from __future__ import annotations

import heapq
import math
from collections.abc import Callable, Iterable, Mapping
from itertools import groupby
from operator import attrgetter
from typing import TypeVar

from gpupool.scheduler.snapshot import PendingJob

JobKey = tuple[int, float, float, str]
# The repr of (team, gpus, nodes, priority, gpu types, cpus, memory_gb, max_runtime_s,
# backend): ``PendingJob.request``.
Request = str
T = TypeVar("T")
HeadKey = tuple[int, int, float, float, float, int, float, str]


def job_order(job: PendingJob, starving: bool = False) -> JobKey:
    """Once a job starves, how long it waited is what counts: the oldest starving job goes
    first even before higher-priority starving jobs, so every starving job eventually leads."""
    if starving:
        return (0, job.submitted_at, -job.priority, job.id)
    return (1, -job.priority, job.submitted_at, job.id)


def share_key(share: float, tolerance: float) -> float:
    """``share`` rounded to a multiple of ``tolerance``: shares that differ by float noise (or
    less than the tolerance, barring the rare pair straddling a rounding boundary) compare equal,
    and the comparison stays a total order, as a heap needs."""
    if tolerance <= 0 or math.isinf(share):
        return share
    return float(math.floor(share / tolerance + 0.5))


def history_key(usage_history: float, weight: float) -> float:
    """Decayed GPU-seconds per unit of weight; a team with weight ``<= 0`` goes last."""
    if usage_history <= 0:
        return 0.0
    return usage_history / weight if weight > 0 else math.inf


def head_order(
    within_nominal: bool,
    share: float,
    job: PendingJob,
    *,
    starving: bool = False,
    history: float = 0.0,
) -> HeadKey:
    """The cross-team comparator (docs/architecture.md §5.2, Q4, Q8), smallest first:

    1. teams owed their guarantee: the head, or any job of the team's queue, fits within the
       team's nominal quota on an acceptable gpu type. Guarantees come first, even before
       starving borrowers, and a team's job that fits within nominal is decided before other
       teams borrow, even when a larger job heads its queue (else another team would borrow the
       room the team just reclaimed, be reclaimed again, and so on every cycle);
    2. starving heads (waited ``starvation_after_s`` or more) before the others, the oldest
       first (see :func:`job_order`);
    3. lowest weighted dominant share, as :func:`share_key` (equal within the tolerance);
    4. on equal shares, lowest decayed usage history per weight (:func:`history_key`): a team
       that used less over time goes first, so near-ties are broken fairly over time;
    5. priority high first, submit time, job id.
    """
    return (
        0 if within_nominal else 1,
        0 if starving else 1,
        job.submitted_at if starving else 0.0,
        share,
        history,
        -job.priority,
        job.submitted_at,
        job.id,
    )


_BY_SUBMIT = attrgetter("submitted_at", "id")
_BY_ID = attrgetter("id")
_BY_PRIORITY = attrgetter("priority")
_BY_SUBMITTED = attrgetter("submitted_at")
_BY_TEAM = attrgetter("team")


def sort_jobs(jobs: Iterable[PendingJob], starving_before: float | None = None) -> list[PendingJob]:
    """``jobs`` in :func:`job_order`; a job is starving when it has waited since
    ``starving_before`` or earlier (``None``: none is). Stable sorts on single attributes (C-level
    keys) give the comparator's order several times faster on the long queues every cycle
    sorts."""
    return _sorted(jobs, starving_before, by_team=False)


def _sorted(
    jobs: Iterable[PendingJob], starving_before: float | None, by_team: bool
) -> list[PendingJob]:
    # One pass splits off the starving jobs and checks whether both parts are already in the
    # order the sorts give them: all of one priority, each part by (team, if ``by_team``)
    # submit time and id. A store lists each team's queue so, and then the sorts are skipped.
    hungry: list[PendingJob] = []
    rest: list[PendingJob] = []
    before = -math.inf if starving_before is None else starving_before
    last_hungry: tuple[object, ...] = ()
    last_rest: tuple[object, ...] = ()
    ordered, priority = True, None
    for job in jobs:  # every job, every cycle: kept to plain attribute reads
        key = (job.team, job.submitted_at, job.id) if by_team else (job.submitted_at, job.id)
        if job.waiting_since <= before:
            hungry.append(job)
            if last_hungry and key <= last_hungry:
                ordered = False
            last_hungry = key
        else:
            rest.append(job)
            if last_rest and key <= last_rest:
                ordered = False
            last_rest = key
        if job.priority != priority:
            ordered = ordered and priority is None
            priority = job.priority
    if not ordered:
        rest.sort(key=_BY_SUBMIT)
        rest.sort(key=_BY_PRIORITY, reverse=True)  # stable: ties keep submit time, id
        hungry.sort(key=_BY_ID)
        hungry.sort(key=_BY_PRIORITY, reverse=True)
        hungry.sort(key=_BY_SUBMITTED)
    if not hungry:
        return rest
    merged = hungry + rest
    if by_team:
        merged.sort(key=_BY_TEAM)  # stable: within a team, starving first, then the rest
    return merged


def request_of(job: PendingJob) -> Request:
    """What the scheduler reads of a job besides its id and place in the queue: two jobs with
    the same request are decided alike (their fields' reprs are equal, so their values are)."""
    return job.request


class TeamQueue:
    """One team's pending jobs in :func:`job_order`, consumed from the head."""

    __slots__ = ("_jobs", "_next", "smallest", "team")

    def __init__(
        self,
        team: str,
        jobs: list[PendingJob],
        starving_before: float | None = None,
        *,
        ordered: bool = False,
    ) -> None:
        """``ordered``: ``jobs`` are in :func:`sort_jobs` order already (and may be kept)."""
        self.team = team
        self._jobs = jobs if ordered else sort_jobs(jobs, starving_before)
        self._next = 0
        # The smallest request per accepted gpu types, over the whole queue at the start of
        # the cycle: whether the team has *any* job waiting that fits within its nominal quota.
        smallest: dict[tuple[str, ...], int] = {}
        for job in jobs:  # plain attribute reads (faster than attrgetter maps): every cycle
            need = job.gpus * job.nodes
            known = smallest.get(job.gpu_types)
            if known is None or need < known:
                smallest[job.gpu_types] = need
        self.smallest = smallest

    @property
    def head(self) -> PendingJob | None:
        return self._jobs[self._next] if self._next < len(self._jobs) else None

    def advance(self) -> None:
        """Move past the head, admitted or set aside (best-effort FIFO)."""
        self._next += 1

    def skip_known(self, known: Mapping[Request, T]) -> tuple[list[PendingJob], list[T]]:
        """The jobs right after the head whose :func:`request_of` is in ``known``, and their
        entries there; the queue moves past them, the head stays (it was just decided).

        Only that run is walked (each job is passed once per cycle), and each look-up hashes
        the job's request string, whose hash is kept."""
        jobs, at = self._jobs, self._next
        entry: Callable[[Request], T | None] = known.get
        found: list[T] = []
        end = at + 1
        while end < len(jobs):
            why = entry(jobs[end].request)
            if why is None:  # no entry of ``known`` is None
                break
            found.append(why)
            end += 1
        if not found:
            return [], found
        skipped = jobs[at + 1 : end]
        jobs[end - 1] = jobs[at]  # the head moves to the last skipped place: no list shifting
        self._next = end - 1
        return skipped, found

    def drain(self) -> list[PendingJob]:
        """Every job after the head, in order; the queue is left empty (strict FIFO)."""
        rest = self._jobs[self._next + 1 :]
        self._next = len(self._jobs)
        return rest


def build_queues(
    pending: Iterable[PendingJob], starving_before: float | None = None
) -> list[TeamQueue]:
    """One queue per team with pending jobs, in team name order (see :func:`sort_jobs`): one
    sort of all jobs, grouped by team, rather than a sort per team."""
    ordered = _sorted(pending, starving_before, by_team=True)
    return [TeamQueue(team, list(jobs), ordered=True) for team, jobs in groupby(ordered, _BY_TEAM)]


class Heads:
    """Every team queue with a head, in ``key`` order of its head; the best is :meth:`top`.

    ``key`` must depend only on the head job and its own team's state (see the module
    docstring), so re-keying just the team that advanced keeps the whole heap correct.
    """

    __slots__ = ("_heap", "_key")

    def __init__(self, queues: Iterable[TeamQueue], key: Callable[[PendingJob], HeadKey]) -> None:
        self._key = key
        self._heap: list[tuple[HeadKey, TeamQueue]] = []
        for queue in queues:
            if queue.head is not None:
                self._heap.append((key(queue.head), queue))
        heapq.heapify(self._heap)

    def top(self) -> TeamQueue | None:
        return self._heap[0][1] if self._heap else None

    def advance_top(self) -> None:
        """The top team's head was decided: re-key the team by its next head, or drop it."""
        queue = self._heap[0][1]
        queue.advance()
        head = queue.head
        if head is None:
            heapq.heappop(self._heap)
        else:
            heapq.heapreplace(self._heap, (self._key(head), queue))

    def drop_top(self) -> None:
        """The top team is done for this cycle (its queue was drained)."""
        heapq.heappop(self._heap)

    def refresh(self) -> None:
        """Re-key every team: needed after a decision changed other teams' usage."""
        self._heap = [(self._key(q.head), q) for _, q in self._heap if q.head is not None]
        heapq.heapify(self._heap)
