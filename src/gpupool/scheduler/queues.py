"""Team queues and the two orderings of the cycle (DESIGN §5.1-5.2).

Job order within a team (:func:`job_order`): priority high first, then submit time, then id.

Head order across teams (:func:`head_order`), smallest first:

1. heads that fit within their team's nominal quota on at least one acceptable gpu type;
2. lowest weighted dominant share of the team (:func:`gpupool.core.quota.dominant_share`);
3. priority high first, submit time, job id.

A team's head key depends only on that team's own usage and head job, and only the team whose
head was just decided changes either. So one heap entry per team is always current: after a
decision the team is pushed again with its next head, and no other entry needs refreshing.
Decayed historical usage (fair share over time) will slot in after the share.
"""

from __future__ import annotations

import heapq
from collections.abc import Callable, Iterable

from gpupool.scheduler.snapshot import PendingJob

JobKey = tuple[int, float, str]
HeadKey = tuple[int, float, int, float, str]


def job_order(job: PendingJob) -> JobKey:
    return (-job.priority, job.submitted_at, job.id)


def head_order(within_nominal: bool, share: float, job: PendingJob) -> HeadKey:
    return (0 if within_nominal else 1, share, -job.priority, job.submitted_at, job.id)


class TeamQueue:
    """One team's pending jobs in :func:`job_order`, consumed from the head."""

    __slots__ = ("_jobs", "_next", "team")

    def __init__(self, team: str, jobs: list[PendingJob]) -> None:
        self.team = team
        self._jobs = sorted(jobs, key=job_order)
        self._next = 0

    @property
    def head(self) -> PendingJob | None:
        return self._jobs[self._next] if self._next < len(self._jobs) else None

    def advance(self) -> None:
        """Move past the head, admitted or set aside (best-effort FIFO)."""
        self._next += 1


def build_queues(pending: Iterable[PendingJob]) -> list[TeamQueue]:
    """One queue per team with pending jobs, in team name order."""
    by_team: dict[str, list[PendingJob]] = {}
    for job in pending:
        by_team.setdefault(job.team, []).append(job)
    return [TeamQueue(team, by_team[team]) for team in sorted(by_team)]


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
