"""Forecast benchmark: the cost of one start-time forecast (``gpupool why``) on the scheduler
benchmark's synthetic clusters (``bench/scheduler.py``: S, M, L; the full cluster, every device
held by a running job that started in the last 12 hours, half of them with a 24-hour runtime
limit, and the whole pending set queued).

The runtime history is generated too: per team, gpu type and job size, 5 finished jobs with
runtimes drawn log-uniformly between 10 minutes and 10 hours (``--seed``).

Measured (``time.perf_counter``, the median of ``--repeat`` runs; the forecast's own work only,
as the server does it once the controller's last cycle is at hand):

* ``head_forecast_ms``: the three forward runs (expected, early, late) for the first job of the
  first team's queue, as ``why`` computes it when no forecast of this cycle is cached.
* ``head_cycles``: the cycles of its expected run; ``head_start_in_s``: when it starts.
* ``deep_forecast_ms``: the same for the job in the middle of that team's queue; its runs stop
  at the server's limits (``--max-cycles``, a 7-day horizon) and its budget of CPU time
  (``--budget-s``, the server's 2 s; 0: none): ``deep_cycles``, and whether it was found to
  start (``deep_started``).
* ``*_cpu_ms``: the same in CPU time of the process (on a shared machine wall time also
  counts the time other processes had the CPU; the 2 s budget is CPU time too).
* ``cached_why_ms``: answering for a job whose forecast this cycle already made (a lookup):
  what every later ``why`` of the same cycle costs. The server refreshes a job's forecast at
  most once per controller cycle.
* ``history_build_ms``: building the runtime model from the history (done once per cycle).

Usage: python bench/forecast.py --size S|M|L [--json] [--repeat N] [--seed N] [--max-cycles N]
       [--budget-s S]
"""

from __future__ import annotations

import argparse
import dataclasses
import gc
import json
import math
import os
import platform
import statistics
import sys
import time
from pathlib import Path
from random import Random
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

from scheduler import GPU_TYPES, JOB_GPUS, SIZES, build_cluster

from gpupool.controller.parking import groups_of
from gpupool.scheduler import Policy
from gpupool.server.services.forecasts import BUDGET_S
from gpupool.sim.estimate import Forecasts, forecast
from gpupool.sim.forecast import Limits
from gpupool.sim.runtimes import RuntimeModel

SERVER_LIMITS = Limits()  # what the server forecasts with


def history(teams: list[str], seed: int) -> list[tuple[str, str, int, float]]:
    rng = Random(seed)
    low, high = math.log(600.0), math.log(36_000.0)
    return [
        (team, gpu_type, gpus, math.exp(rng.uniform(low, high)))
        for team in teams
        for gpu_type in GPU_TYPES
        for gpus in (*JOB_GPUS, 16)
        for _ in range(5)
    ]


def timed(repeat: int, work: Any) -> tuple[float, float, Any]:
    """Median wall and CPU milliseconds of ``work()`` and its last result (CPU time: what the
    forecast itself costs on a shared, loaded machine, where wall time waits for others)."""
    times, cpu, result = [], [], None
    for _ in range(repeat):
        gc.collect()
        began, began_cpu = time.perf_counter(), time.process_time()
        result = work()
        times.append((time.perf_counter() - began) * 1000)
        cpu.append((time.process_time() - began_cpu) * 1000)
    return statistics.median(times), statistics.median(cpu), result


def main(argv: list[str] | None = None) -> dict[str, Any]:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--size", choices=sorted(SIZES), default="S")
    parser.add_argument("--json", action="store_true")
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--max-cycles", type=int, default=SERVER_LIMITS.max_cycles)
    parser.add_argument("--budget-s", type=float, default=BUDGET_S)
    args = parser.parse_args(argv)
    limits = dataclasses.replace(SERVER_LIMITS, max_cycles=args.max_cycles)
    cluster = build_cluster(SIZES[args.size], args.seed)
    snapshot = cluster.full
    groups = groups_of(snapshot.pending)
    policy = Policy()
    first_team = sorted(groups)[0]
    queue = groups[first_team]
    head, deep = queue[0].id, queue[len(queue) // 2].id
    samples = history(sorted(snapshot.teams), args.seed)
    build_ms, _, model = timed(args.repeat, lambda: RuntimeModel(samples))

    def one(job_id: str) -> Forecasts:
        stop = None
        if args.budget_s > 0:
            deadline = time.thread_time() + args.budget_s
            stop = lambda: time.thread_time() > deadline  # noqa: E731
        return forecast(
            snapshot, groups, policy, model, targets=(job_id,), limits=limits, stop=stop
        )

    head_ms, head_cpu, head_runs = timed(args.repeat, lambda: one(head))
    deep_ms, deep_cpu, deep_runs = timed(args.repeat, lambda: one(deep))
    lookup_ms, _, _ = timed(max(args.repeat, 5), lambda: head_runs.of(head))
    head_found, deep_found = head_runs.of(head), deep_runs.of(deep)
    results = {
        "size": args.size,
        "seed": args.seed,
        "repeat": args.repeat,
        "nodes": sum(len(p.nodes) for p in snapshot.pools),
        "running": len(snapshot.running),
        "pending": len(snapshot.pending),
        "teams": len(snapshot.teams),
        "history_jobs": model.count,
        "max_cycles": limits.max_cycles,
        "budget_s": args.budget_s,
        "horizon_s": limits.horizon_s,
        "history_build_ms": build_ms,
        "head_forecast_ms": head_ms,
        "head_forecast_cpu_ms": head_cpu,
        "head_cycles": head_runs.runs["seconds"].cycles,
        "head_start_in_s": None
        if head_found is None or head_found.start is None
        else head_found.start - snapshot.now,
        "deep_position": len(queue) // 2 + 1,
        "deep_forecast_ms": deep_ms,
        "deep_forecast_cpu_ms": deep_cpu,
        "deep_cycles": deep_runs.runs["seconds"].cycles,
        "deep_looked_ahead_s": deep_runs.runs["seconds"].until - snapshot.now,
        "deep_started": deep_found is not None and deep_found.start is not None,
        "cached_why_ms": lookup_ms,
        "python": platform.python_version(),
        "cpus": os.cpu_count(),
    }
    if args.json:
        print(json.dumps(results, indent=2))
    else:
        for key, value in results.items():
            print(f"{key:>20}: {value:,.2f}" if isinstance(value, float) else f"{key:>20}: {value}")
    return results


if __name__ == "__main__":
    main()
