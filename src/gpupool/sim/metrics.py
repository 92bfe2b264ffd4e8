"""The numbers of one simulated policy, overall and per team (``metrics.json``).

Definitions (seconds unless named otherwise):

* JCT: end - submit of a completed job; queueing delay: JCT - duration: all the time it spent
  in the system beyond the work it needs: waits, including those after a preemption, and the
  time its attempts ran for work a preemption then lost (run again by the next attempt).
* utilization: GPU-seconds held by running attempts / (cluster GPUs x makespan); makespan:
  last end - first submit.
* borrowed GPU-hours: GPUs admitted above the team's nominal quota x the time they ran.
* lost GPU-hours: per preempted attempt, its GPUs x the work it did beyond its job's last
  checkpoint (all of it for a job without ``checkpoint_interval_s``): work run twice.
* preemptions per job: over the jobs that started at least once (mean, p99, max, and how many
  were preempted at least once and at least three times).
* quota-guarantee violation: per team, total time during which a waiting job of the team would
  have fit within its nominal quota next to what the team held, beyond one scheduling interval
  of each such spell (the configured quotas count for every policy).
* Jain's fairness index over per-team normalised service: a team's service is its GPU-weighted
  run time over its GPU-weighted time in the system (sum gpus x duration / sum gpus x JCT, 1 =
  never waited); the index is (sum x)^2 / (n sum x^2) over teams with completed jobs, 1 = all
  teams served alike.
"""

from __future__ import annotations

import math
from collections import defaultdict
from collections.abc import Iterable, Sequence
from typing import Any

from gpupool.sim.budgets import BudgetRun
from gpupool.sim.engine import JobRecord, Outcome


def percentile(sorted_values: Sequence[float], q: float) -> float:
    """Linear interpolation between closest ranks (numpy's default); 0 for no values."""
    if not sorted_values:
        return 0.0
    position = (len(sorted_values) - 1) * q
    low = math.floor(position)
    high = min(low + 1, len(sorted_values) - 1)
    return sorted_values[low] + (sorted_values[high] - sorted_values[low]) * (position - low)


def jain(values: Iterable[float]) -> float:
    xs = list(values)
    if not xs or not any(xs):
        return 1.0
    return sum(xs) ** 2 / (len(xs) * sum(x * x for x in xs))


def _delays(records: Iterable[JobRecord]) -> dict[str, Any]:
    done = [r for r in records if r.end is not None]
    jct = sorted(r.end - r.trace.submit_s for r in done if r.end is not None)
    queue = sorted(map(queue_delay, done))
    return {
        "completed": len(done),
        "avg_jct_s": sum(jct) / len(jct) if jct else 0.0,
        "p50_jct_s": percentile(jct, 0.5),
        "p99_jct_s": percentile(jct, 0.99),
        "avg_queue_s": sum(queue) / len(queue) if queue else 0.0,
        "p50_queue_s": percentile(queue, 0.5),
        "p90_queue_s": percentile(queue, 0.9),
        "p99_queue_s": percentile(queue, 0.99),
    }


def queue_delay(record: JobRecord) -> float:
    """A completed job's queueing delay (see the module docstring)."""
    assert record.end is not None
    return max(0.0, record.end - record.trace.submit_s - record.trace.duration_s)


def preemptions_per_job(records: Iterable[JobRecord]) -> dict[str, Any]:
    counts = sorted(r.preempted for r in records if r.attempts)
    histogram: dict[str, int] = {}
    for count in counts:
        histogram[str(count)] = histogram.get(str(count), 0) + 1
    return {
        "jobs": len(counts),
        "mean": sum(counts) / len(counts) if counts else 0.0,
        "p99": percentile(counts, 0.99),
        "max": counts[-1] if counts else 0,
        "at_least_1": sum(1 for c in counts if c >= 1),
        "at_least_3": sum(1 for c in counts if c >= 3),
        "histogram": histogram,  # times preempted -> jobs
    }


def lost_gpu_hours(records: Iterable[JobRecord]) -> float:
    return sum(r.lost_gpu_s for r in records) / 3600


def service(records: Iterable[JobRecord]) -> float | None:
    ran = waited = 0.0
    for r in records:
        if r.end is None:
            continue
        gpus = r.shape.total
        ran += gpus * r.trace.duration_s
        waited += gpus * (r.end - r.trace.submit_s)
    return ran / waited if waited > 0 else None


def busy_gpu_seconds(busy: Sequence[tuple[float, int]], until: float) -> float:
    total, last_t, last_v = 0.0, None, 0
    for t, v in busy:
        if last_t is not None:
            total += last_v * (t - last_t)
        last_t, last_v = t, v
    if last_t is not None and until > last_t:
        total += last_v * (until - last_t)
    return total


def utilization_series(outcome: Outcome, buckets: int = 200) -> list[tuple[float, float]]:
    """(bucket start, mean fraction of GPUs held) over the makespan, for the report."""
    start, end = span(outcome)
    if end <= start or outcome.total_gpus == 0:
        return []
    width = (end - start) / buckets
    held = [0.0] * buckets
    changes = outcome.busy
    for i, (t, value) in enumerate(changes):
        t_next = changes[i + 1][0] if i + 1 < len(changes) else end
        a, b = max(t, start), min(t_next, end)
        while a < b and value:
            k = min(int((a - start) / width), buckets - 1)
            edge = min(b, start + (k + 1) * width)
            held[k] += value * (edge - a)
            a = edge if edge > a else b
    return [(start + k * width, held[k] / (width * outcome.total_gpus)) for k in range(buckets)]


def span(outcome: Outcome) -> tuple[float, float]:
    submits = [r.trace.submit_s for r in outcome.jobs]
    ends = [r.end for r in outcome.jobs if r.end is not None]
    if not submits or not ends:
        return 0.0, 0.0
    return min(submits), max(ends)


def summarize(outcome: Outcome) -> dict[str, Any]:
    records = outcome.jobs
    start, end = span(outcome)
    makespan = end - start
    busy = busy_gpu_seconds(outcome.busy, end)
    by_team: dict[str, list[JobRecord]] = defaultdict(list)
    for r in records:
        by_team[r.trace.team].append(r)
    per_team: dict[str, Any] = {}
    services = []
    for team in sorted(by_team):
        mine = by_team[team]
        served = service(mine)
        if served is not None:
            services.append(served)
        per_team[team] = {
            "jobs": len(mine),
            "unschedulable": sum(1 for r in mine if r.unschedulable),
            **_delays(mine),
            "gpu_hours": sum(r.shape.total * r.trace.duration_s for r in mine if r.end) / 3600,
            "nominal_gpus": outcome.nominal.get(team, 0),
            "quota_violation_s": outcome.quota_violation_s.get(team, 0.0),
            "service": served,
            "lost_gpu_hours": lost_gpu_hours(mine),
            "preempted_jobs": sum(1 for r in mine if r.preempted),
            **_team_accounting(outcome, team),
        }
    return {
        "jobs": len(records),
        "unschedulable": sum(1 for r in records if r.unschedulable),
        **_delays(records),
        "utilization": busy / (outcome.total_gpus * makespan) if makespan > 0 else 0.0,
        "makespan_s": makespan,
        "preemptions": outcome.preemptions,
        "evictions": outcome.evictions,
        "preemptions_per_job": preemptions_per_job(records),
        "lost_gpu_hours": lost_gpu_hours(records),
        "borrowed_gpu_hours": outcome.borrowed_gpu_s / 3600,
        "quota_violation_s": sum(outcome.quota_violation_s.values()),
        "jain_fairness": jain(services),
        "cluster_gpus": outcome.total_gpus,
        "cycles": outcome.cycles,
        "events": outcome.events,
        "events_per_s": outcome.events / outcome.wall_s if outcome.wall_s > 0 else 0.0,
        "wall_s": outcome.wall_s,
        **accounting(outcome, makespan),
        "budgets": [budget_summary(run) for run in outcome.budgets],
        "per_team": per_team,
    }


def budget_summary(run: BudgetRun) -> dict[str, Any]:
    """One configured budget over the run: how long its enforcement held its team back, in how
    many periods it was used up, and how it stood in the last period evaluated."""
    return {
        "team": run.team,
        "budget": run.name,
        "enforcement": run.enforcement,
        "unit": run.unit,
        "limit": run.limit,
        "last_period": run.period,
        "used_in_last_period": run.used,
        "periods_over": run.periods_over,
        "enforced_hours": run.enforced_s / 3600,
    }


def _team_accounting(outcome: Outcome, team: str) -> dict[str, float]:
    within, borrowed = outcome.team_gpu_s.get(team, (0.0, 0.0))
    return {
        "gpu_hours_within_nominal": within / 3600,
        "gpu_hours_borrowed": borrowed / 3600,
        "cost": outcome.team_cost.get(team, 0.0),
    }


def node_seconds(changes: Sequence[tuple[float, int]], start: float, end: float) -> float:
    """The integral over ``[start, end]`` of a node count that changes at ``changes`` (time,
    count), sorted by time; 0 before the first change."""
    total = 0.0
    for i, (t, count) in enumerate(changes):
        t_next = changes[i + 1][0] if i + 1 < len(changes) else end
        a, b = max(t, start), min(t_next, end)
        if b > a:
            total += count * (b - a)
    return total


def accounting(outcome: Outcome, makespan: float) -> dict[str, Any]:
    """The run's bill as the ledger would price it: the teams' cost, each pool's idle cost (its
    GPUs over the run's span, less what attempts used, at the pool's price), and what the
    pools' nodes cost in all (``capacity_cost``: node-hours x GPUs per node x price; an
    autoscaled pool counts the nodes it had, up, coming up or draining, at each moment)."""
    start, end = span(outcome)
    node_s = {
        pool: (
            node_seconds(outcome.pool_nodes[pool], start, end)
            if pool in outcome.pool_nodes
            else outcome.pool_size.get(pool, 0) * makespan
        )
        for pool, gpus in outcome.pool_gpus.items()
    }
    capacity_gpu_s = {pool: s * outcome.node_gpus.get(pool, 0) for pool, s in node_s.items()}
    idle_gpu_s = {
        pool: max(0.0, capacity_gpu_s[pool] - outcome.pool_used_gpu_s.get(pool, 0.0))
        for pool in outcome.pool_gpus
    }
    return {
        "currency": outcome.currency,
        "cost": sum(outcome.team_cost.values()),
        "idle_gpu_hours": sum(idle_gpu_s.values()) / 3600,
        "idle_cost": sum(
            seconds / 3600 * outcome.pool_price.get(pool, 0.0)
            for pool, seconds in idle_gpu_s.items()
        ),
        "node_hours": sum(node_s.values()) / 3600,
        "capacity_cost": sum(
            seconds / 3600 * outcome.pool_price.get(pool, 0.0)
            for pool, seconds in capacity_gpu_s.items()
        ),
    }
