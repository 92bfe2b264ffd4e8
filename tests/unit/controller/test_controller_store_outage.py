"""A store that goes away pauses the controller (one warning, backoff) and it resumes when
the store answers again: the thread never dies, and a job queued during the outage is
admitted and dispatched afterwards (with a real, fast test-sized backoff)."""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Iterator
from concurrent.futures import Future
from contextlib import contextmanager
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest
from sqlalchemy.exc import OperationalError
from sqlalchemy.orm import Session

from gpupool.backends.base import JobHandle, JobSpec
from gpupool.config import sqlite_url
from gpupool.controller import loop
from gpupool.controller.clock import SystemClock
from gpupool.controller.loop import Controller
from gpupool.core.jobs import JobStatus
from gpupool.spec.models import (
    ClusterConfig,
    GpuType,
    NodeShape,
    Pool,
    Quota,
    SchedulerSettings,
    Team,
)
from gpupool.state.db import make_engine, session_factory, upgrade
from gpupool.state.models import AttemptRow, JobRow
from support.rows import queued_job

NOW = datetime(2026, 1, 1, tzinfo=UTC)
CONFIG = ClusterConfig(
    gpu_types={"gpu": GpuType()},
    pools=[Pool(name="p", backend="local", gpu_type="gpu", nodes=1, node=NodeShape(gpus=4))],
    teams={"a": Team(quota={"gpu": Quota(nominal=4)})},
    scheduler=SchedulerSettings(cycle_interval_s=0.05),
)


class Flaky:
    """The store, except that while ``down`` is set every session fails as a lost
    PostgreSQL connection does."""

    def __init__(self, real: Any) -> None:
        self._real = real
        self.down = threading.Event()
        self.refused = 0

    def _check(self) -> None:
        if self.down.is_set():
            self.refused += 1
            raise OperationalError(
                "SELECT secret_column", {"env": "s3cret"}, ConnectionError("server closed")
            )

    @contextmanager
    def __call__(self) -> Iterator[Session]:
        self._check()
        with self._real() as session:
            yield session

    @contextmanager
    def begin(self) -> Iterator[Session]:
        self._check()
        with self._real.begin() as session:
            yield session


class Instant:
    """An execution service whose submits start at once; polls never finish."""

    def __init__(self) -> None:
        self.submitted: list[str] = []

    def submit(self, spec: JobSpec, done: Any) -> None:
        self.submitted.append(spec.job_id)
        done(spec, JobHandle("fake", spec.pool, spec.key, spec.key, {}))

    def probe_async(self, pool: str, backend: str) -> Future[None]:
        future: Future[None] = Future()
        future.set_result(None)
        return future

    def poll_async(self, pool: str, handles: Any) -> Future[Any]:
        return Future()


def test_backoff_doubles_to_its_ceiling_and_restarts_after_a_recovery() -> None:
    controller = Controller(Flaky(None), lambda: CONFIG, Instant(), SystemClock())  # type: ignore[arg-type]
    waits = [controller._store_lost("gone") for _ in range(6)]
    assert waits == [0.5, 1.0, 2.0, 4.0, 5.0, 5.0]
    controller._epoch = 0  # leading: a tick that went through reached the store
    controller._store_back()
    assert controller.store_lost_at is None
    assert controller._store_lost("gone again") == loop.STORE_RETRY_FIRST_S


def test_controller_pauses_while_the_store_is_away_and_resumes(
    tmp_path: Path, caplog: pytest.LogCaptureFixture, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(loop, "STORE_RETRY_FIRST_S", 0.1)
    monkeypatch.setattr(loop, "STORE_RETRY_MAX_S", 0.2)
    engine = make_engine(sqlite_url(tmp_path))
    upgrade(engine)
    store = Flaky(session_factory(engine))
    execution = Instant()
    controller = Controller(store, lambda: CONFIG, execution, SystemClock())  # type: ignore[arg-type]
    caplog.set_level(logging.INFO, logger="gpupool.controller.loop")
    store.down.set()
    controller.start()
    try:
        deadline = time.monotonic() + 5
        while store.refused < 5 and time.monotonic() < deadline:
            time.sleep(0.02)
        assert store.refused >= 5, "the controller stopped trying"
        assert controller.store_lost_at is not None
        with store._real.begin() as session:  # a submit that got in before the outage
            session.add(queued_job("j-1", team="a", user="u", submitted_at=NOW))
        store.down.clear()
        deadline = time.monotonic() + 5
        while "j-1" not in execution.submitted and time.monotonic() < deadline:
            time.sleep(0.02)
        assert execution.submitted == ["j-1"]
        assert controller._thread is not None and controller._thread.is_alive()
    finally:
        controller.stop()
    with store._real() as session:
        job = session.get(JobRow, "j-1")
        attempt = session.query(AttemptRow).filter_by(job_id="j-1").one()
        assert job is not None and job.status == JobStatus.ADMITTED.value
        assert attempt.handle is not None, "the dispatch was recorded after the outage"

    records = [r for r in caplog.records if r.name == "gpupool.controller.loop"]
    paused = [r for r in records if "controller paused" in r.getMessage()]
    resumed = [r for r in records if "controller resumed" in r.getMessage()]
    assert len(paused) == 1, "the outage is reported once, not once per try"
    assert len(resumed) == 1
    assert all(r.exc_info is None for r in records), "an outage is not a bug: no traceback"
    text = " ".join(r.getMessage() for r in records)
    assert "s3cret" not in text and "secret_column" not in text
    assert "server closed" in paused[0].getMessage()


class Deadlock(Exception):
    """What psycopg raises when PostgreSQL undoes one transaction of a deadlock."""

    sqlstate = "40P01"


class Conflicting(Flaky):
    """The store, except that its next ``conflicts`` write transactions are undone as the
    victim of a deadlock with a concurrent one."""

    def __init__(self, real: Any, conflicts: int) -> None:
        super().__init__(real)
        self.conflicts = conflicts

    @contextmanager
    def begin(self) -> Iterator[Session]:
        with self._real.begin() as session:
            yield session
            if self.conflicts > 0:
                self.conflicts -= 1
                raise OperationalError("UPDATE jobs", {}, Deadlock("deadlock detected"))


def test_a_tick_undone_by_a_deadlock_runs_again_without_a_pause(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    engine = make_engine(sqlite_url(tmp_path))
    upgrade(engine)
    store = Conflicting(session_factory(engine), conflicts=3)
    with store._real.begin() as session:
        session.add(queued_job("j-1", team="a", user="u", submitted_at=NOW))
    execution = Instant()
    controller = Controller(store, lambda: CONFIG, execution, SystemClock())  # type: ignore[arg-type]
    caplog.set_level(logging.INFO, logger="gpupool.controller.loop")
    controller.start()
    try:
        deadline = time.monotonic() + 5
        while "j-1" not in execution.submitted and time.monotonic() < deadline:
            time.sleep(0.02)
    finally:
        controller.stop()
    assert execution.submitted == ["j-1"], "the job was not admitted once the conflicts ended"
    assert store.conflicts == 0
    assert "runs again" in caplog.text
    assert "paused" not in caplog.text and controller.store_lost_at is None
    with store._real() as session:
        job = session.get(JobRow, "j-1")
        assert job is not None and job.status == JobStatus.ADMITTED.value
