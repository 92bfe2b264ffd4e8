"""The ``summary`` section of ``bench/accounting.py``: a month's cost summary over a big ledger.

``UsageService.costs`` for one 30-day month (every team, grouped by team and gpu type, idle
shared proportionally, running attempts up to now) over a ledger of ``--summary-attempts``
attempts of ``--summary-teams`` teams. The ledger is filled as the controller keeps it, in
bulk: each attempt's ``usage`` row (the last ``--summary-running`` still running, accrued to
a few minutes before now) and the hourly rollups of all of them (GPU-ms cut at UTC hours, per
team, user, gpu type, pool, priority class and node type), plus each pool's capacity per
hour. Attempts last a minute to a day (log-normal, median 30 minutes), on 1-8 GPUs, a tenth
of them partly borrowed; each team has 4 users, uses 2 of the 4 pools and mostly one
priority class. Measured with ``time.perf_counter`` around the call, median of
``--summary-repeat`` after one warm-up, on each store of ``--stores`` (SQLite in a temporary
directory; PostgreSQL in a scratch database when it can be reached: see ``stores.py``).
``fill_s`` is how long the fill took.

The target (``targets``, ``met`` per store): the summary <= 1 s at 1,000,000 attempts of
200 teams.
"""

from __future__ import annotations

import argparse
import math
import random
import statistics
import tempfile
import time
from collections import defaultdict
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

from stores import postgres_database

from gpupool.auth.principal import Principal
from gpupool.server.services.usage import ReportQuery, UsageService
from gpupool.spec.models import (
    Accounting,
    Autoscale,
    ClusterConfig,
    GpuType,
    NodeShape,
    Pool,
    Quota,
    Team,
)
from gpupool.state.db import Engine, make_engine, session_factory, upgrade

MONTH_START = datetime(2026, 11, 1, tzinfo=UTC)
DAYS = 30
NOW = MONTH_START + timedelta(days=DAYS) - timedelta(minutes=30)
MS_PER_HOUR = 3_600_000
TARGETS = {"summary_ms": 1000.0}
POOLS = (  # name, gpu type, node type, GPUs
    ("h100-a", "h100", "dedicated", 512),
    ("h100-spot", "h100", "spot", 256),
    ("a100-a", "a100", "dedicated", 512),
    ("a100-b", "a100", "dedicated", 256),
)
CLASSES = ("training", "training", "inference", "best-effort")


def config(teams: int) -> ClusterConfig:
    return ClusterConfig(
        gpu_types={
            "h100": GpuType(price_per_gpu_hour=4.0, spot_price_per_gpu_hour=1.6),
            "a100": GpuType(price_per_gpu_hour=2.0),
        },
        pools=[
            Pool(
                name=name,
                backend="local",
                gpu_type=gpu_type,
                nodes=gpus // 8,
                node=NodeShape(gpus=8),
                autoscale=Autoscale(mode="fixed", node_type=node_type),
            )
            for name, gpu_type, node_type, gpus in POOLS
        ],
        teams={
            f"team-{i}": Team(quota={"h100": Quota(nominal=2), "a100": Quota(nominal=2)})
            for i in range(teams)
        },
        accounting=Accounting(idle_cost="proportional"),
    )


USAGE_COLUMNS = (
    "attempt_id",
    "job_id",
    "job_name",
    "team",
    "user",
    "gpu_type",
    "pool",
    "backend",
    "priority_class",
    "node_type",
    "gpus",
    "borrowed",
    "started_at",
    "ended_at",
    "accrued_until",
    "gpu_ms",
    "borrowed_gpu_ms",
    "outcome",
)
HOUR_COLUMNS = (
    "hour",
    "team",
    "user",
    "gpu_type",
    "pool",
    "priority_class",
    "node_type",
    "gpu_ms",
    "borrowed_gpu_ms",
)
CAPACITY_COLUMNS = ("hour", "pool", "gpu_type", "node_type", "gpu_ms")
Key = tuple[int, str, str, str, str, str, str]


@dataclass
class Ledger:
    """Times in ms from the month's start; turned into timestamps when written."""

    usage: list[tuple[Any, ...]] = field(default_factory=list)
    hours: dict[Key, list[int]] = field(default_factory=lambda: defaultdict(lambda: [0, 0]))


def generate(attempts: int, teams: int, running: int, seed: int) -> Ledger:
    """The month's attempts and their hourly rollups. Durations are log-normal (median 30
    minutes, mean about 1.5 hours, at most a day); a team's attempts mostly run in its default
    priority class."""
    rng = random.Random(seed)
    month_ms = DAYS * 24 * MS_PER_HOUR
    now_ms = int((NOW - MONTH_START) / timedelta(milliseconds=1))
    median = math.log(30 * 60_000)
    ledger = Ledger()
    for attempt_id in range(1, attempts + 1):
        t = rng.randrange(teams)
        team, user = f"team-{t}", f"user-{t}-{rng.randrange(4)}"
        pool, gpu_type, node_type, _ = POOLS[(t + rng.randrange(2)) % len(POOLS)]
        priority_class = CLASSES[t % 3] if rng.random() < 0.8 else rng.choice(CLASSES)
        gpus = (1, 1, 2, 4, 8)[rng.randrange(5)]
        borrowed = rng.randint(1, gpus) if rng.random() < 0.1 else 0
        length = min(24 * MS_PER_HOUR, max(60_000, int(rng.lognormvariate(median, 1.5))))
        is_running = attempt_id > attempts - running
        if is_running:
            start = now_ms - min(length, now_ms)
            until = max(start, now_ms - rng.randrange(0, 5 * 60_000))  # accrued minutes ago
        else:
            start = rng.randrange(0, month_ms - 60_000)
            until = min(month_ms, start + length)
        ms = until - start
        ledger.usage.append(
            (
                attempt_id,
                f"job-{attempt_id}",
                "bench",
                team,
                user,
                gpu_type,
                pool,
                "local",
                priority_class,
                node_type,
                gpus,
                borrowed,
                start,
                None if is_running else until,
                until,
                ms * gpus,
                ms * borrowed,
                None if is_running else "succeeded",
            )
        )
        at = start
        while at < until:  # cut at UTC hours, as the ledger does
            hour = at // MS_PER_HOUR
            upto = min((hour + 1) * MS_PER_HOUR, until)
            cell = ledger.hours[hour, team, user, gpu_type, pool, priority_class, node_type]
            cell[0] += (upto - at) * gpus
            cell[1] += (upto - at) * borrowed
            at = upto
    return ledger


def _rows(
    ledger: Ledger, stamp: Callable[[int], Any]
) -> Iterator[tuple[str, tuple[str, ...], Iterator[tuple[Any, ...]]]]:
    """(table, columns, rows) with times made by ``stamp`` from ms since the month's start."""
    yield (
        "usage",
        USAGE_COLUMNS,
        (
            (*u[:12], stamp(u[12]), None if u[13] is None else stamp(u[13]), stamp(u[14]), *u[15:])
            for u in ledger.usage
        ),
    )
    hour_stamps = [stamp(h * MS_PER_HOUR) for h in range(DAYS * 24 + 1)]
    yield (
        "usage_hours",
        HOUR_COLUMNS,
        # In primary-key order: each insert appends to the key's B-tree.
        ((hour_stamps[k[0]], *k[1:], v[0], v[1]) for k, v in sorted(ledger.hours.items())),
    )
    days: dict[tuple[Any, ...], list[int]] = defaultdict(lambda: [0, 0])
    for (hour, *key), (ms, borrowed) in ledger.hours.items():
        cell = days[(hour // 24, *key)]
        cell[0] += ms
        cell[1] += borrowed
    yield (
        "usage_days",
        ("day", *HOUR_COLUMNS[1:]),
        ((hour_stamps[k[0] * 24], *k[1:], v[0], v[1]) for k, v in sorted(days.items())),
    )
    yield (
        "capacity_hours",
        CAPACITY_COLUMNS,
        (
            (hour_stamps[h], name, gpu_type, node_type, gpus * MS_PER_HOUR)
            for h in range(DAYS * 24)
            for name, gpu_type, node_type, gpus in POOLS
        ),
    )


def fill(engine: Engine, ledger: Ledger) -> None:
    """Bulk: COPY on PostgreSQL; on SQLite one prepared INSERT run over all rows, with times
    in the text form SQLAlchemy stores there (``YYYY-MM-DD HH:MM:SS.ffffff``, UTC)."""
    raw = engine.raw_connection()
    try:
        cursor = raw.cursor()
        if engine.dialect.name == "postgresql":
            # The secondary indexes are built once after the rows, not row by row.
            cursor.execute(
                "SELECT indexdef, indexname FROM pg_indexes WHERE tablename IN "
                "('usage', 'usage_hours', 'usage_days', 'capacity_hours') "
                "AND indexname NOT LIKE '%pkey'"
            )
            indexes = cursor.fetchall()
            for _, name in indexes:
                cursor.execute(f'DROP INDEX "{name}"')
            for table, columns, rows in _rows(ledger, _at):
                quoted = ", ".join(f'"{c}"' for c in columns)
                with cursor.copy(f"COPY {table} ({quoted}) FROM STDIN") as copy:  # type: ignore[attr-defined]
                    for row in rows:
                        copy.write_row(row)
            for sql, _ in indexes:
                cursor.execute(sql)
            raw.commit()
            cursor.execute("ANALYZE")
        else:

            def text_of(ms: int) -> str:
                return _at(ms).strftime("%Y-%m-%d %H:%M:%S.%f")

            # The secondary indexes are built once after the rows, not row by row.
            cursor.execute(
                "SELECT sql, name FROM sqlite_master WHERE type = 'index' AND sql IS NOT NULL "
                "AND tbl_name IN ('usage', 'usage_hours', 'usage_days', 'capacity_hours')"
            )
            indexes = cursor.fetchall()
            for _, name in indexes:
                cursor.execute(f'DROP INDEX "{name}"')
            for table, columns, rows in _rows(ledger, text_of):
                marks = ", ".join("?" for _ in columns)
                quoted = ", ".join(f'"{c}"' for c in columns)
                cursor.executemany(f"INSERT INTO {table} ({quoted}) VALUES ({marks})", rows)
            for sql, _ in indexes:
                cursor.execute(sql)
            raw.commit()
            cursor.execute("ANALYZE")
        raw.commit()
    finally:
        raw.close()


def _at(ms: int) -> datetime:
    return MONTH_START + timedelta(milliseconds=ms)


@dataclass
class FixedClock:
    at: datetime

    def now(self) -> datetime:
        return self.at

    def monotonic(self) -> float:
        return time.monotonic()


def measure(url: str, ledger: Ledger, teams: int, repeat: int) -> dict[str, Any]:
    engine = make_engine(url)
    try:
        upgrade(engine)
        started = time.perf_counter()
        fill(engine, ledger)
        fill_s = time.perf_counter() - started
        cluster = config(teams)
        service = UsageService(session_factory(engine), lambda: cluster, FixedClock(NOW))
        admin = Principal(user="admin", token_id="bench", platform_admin=True)
        query = ReportQuery(period="month", at="2026-11-15")
        report = service.costs(admin, query)  # warm-up, and the shape checked below
        times = []
        for _ in range(repeat):
            started = time.perf_counter()
            service.costs(admin, query)
            times.append((time.perf_counter() - started) * 1000)
    finally:
        engine.dispose()
    out: dict[str, Any] = {
        "fill_s": round(fill_s, 1),
        "summary_ms": round(statistics.median(times), 1),
        "rows": len(report.rows),
        "gpu_hours": round(sum(r.allocated_gpu_hours + r.borrowed_gpu_hours for r in report.rows)),
    }
    out["met"] = all(out[key] <= bound for key, bound in TARGETS.items())
    return out


def summary_section(args: argparse.Namespace) -> dict[str, Any]:
    started = time.perf_counter()
    attempts, teams, repeat = args.summary_attempts, args.summary_teams, args.summary_repeat
    ledger = generate(attempts, teams, args.summary_running, args.summary_seed)
    section: dict[str, Any] = {
        "attempts": attempts,
        "teams": teams,
        "running": args.summary_running,
        "rollup_rows": len(ledger.hours),
        "generate_s": round(time.perf_counter() - started, 1),
        "targets": TARGETS,
        "stores": {},
    }
    for store in args.stores.split(","):
        if store == "sqlite":
            with tempfile.TemporaryDirectory() as tmp:
                url = f"sqlite:///{Path(tmp) / 'bench.db'}"
                section["stores"][store] = measure(url, ledger, teams, repeat)
        elif store == "postgresql":
            with postgres_database() as pg_url:
                if pg_url is None:
                    section["stores"][store] = {"skipped": "PostgreSQL cannot be reached"}
                else:
                    section["stores"][store] = measure(pg_url, ledger, teams, repeat)
        else:
            raise SystemExit(f"unknown store {store!r}; use sqlite and/or postgresql")
        if not args.json:
            print(store, section["stores"][store], flush=True)
    return section


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--summary-attempts", type=int, default=1_000_000)
    parser.add_argument("--summary-teams", type=int, default=200)
    parser.add_argument("--summary-running", type=int, default=1000)
    parser.add_argument("--summary-repeat", type=int, default=3)
    parser.add_argument("--summary-seed", type=int, default=1)
