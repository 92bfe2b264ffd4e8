"""The real controller over a SQLite store and the ``fake`` backend, on a virtual clock.

Every pool of the configuration is served by the fake backend (one :class:`FakeCluster`); the
clock moves only when a test says so, and each step ticks the controller until nothing moves.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

from sqlalchemy import select

from gpupool.backends.base import AdapterContext
from gpupool.backends.fake import DURATION_ENV, FakeCluster
from gpupool.backends.registry import PoolBackend, Registry
from gpupool.config import sqlite_url
from gpupool.controller.execution import ExecutionService
from gpupool.controller.loop import Controller
from gpupool.spec.models import ClusterConfig
from gpupool.state import jobs
from gpupool.state.db import SessionFactory, make_engine, session_factory, upgrade
from gpupool.state.models import AttemptRow, JobRow, UsageRow
from support.rows import queued_job

EPOCH = datetime(2026, 1, 1, tzinfo=UTC)


class VirtualClock:
    def __init__(self) -> None:
        self.t = 0.0

    def now(self) -> datetime:
        return EPOCH + timedelta(seconds=self.t)

    def monotonic(self) -> float:
        return self.t


@dataclass
class Counting:
    """An observer that counts evictions per pool (and ignores the rest)."""

    evictions: dict[str, int] = field(default_factory=dict)

    def step(self, seconds: float) -> None:
        pass

    def cycle(self, seen: Any) -> None:
        pass

    def backend_error(self, pool: str, operation: str, error: BaseException) -> None:
        pass

    def evicted(self, pool: str) -> None:
        self.evictions[pool] = self.evictions.get(pool, 0) + 1


@dataclass
class Rig:
    sessions: SessionFactory
    clock: VirtualClock
    cluster: FakeCluster
    controller: Controller
    observer: Counting

    def submit(self, name: str, gpus: int, seconds: float, **fields: Any) -> str:
        with self.sessions.begin() as session:
            jobs.add(
                session,
                queued_job(
                    name,
                    name=name,
                    gpus=gpus,
                    env={DURATION_ENV: repr(seconds)},
                    submitted_at=self.clock.now(),
                    **fields,
                ),
            )
        self.controller.wake()
        return name

    def settle(self, ticks: int = 4) -> None:
        """Tick until the backend calls each tick started are done, ``ticks`` times."""
        for _ in range(ticks):
            self.controller.tick()
            self.controller.wait_backend_calls()
            deadline = time.monotonic() + 10
            while self.controller._inflight and time.monotonic() < deadline:
                time.sleep(0.002)

    def run_until(self, t: float, step: float = 5.0) -> None:
        while self.clock.t < t:
            self.settle()
            self.clock.t = min(t, self.clock.t + step)
        self.settle()

    def wait_for(self, check: Callable[[], bool], until: float, step: float = 5.0) -> float:
        """Advance the clock until ``check()``; the virtual time it held at."""
        while not check():
            assert self.clock.t < until, f"not by t={until}"
            self.clock.t += step
            self.settle()
        return self.clock.t

    def job(self, name: str) -> JobRow:
        with self.sessions() as session:
            row = session.scalar(select(JobRow).where(JobRow.name == name))
            assert row is not None
            return row

    def attempts(self, name: str) -> list[AttemptRow]:
        with self.sessions() as session:
            job = session.scalar(select(JobRow).where(JobRow.name == name))
            assert job is not None
            return list(
                session.scalars(
                    select(AttemptRow)
                    .where(AttemptRow.job_id == job.id)
                    .order_by(AttemptRow.number)
                )
            )

    def ledger(self) -> list[UsageRow]:
        with self.sessions() as session:
            return list(session.scalars(select(UsageRow)))


@contextmanager
def fake_rig(config: ClusterConfig, home: Path) -> Iterator[Rig]:
    clock = VirtualClock()
    cluster = FakeCluster(clock.monotonic)
    pools = {p.name: p for p in config.pools}

    def lookup(name: str) -> PoolBackend | None:
        pool = pools.get(name)
        if pool is None:
            return None
        context = AdapterContext(
            pool=name,
            gpu_type=pool.gpu_type,
            options={"cluster": cluster},
            state_dir=home,
            nodes=pool.nodes,
            gpus_per_node=pool.node.gpus,
        )
        return PoolBackend("fake", context)

    engine = make_engine(sqlite_url(home))
    upgrade(engine)
    sessions = session_factory(engine)
    execution = ExecutionService(Registry(lookup))
    controller = Controller(sessions, lambda: config, execution, clock)
    observer = Counting()
    controller.observe(observer)
    try:
        yield Rig(sessions, clock, cluster, controller, observer)
    finally:
        controller.stop()
        execution.close()
        engine.dispose()
