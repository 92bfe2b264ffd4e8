"""A job's estimated start, its range and how it was made, from forward runs (``forecast``).

:func:`forecast` makes the three runs of :mod:`gpupool.sim.forecast` (expected, early, late)
once for every job asked about, and :meth:`Forecasts.of` answers for one job: when it is
expected to start, the range, on which pool, the jobs running now that must end first there,
the jobs queued now that start before it, and the method in words ("no runtime limits:
estimated from 42 similar past jobs"). The server keeps one :class:`Forecasts` per controller
cycle, so a ``why`` costs a lookup; the simulator asks for one job at a time.
"""

from __future__ import annotations

import bisect
from collections.abc import Callable, Collection, Mapping
from dataclasses import dataclass

from gpupool.scheduler import PendingJob, Policy, Snapshot
from gpupool.sim.forecast import End, Limits, Run, run_forward
from gpupool.sim.runtimes import RuntimeModel


@dataclass(frozen=True, slots=True)
class Forecast:
    """One queued job's forecast; times on the snapshot's clock. ``start`` None: it does not
    start within the horizon (``until``) if nothing else happens."""

    job_id: str
    start: float | None
    earliest: float | None
    latest: float | None
    pool: str | None
    gpu_type: str | None
    until: float
    method: str  # now, runtime limits, past jobs, limits and past jobs, default runtime, none
    basis: str  # the method and its uncertainty, in words
    waits_for: tuple[str, ...]  # running at the snapshot, ending on its pool before it starts
    ahead: tuple[str, ...]  # queued at the snapshot, starting before it (start order)


class Forecasts:
    """The runs of one snapshot; :meth:`of` answers for a job that was queued in it."""

    def __init__(self, now: float, runs: Mapping[str, Run], queued: Collection[str]) -> None:
        self.now = now
        self.runs = runs
        self.queued = frozenset(queued)
        expected = runs["seconds"]
        self._ends = expected.ends
        self._end_times = [end.at for end in expected.ends]
        starts = sorted(
            (start.at, job_id) for job_id, start in expected.starts.items() if job_id in queued
        )
        self._start_order = [job_id for _, job_id in starts]
        self._start_times = [at for at, _ in starts]

    def of(self, job_id: str) -> Forecast | None:
        """None: the job was not queued in the snapshot forecast from."""
        if job_id not in self.queued:
            return None
        expected = self.runs["seconds"]
        start = expected.starts.get(job_id)
        low, high = self.runs.get("low"), self.runs.get("high")
        early = None if low is None else low.starts.get(job_id)
        late = None if high is None else high.starts.get(job_id)
        if start is None:
            return Forecast(
                job_id,
                None,
                None if early is None else early.at,
                None,
                None,
                None,
                expected.until,
                "none",
                _beyond(self.now, expected),
                (),
                (),
            )
        before = self._end_times[: bisect.bisect_right(self._end_times, start.at)]
        ended = self._ends[: len(before)]
        waits_for = tuple(e.job_id for e in ended if e.initial and e.pool == start.pool)
        k = bisect.bisect_left(self._start_times, start.at)
        ahead = tuple(j for j in self._start_order[:k] if j != job_id)
        method, basis = _method(ended, start.at <= self.now + 1.0)
        # The range: the early and late runs' starts, widened to hold the expected one (a
        # different order of ends can move a job either way); unknown when a run was cut.
        times = [start.at, *(s.at for s in (early, late) if s is not None)]
        return Forecast(
            job_id,
            start.at,
            min(times) if early is not None else None,
            max(times) if late is not None else None,
            start.pool,
            start.gpu_type,
            expected.until,
            method,
            basis,
            waits_for,
            ahead,
        )


def forecast(
    snapshot: Snapshot,
    groups: Mapping[str, tuple[PendingJob, ...]],
    policy: Policy,
    runtimes: RuntimeModel,
    targets: Collection[str] | None = None,
    limits: Limits = Limits(),
    spread: bool = True,
    stop: Callable[[], bool] | None = None,
) -> Forecasts:
    """The expected run, and with ``spread`` the early and the late one, for ``targets``
    (None: every queued job)."""
    scenarios = ("seconds", "low", "high") if spread else ("seconds",)
    runs = {}
    for name in scenarios:
        if runs and stop is not None and stop():
            break  # the budget is spent: no range (the expected run always goes)
        runs[name] = run_forward(snapshot, groups, policy, runtimes, targets, limits, name, stop)
    queued = [job.id for jobs in groups.values() for job in jobs]
    return Forecasts(snapshot.now, runs, queued)


def _method(ended: list[End], now: bool) -> tuple[str, str]:
    """How the start was found: from the runtimes of the jobs that ended before it."""
    if not ended:
        if now:
            return "now", "it fits now: it starts at the controller's next cycle"
        return "now", "it starts when the jobs it waits for end; no runtime was estimated"
    limits = sum(1 for e in ended if e.source == "limit")
    history = [e for e in ended if e.source == "history"]
    defaults = sum(1 for e in ended if e.source == "default")
    past = max((e.samples for e in history), default=0)
    parts = []
    if limits:
        parts.append(f"{limits} job(s) end by their runtime limit (max_runtime_s)")
    if history:
        parts.append(
            f"{len(history)} without a limit estimated from up to {past} similar past jobs "
            "(range: their 25th to 75th percentile runtimes)"
        )
    if defaults:
        parts.append(f"{defaults} with no similar past job taken to run an hour")
    if limits and not history and not defaults:
        method = "runtime limits"
        note = (
            "; a latest estimate: jobs that end before their limits let it start sooner, "
            "jobs submitted later with a higher priority or a smaller share may go first"
        )
    elif not limits and history and not defaults:
        method = "past jobs"
        note = "; no runtime limits, so it is uncertain: jobs submitted later may go first"
    elif not history and not limits:
        method = "default runtime"
        note = "; no runtime limits and no past jobs to go by: a rough guess"
    else:
        method = "limits and past jobs"
        note = "; jobs submitted later may go first"
    return method, "; ".join(parts) + note


def _beyond(now: float, run: Run) -> str:
    if run.done:
        return "nothing that is running or queued now frees room for it: it waits for a change"
    hours = (run.until - now) / 3600
    if run.cut == "budget":
        return (
            f"not found within the forecast's time budget (it looked {hours:,.1f} h ahead, "
            f"{run.cycles} cycles): it starts later than that, if nothing else changes"
        )
    return (
        f"it does not start within the forecast horizon ({hours:,.1f} h ahead, "
        f"{run.cycles} cycles) if nothing else changes"
    )
