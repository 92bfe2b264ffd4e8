"""Preemption candidates per gpu type, in victim order, read as far as a search needs.

Within one team the order is lowest priority, most recently started, id
(:func:`victim_order`); terminating jobs are ordered by when they end, then id. Lists are ordered
at first use and only as far as read (a heap feeding a cached prefix), so finding one victim on
a full cluster costs a heapify of one team's jobs, not a sort of every running job.
"""

from __future__ import annotations

import heapq
import math
from collections.abc import Iterable, Iterator

from gpupool.scheduler.snapshot import RunningJob
from gpupool.scheduler.workspace import Workspace


def victim_order(job: RunningJob) -> tuple[int, float, str]:
    """Within one team: lowest priority, most recently started, id."""
    return (job.priority, -job.started_at, job.id)


class _Ordered:
    """One team's running jobs of one gpu type in :func:`victim_order`, sorted lazily: a heap
    pops them into a cached prefix only as far as searches read, so finding a victim on a full
    cluster does not sort every running job."""

    __slots__ = ("_heap", "_prefix")

    def __init__(self, jobs: list[RunningJob]) -> None:
        # victim_order inlined (this runs once per team over all its jobs); ids are unique, so
        # two entries never compare equal up to the job itself.
        self._heap = [(job.priority, -job.started_at, job.id, job) for job in jobs]
        heapq.heapify(self._heap)
        self._prefix: list[RunningJob] = []

    def __iter__(self) -> Iterator[RunningJob]:
        i = 0
        while True:
            if i < len(self._prefix):
                yield self._prefix[i]
                i += 1
            elif self._heap:
                self._prefix.append(heapq.heappop(self._heap)[3])
            else:
                return


class VictimIndex:
    """Running jobs per gpu type and team in :func:`victim_order`, and the terminating ones by
    end time; each list is ordered at first use, so a cycle pays only for what it searches."""

    def __init__(self, ws: Workspace) -> None:
        self._ws = ws
        self._teams: dict[tuple[str, str], _Ordered] = {}
        self._ending: dict[str, list[RunningJob]] = {}
        self._possible: dict[tuple[bool, str, str], bool] = {}

    def may_have_candidates(self, team: str, gpu_type: str) -> bool:
        """False when no search for a job of ``team`` on ``gpu_type`` can find any candidate:
        nothing of the type is ending and neither the team nor any member of its cohort runs a
        job of it. Fixed for the cycle: running jobs are never added, claims only remove."""
        cohort = self._ws.team(team).cohort
        key = (False, team, gpu_type) if cohort is None else (True, cohort, gpu_type)
        possible = self._possible.get(key)
        if possible is None:
            by_team = self._ws.jobs_of(gpu_type)
            members = [team] if cohort is None else self._ws.cohort_members(cohort)
            possible = self._possible[key] = bool(self._ws.ending_of(gpu_type)) or any(
                by_team.get(member) for member in members
            )
        return possible

    def team_jobs(self, gpu_type: str, team: str) -> Iterable[RunningJob]:
        ordered = self._teams.get((gpu_type, team))
        if ordered is None:
            jobs = self._ws.jobs_of(gpu_type).get(team, [])
            ordered = self._teams[(gpu_type, team)] = _Ordered(jobs)
        return ordered

    def ending(self, gpu_type: str) -> list[RunningJob]:
        jobs = self._ending.get(gpu_type)
        if jobs is None:
            jobs = self._ending[gpu_type] = sorted(
                self._ws.ending_of(gpu_type),
                key=lambda j: (math.inf if j.ends_by is None else j.ends_by, j.id),
            )
        return jobs
