"""Controller speed: one ``schedule`` step (bring the queue state up to date from the store,
build the snapshot, run the cycle, write the reasons) with a long queue that cannot start.

On each store of ``--stores`` (SQLite in a temporary directory; PostgreSQL in a scratch
database, when it can be reached: see ``stores.py``), or on ``--database-url``: ``--teams``
teams whose quota is 0 GPUs and ``--queued`` queued jobs spread over them, submitted over the
last few seconds (none starves), one pool of 8-GPU nodes (its backend is never called). Nothing
is admitted, so every step decides, or keeps parked, the whole queue. Measured with
``time.perf_counter`` around ``Controller.schedule()``:

* ``first_schedule_ms``: the first step, which reads the whole queue and writes every job's
  reasons (what a controller pays once, at start or on taking over);
* ``schedule_ms``: the median of ``--repeat`` later steps, each after one more job was
  submitted (what a busy controller sees); ``cycle_ms`` is the scheduler's part of it
  (the parked cycle), the rest is reading the changes, building the snapshot and writing
  reasons.

The targets (``targets`` in the JSON, ``met`` per store): a step <= 50 ms and a first step
<= 5 s at 100,000 queued jobs of 200 teams.

    python bench/controller.py [--queued 100000] [--teams 200] [--repeat 5] [--json]
           [--stores sqlite,postgresql] [--database-url URL]
"""

from __future__ import annotations

import argparse
import contextlib
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
from stores import postgres_database

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
TARGETS = {"schedule_ms": 50.0, "first_schedule_ms": 5000.0}


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
    execution.close()
    engine.dispose()
    out = {
        "first_schedule_ms": round(first_ms, 1),
        "first_cycle_ms": round(first_cycle_ms, 1),
        "schedule_ms": round(statistics.median(s for s, _ in steps), 1),
        "cycle_ms": round(statistics.median(c for _, c in steps), 1),
    }
    out["met"] = all(out[key] <= bound for key, bound in TARGETS.items())
    return out


def main(argv: list[str] | None = None) -> dict[str, Any]:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--queued", type=int, default=100_000)
    parser.add_argument("--teams", type=int, default=200)
    parser.add_argument("--repeat", type=int, default=5)
    parser.add_argument("--stores", default="sqlite,postgresql", help="comma-separated")
    parser.add_argument("--database-url", default=None, help="one store instead of --stores")
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args(argv)
    result: dict[str, Any] = {
        "benchmark": "controller",
        "queued": args.queued,
        "teams": args.teams,
        "repeat": args.repeat,
        "targets": TARGETS,
        "stores": {},
        "python": f"{platform.python_implementation()} {platform.python_version()}",
        "cpus": os.cpu_count(),
    }
    stores = ["url"] if args.database_url else args.stores.split(",")
    for store in stores:
        with contextlib.ExitStack() as stack:
            if store == "url":
                url, store = args.database_url, args.database_url.split(":", 1)[0]
            elif store == "postgresql":
                url = stack.enter_context(postgres_database())
                if url is None:
                    result["stores"][store] = {"skipped": "PostgreSQL cannot be reached"}
                    continue
            else:
                tmp = stack.enter_context(tempfile.TemporaryDirectory(prefix="gpupool-bench-"))
                url = sqlite_url(Path(tmp))
            measured = measure(args.queued, args.teams, args.repeat, url)
            result["stores"][store] = measured
            if not args.json:
                print(
                    f"{args.queued:,} queued jobs, {args.teams} teams, {store}: first step "
                    f"{measured['first_schedule_ms']:,.0f} ms; then {measured['schedule_ms']:,.1f}"
                    f" ms a step, of which the cycle {measured['cycle_ms']} ms",
                    flush=True,
                )
    if args.json:
        print(json.dumps(result))
    return result


if __name__ == "__main__":
    main()
