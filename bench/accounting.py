"""Accounting speed. The JSON is a dict of sections (``sections.<name>``), one per case;
``--sections`` picks them (default: all).

``summary``: a month's cost summary over 1,000,000 attempts of 200 teams, on SQLite and
PostgreSQL (``accounting_summary.py`` says what is filled and measured; its options are
``--summary-*``).

``ledger_overhead``: what the usage ledger adds to a controller step. On each store of
``--stores`` (SQLite in a temporary directory; PostgreSQL in a scratch database: see
``stores.py``): ``--queued`` queued jobs of ``--teams`` teams that cannot start (quota 0), and
``--running`` running attempts of 1-8 GPUs with open ledger rows, of ``--users`` users. Each
round submits one more job and runs, side by side in random order:

* a step without the ledger: ``Controller.schedule()`` (read what changed, snapshot, the
  parked cycle, write reasons), as ``bench/controller.py`` measures it;
* a step with an accrual: the same, then ``Accrual.run()`` (every open row and every pool's
  capacity added to the hourly rollups since the last round, in one transaction).

Keys per store: ``step_ms`` and ``accruing_step_ms`` (medians of ``--repeat`` rounds),
``accrual_ms`` (the accrual alone), ``worst_step_pct`` (what an accruing step adds, in %),
and ``per_step_pct``: the accrual spread over the steps of one ``accrual_interval_s`` (60 s)
when the controller is busy (a tick every ``max(MIN_TICK_GAP_S, 3 x step)``, the loop's
pacing); every other step pays one clock read. The target (``met``): ``per_step_pct <= 5``.

    python bench/accounting.py [--json] [--sections summary,ledger_overhead]
           [--stores sqlite,postgresql] [--queued 20000] [--teams 100] [--running 2000]
           [--users 50] [--repeat 7] [--summary-attempts 1000000] [--summary-teams 200]
           [--summary-running 1000] [--summary-repeat 3] [--summary-seed 1]
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import platform
import random
import statistics
import tempfile
import time
from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import accounting_summary
from sqlalchemy.orm import Session, sessionmaker
from stores import postgres_database

from gpupool.backends.registry import Registry
from gpupool.config import sqlite_url
from gpupool.controller.clock import SystemClock
from gpupool.controller.execution import ExecutionService
from gpupool.controller.loop import MIN_TICK_GAP_S, Controller
from gpupool.core.jobs import JobStatus
from gpupool.spec.models import Accounting, ClusterConfig, GpuType, NodeShape, Pool, Quota, Team
from gpupool.state import usage
from gpupool.state.db import make_engine, session_factory, upgrade
from gpupool.state.models import AttemptRow, JobRow

NOW = datetime.now(UTC)
TARGET_PER_STEP_PCT = 5.0
ACCRUAL_INTERVAL_S = Accounting().accrual_interval_s


def config(teams: int, running: int) -> ClusterConfig:
    nodes = running  # one attempt per 8-GPU node: room for all of them
    quota = {"h100": Quota(nominal=0, borrowing_limit=0)}
    every = {f"team-{i:03d}": Team(quota=quota) for i in range(teams)}
    every["busy"] = Team(quota={"h100": Quota(nominal=8 * nodes)})
    return ClusterConfig(
        gpu_types={"h100": GpuType()},
        pools=[
            Pool(
                name="bench", backend="local", gpu_type="h100", nodes=nodes, node=NodeShape(gpus=8)
            )
        ],
        teams=every,
    )


def job(index: int, team: str, at: datetime, **fields: Any) -> dict[str, Any]:
    return {
        "id": f"job-{index:07d}",
        "name": f"job-{index}",
        "team": team,
        "user": f"user-{index % 50:02d}",
        "status": JobStatus.QUEUED.value,
        "priority_class": "default",
        "priority": index % 3,
        "kind": "batch",
        "backend": "auto",
        "command": ["true"],
        "env": {},
        "gpus": 1 + index % 4,
        "nodes": 1,
        "cpus": 0.0,
        "memory_gb": 0.0,
        "gpu_types": ["h100"],
        "inputs": [],
        "outputs": [],
        "max_runtime_s": None,
        "idempotency_key": None,
        "submitted_at": at,
        "attempt": 0,
        "message": "",
        "cancel_requested": False,
        "pending_reasons": [],
        **fields,
    }


def fill(
    sessions: sessionmaker[Session], queued: int, teams: int, running: int, users: int
) -> None:
    rng = random.Random(7)
    with sessions.begin() as session:
        session.bulk_insert_mappings(
            JobRow,  # type: ignore[arg-type]
            [
                job(i, f"team-{i % teams:03d}", NOW - timedelta(milliseconds=queued - i))
                for i in range(queued)
            ],
        )
    started = NOW - timedelta(hours=2)
    shapes = [rng.choice([1, 2, 4, 8]) for _ in range(running)]
    rows = [
        JobRow(
            **job(
                queued + n,
                "busy",
                started,
                status=JobStatus.RUNNING.value,
                gpus=gpus,
                attempt=1,
                user=f"user-{n % users:03d}",
                pool="bench",
                gpu_type="h100",
            )
        )
        for n, gpus in enumerate(shapes)
    ]
    with sessions.begin() as session:
        session.add_all(rows)
        session.flush()
        attempts = [
            AttemptRow(
                job_id=row.id,
                number=1,
                status=JobStatus.RUNNING.value,
                pool="bench",
                gpu_type="h100",
                placements=[{"node": f"bench-{n}", "devices": list(range(row.gpus))}],
                borrowed=0,
                handle={"backend": "local", "pool": "bench", "provider_id": row.id, "key": "k"},
                admitted_at=started,
                started_at=started,
                message="",
                cancel_sent=False,
            )
            for n, row in enumerate(rows)
        ]
        session.add_all(attempts)
        session.flush()
        for row, attempt in zip(rows, attempts, strict=True):
            usage.open_attempt(
                session,
                attempt_id=attempt.id,
                job_id=row.id,
                job_name=row.name,
                team=row.team,
                user=row.user,
                gpu_type="h100",
                pool="bench",
                backend="local",
                priority_class="default",
                node_type="dedicated",
                gpus=row.gpus,
                borrowed=0,
                at=started + timedelta(milliseconds=rng.randrange(3_600_000)),
            )


def ledger_overhead(
    queued: int, teams: int, running: int, users: int, repeat: int, url: str
) -> dict[str, Any]:
    engine = make_engine(url)
    upgrade(engine)
    sessions = session_factory(engine)
    fill(sessions, queued, teams, running, users)
    cluster = config(teams, running)
    execution = ExecutionService(Registry(lambda name: None), workers=1)
    controller = Controller(sessions, lambda: cluster, execution, SystemClock())
    controller.schedule()  # the first step reads everything: not what is measured
    controller.accrual.run()  # the first accrual only sets the capacity mark
    plain: list[float] = []
    accruing: list[tuple[float, float]] = []
    checks: list[float] = []
    order = random.Random(11)
    n = queued + running
    for _ in range(repeat):
        for with_ledger in order.sample([False, True], 2):
            n += 1
            with sessions.begin() as session:
                session.add(JobRow(**job(n, "team-000", datetime.now(UTC))))
            started = time.perf_counter()
            controller.schedule()
            stepped = time.perf_counter()
            if with_ledger:
                controller.accrual.run()
                ended = time.perf_counter()
                accruing.append(((ended - started) * 1000, (ended - stepped) * 1000))
            else:
                plain.append((stepped - started) * 1000)
                controller.accrual.maybe_run()  # not due: what every other step pays
                checks.append((time.perf_counter() - stepped) * 1e6)
    execution.close()
    engine.dispose()
    step_ms = statistics.median(plain)
    accrual_ms = statistics.median(a for _, a in accruing)
    steps_per_interval = ACCRUAL_INTERVAL_S / max(MIN_TICK_GAP_S, 3 * step_ms / 1000)
    check_us = statistics.median(checks)
    per_step = (accrual_ms / steps_per_interval + check_us / 1000) / step_ms * 100
    out = {
        "step_ms": round(step_ms, 2),
        "accruing_step_ms": round(statistics.median(s for s, _ in accruing), 2),
        "accrual_ms": round(accrual_ms, 2),
        "check_us": round(check_us, 2),
        "worst_step_pct": round(accrual_ms / step_ms * 100, 1),
        "steps_per_interval": round(steps_per_interval),
        "per_step_pct": round(per_step, 3),
    }
    out["met"] = out["per_step_pct"] <= TARGET_PER_STEP_PCT
    return out


def ledger_overhead_section(args: argparse.Namespace) -> dict[str, Any]:
    section: dict[str, Any] = {
        "queued": args.queued,
        "teams": args.teams,
        "running": args.running,
        "users": args.users,
        "repeat": args.repeat,
        "accrual_interval_s": ACCRUAL_INTERVAL_S,
        "target_per_step_pct": TARGET_PER_STEP_PCT,
        "stores": {},
    }
    for store in args.stores.split(","):
        with contextlib.ExitStack() as stack:
            if store == "postgresql":
                url = stack.enter_context(postgres_database())
                if url is None:
                    section["stores"][store] = {"skipped": "PostgreSQL cannot be reached"}
                    continue
            else:
                tmp = stack.enter_context(tempfile.TemporaryDirectory(prefix="gpupool-bench-"))
                url = sqlite_url(Path(tmp))
            measured = ledger_overhead(
                args.queued, args.teams, args.running, args.users, args.repeat, url
            )
            section["stores"][store] = measured
            if not args.json:
                print(
                    f"{store}: a step {measured['step_ms']} ms; with an accrual of "
                    f"{args.running:,} running attempts {measured['accruing_step_ms']} ms "
                    f"(+{measured['worst_step_pct']} %); over an interval "
                    f"+{measured['per_step_pct']} % a step",
                    flush=True,
                )
    return section


SECTIONS: dict[str, Callable[[argparse.Namespace], dict[str, Any]]] = {
    "summary": accounting_summary.summary_section,
    "ledger_overhead": ledger_overhead_section,
}


def main(argv: list[str] | None = None) -> dict[str, Any]:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sections", default=",".join(SECTIONS), help="comma-separated")
    parser.add_argument("--queued", type=int, default=20_000)
    parser.add_argument("--teams", type=int, default=100)
    parser.add_argument("--running", type=int, default=2_000)
    parser.add_argument("--users", type=int, default=50)
    parser.add_argument("--repeat", type=int, default=7)
    parser.add_argument("--stores", default="sqlite,postgresql", help="comma-separated")
    parser.add_argument("--json", action="store_true")
    accounting_summary.add_arguments(parser)
    args = parser.parse_args(argv)
    unknown = set(args.sections.split(",")) - set(SECTIONS)
    if unknown:
        parser.error(f"unknown sections {sorted(unknown)}; use some of {sorted(SECTIONS)}")
    result = {
        "benchmark": "accounting",
        "sections": {name: SECTIONS[name](args) for name in args.sections.split(",")},
        "python": f"{platform.python_implementation()} {platform.python_version()}",
        "cpus": os.cpu_count(),
    }
    if args.json:
        print(json.dumps(result))
    return result


if __name__ == "__main__":
    main()
