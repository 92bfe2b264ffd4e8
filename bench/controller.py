"""Controller speed: one ``schedule`` step (read the store, build the snapshot, run the cycle,
write the reasons) with a long queue that cannot start.

A fresh SQLite store in a temporary directory (or ``--database-url``), ``--teams`` teams whose
quota is 0 GPUs and ``--queued`` queued jobs spread over them, submitted over the last few
seconds (none starves), one pool of 8-GPU nodes (its backend is never called). Nothing is
admitted, so every step decides, or keeps parked, the whole queue. Measured with
``time.perf_counter`` around ``Controller.schedule()``:

* ``first_schedule_ms``: the first step, which writes every job's reasons;
* ``schedule_ms``: the median of ``--repeat`` later steps, each after one more job was
  submitted (what a busy controller sees); ``cycle_ms`` is the scheduler's part of it
  (``run_cycle``), the rest is reading the store, building the snapshot and writing reasons.

    python bench/controller.py [--queued 20000] [--teams 50] [--repeat 5] [--json]
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import tempfile
import time
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

from sqlalchemy.orm import Session, sessionmaker

from gpupool.backends.registry import Registry
from gpupool.config import sqlite_url
from gpupool.controller.clock import SystemClock
from gpupool.controller.execution import ExecutionService
from gpupool.controller.loop import Controller
from gpupool.core.jobs import JobStatus
from gpupool.spec.models import ClusterConfig, GpuType, NodeShape, Pool, Quota, Team
from gpupool.state.db import make_engine, session_factory, upgrade
from gpupool.state.models import JobRow

NOW = datetime.now(UTC)


def config(teams: int) -> ClusterConfig:
    return ClusterConfig(
        gpu_types={"h100": GpuType()},
        pools=[
            Pool(name="bench", backend="local", gpu_type="h100", nodes=100, node=NodeShape(gpus=8))
        ],
        teams={
            f"team-{i:03d}": Team(quota={"h100": Quota(nominal=0, borrowing_limit=0)})
            for i in range(teams)
        },
    )


def job(index: int, team: str, submitted_at: datetime) -> JobRow:
    return JobRow(
        id=f"job-{index:07d}",
        name=f"job-{index}",
        team=team,
        user="bench",
        status=JobStatus.QUEUED.value,
        priority_class="default",
        priority=index % 3,
        kind="batch",
        backend="auto",
        command=["true"],
        env={},
        gpus=1 + index % 4,
        nodes=1,
        cpus=0.0,
        memory_gb=0.0,
        gpu_types=["h100"],
        inputs=[],
        outputs=[],
        max_runtime_s=None,
        idempotency_key=None,
        submitted_at=submitted_at,
        attempt=0,
        message="",
        cancel_requested=False,
        pending_reasons=[],
    )


def fill(sessions: sessionmaker[Session], queued: int, teams: int) -> None:
    with sessions.begin() as session:
        session.add_all(
            job(i, f"team-{i % teams:03d}", NOW - timedelta(milliseconds=queued - i))
            for i in range(queued)
        )


def timed(controller: Controller) -> tuple[float, float]:
    started = time.perf_counter()
    stats = controller.schedule()
    return (time.perf_counter() - started) * 1000, stats.cycle_ms


def measure(queued: int, teams: int, repeat: int, url: str) -> dict[str, Any]:
    engine = make_engine(url)
    upgrade(engine)
    sessions = session_factory(engine)
    fill(sessions, queued, teams)
    cluster = config(teams)
    execution = ExecutionService(Registry(lambda name: None), workers=1)
    controller = Controller(sessions, lambda: cluster, execution, SystemClock())
    first_ms, first_cycle_ms = timed(controller)
    steps: list[tuple[float, float]] = []
    for n in range(repeat):
        with sessions.begin() as session:
            session.add(job(queued + n, "team-000", NOW))
        steps.append(timed(controller))
    engine.dispose()
    return {
        "benchmark": "controller",
        "queued": queued,
        "teams": teams,
        "repeat": repeat,
        "store": url.split(":", 1)[0],
        "first_schedule_ms": round(first_ms, 1),
        "first_cycle_ms": round(first_cycle_ms, 1),
        "schedule_ms": round(statistics.median(s for s, _ in steps), 1),
        "cycle_ms": round(statistics.median(c for _, c in steps), 1),
        "python": f"{platform.python_implementation()} {platform.python_version()}",
        "cpus": os.cpu_count(),
    }


def main(argv: list[str] | None = None) -> dict[str, Any]:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--queued", type=int, default=20_000)
    parser.add_argument("--teams", type=int, default=50)
    parser.add_argument("--repeat", type=int, default=5)
    parser.add_argument("--database-url", default=None, help="default: SQLite in a temp dir")
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args(argv)
    with tempfile.TemporaryDirectory(prefix="gpupool-bench-") as tmp:
        url = args.database_url or sqlite_url(Path(tmp))
        result = measure(args.queued, args.teams, args.repeat, url)
    if args.json:
        print(json.dumps(result))
    else:
        print(
            f"{result['queued']:,} queued jobs, {result['teams']} teams, {result['store']}: "
            f"first step {result['first_schedule_ms']:,.0f} ms; then "
            f"{result['schedule_ms']:,.0f} ms a step, of which the cycle {result['cycle_ms']} ms"
        )
    return result


if __name__ == "__main__":
    main()
