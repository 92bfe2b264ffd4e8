"""Team queues and the two orderings of the cycle (DESIGN §5.1-5.2).

Job order within a team (:func:`job_order`): starving jobs first (Q8, see
:mod:`gpupool.scheduler.reservations`), oldest first among them; then priority high first,
submit time, id.

Head order across teams (:func:`head_order`) is documented there; in short: starving heads,
within-nominal heads, lowest weighted dominant share (equal within a tolerance), lowest decayed
history per weight, priority, submit time, id.

A team's head key depends only on that team's own usage and head job. An admission changes only
the deciding team's usage, so after it the team is pushed again with its next head and no other
entry needs refreshing. A preemption claim also changes its victims' teams:
:meth:`Heads.refresh` then re-keys every team.
"""

from __future__ import annotations

import heapq
import math
from collections.abc import Callable, Iterable

from gpupool.scheduler.snapshot import PendingJob

JobKey = tuple[int, float, float, str]
HeadKey = tuple[int, float, int, float, float, int, float, str]


def _never_starving(job: PendingJob) -> bool:
    return False


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
    """The cross-team comparator (DESIGN §5.2, Q4, Q8), smallest first:

    1. starving heads (waited ``starvation_after_s`` or more) before all others, the oldest
       first (see :func:`job_order`);
    2. heads that fit within their team's nominal quota on an acceptable gpu type;
    3. lowest weighted dominant share, as :func:`share_key` (equal within the tolerance);
    4. on equal shares, lowest decayed usage history per weight (:func:`history_key`): a team
       that used less over time goes first, so near-ties are broken fairly over time;
    5. priority high first, submit time, job id.
    """
    return (
        0 if starving else 1,
        job.submitted_at if starving else 0.0,
        0 if within_nominal else 1,
        share,
        history,
        -job.priority,
        job.submitted_at,
        job.id,
    )


class TeamQueue:
    """One team's pending jobs in :func:`job_order`, consumed from the head."""

    __slots__ = ("_jobs", "_next", "team")

    def __init__(
        self,
        team: str,
        jobs: list[PendingJob],
        starving: Callable[[PendingJob], bool] = _never_starving,
    ) -> None:
        self.team = team
        self._jobs = sorted(jobs, key=lambda job: job_order(job, starving(job)))
        self._next = 0

    @property
    def head(self) -> PendingJob | None:
        return self._jobs[self._next] if self._next < len(self._jobs) else None

    def advance(self) -> None:
        """Move past the head, admitted or set aside (best-effort FIFO)."""
        self._next += 1

    def drain(self) -> list[PendingJob]:
        """Every job after the head, in order; the queue is left empty (strict FIFO)."""
        rest = self._jobs[self._next + 1 :]
        self._next = len(self._jobs)
        return rest


def build_queues(
    pending: Iterable[PendingJob], starving: Callable[[PendingJob], bool] = _never_starving
) -> list[TeamQueue]:
    """One queue per team with pending jobs, in team name order."""
    by_team: dict[str, list[PendingJob]] = {}
    for job in pending:
        by_team.setdefault(job.team, []).append(job)
    return [TeamQueue(team, by_team[team], starving) for team in sorted(by_team)]


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
