"""An admitted job whose pool's backend stays unreachable goes back to the queue after
``scheduler.requeue_unreachable_after_s`` and frees its quota; what may have started under the
abandoned attempt is looked up by its key and stopped once the backend answers again."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from concurrent.futures import Future
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest

from gpupool.backends.base import JobHandle, JobSpec
from gpupool.backends.errors import BackendUnavailable
from gpupool.config import sqlite_url
from gpupool.controller.loop import Controller
from gpupool.spec.models import (
    ClusterConfig,
    GpuType,
    NodeShape,
    Pool,
    Quota,
    SchedulerSettings,
    Team,
)
from gpupool.state.db import SessionFactory, make_engine, session_factory, upgrade
from gpupool.state.models import AttemptRow, EventRow, JobRow
from support.rows import queued_job

T0 = datetime(2026, 1, 1, tzinfo=UTC)


def config(after: float | None) -> ClusterConfig:
    return ClusterConfig(
        gpu_types={"gpu": GpuType()},
        pools=[
            Pool(name="p", backend="local", gpu_type="gpu", nodes=1, node=NodeShape(gpus=4)),
            Pool(name="q", backend="local", gpu_type="gpu", nodes=1, node=NodeShape(gpus=4)),
        ],
        teams={"a": Team(quota={"gpu": Quota(nominal=4)})},
        scheduler=SchedulerSettings(requeue_unreachable_after_s=after),
    )


class Clock:
    def __init__(self) -> None:
        self.elapsed = 0.0

    def now(self) -> datetime:
        return T0 + timedelta(seconds=self.elapsed)

    def monotonic(self) -> float:
        return self.elapsed


class Execution:
    """The pool of the first submission never answers; the other accepts. Stops by key are
    recorded."""

    def __init__(self) -> None:
        self.submitted: list[str] = []
        self.stopped: list[tuple[str, str]] = []
        self.down: str | None = None

    def submit(self, spec: JobSpec, done: Callable[[JobSpec, Any], None]) -> None:
        self.submitted.append(spec.key)
        self.down = self.down or spec.pool
        if spec.pool == self.down:
            done(spec, BackendUnavailable("connection refused"))
        else:
            done(spec, JobHandle("local", spec.pool, spec.key, spec.key, {}))

    def probe_async(self, pool: str, backend: str) -> Future[None]:
        future: Future[None] = Future()
        if pool == self.down:
            future.set_exception(BackendUnavailable("connection refused"))
        else:
            future.set_result(None)
        return future

    def stop_key_async(self, pool: str, key: str) -> Future[bool]:
        self.stopped.append((pool, key))
        future: Future[bool] = Future()
        future.set_result(True)
        return future


@pytest.fixture
def sessions(tmp_path: Path) -> Iterator[SessionFactory]:
    engine = make_engine(sqlite_url(tmp_path))
    upgrade(engine)
    factory = session_factory(engine)
    with factory.begin() as session:
        session.add(queued_job("j-1", team="a", user="u", submitted_at=T0))
    yield factory
    engine.dispose()


def controller(
    sessions: SessionFactory, after: float | None
) -> tuple[Controller, Clock, Execution]:
    clock, execution = Clock(), Execution()
    cfg = config(after)
    return Controller(sessions, lambda: cfg, execution, clock), clock, execution  # type: ignore[arg-type]


def attempts(sessions: SessionFactory) -> list[tuple[int, str, str, bool]]:
    with sessions() as session:
        rows = session.query(AttemptRow).order_by(AttemptRow.number).all()
        return [(a.number, a.pool, a.status, a.cancel_sent) for a in rows]


def job(sessions: SessionFactory) -> tuple[str, str | None]:
    with sessions() as session:
        row = session.get(JobRow, "j-1")
        assert row is not None
        return row.status, row.pool


def retry(ctl: Controller, clock: Clock, until: float) -> None:
    """Dispatch again whenever the pool's backoff ends, up to ``until`` seconds."""
    while clock.elapsed < until:
        clock.elapsed = min(until, clock.elapsed + 30)
        ctl.dispatch()


def test_an_admitted_job_goes_back_to_the_queue_when_its_backend_stays_away(
    sessions: SessionFactory,
) -> None:
    ctl, clock, execution = controller(sessions, after=300)
    ctl.schedule()
    ctl.dispatch()
    down = execution.down
    up = ({"p", "q"} - {down}).pop()
    assert attempts(sessions) == [(1, down, "admitted", False)]
    retry(ctl, clock, 290)  # still within the limit: it keeps its place and its GPUs
    assert job(sessions) == ("admitted", down)
    assert len(execution.submitted) > 1 and set(execution.submitted) == {"j-1.1"}

    retry(ctl, clock, 330)
    assert job(sessions) == ("queued", None)
    assert attempts(sessions) == [(1, down, "lost", False)]
    with sessions() as session:
        attempt = session.query(AttemptRow).one()
        assert attempt.message.startswith(f"abandoned: the backend of pool {down} has not")
        assert "connection refused" in attempt.message
        assert [e.kind for e in session.query(EventRow).order_by(EventRow.id)][-1] == "requeued"

    # Its quota is free again: the next cycle admits a new attempt, and the pool whose probes
    # fail is not where it goes.
    for _ in range(3):
        clock.elapsed += 61
        ctl.refresh_capacity()
    ctl.schedule()
    ctl.dispatch()
    assert attempts(sessions)[1][:3] == (2, up, "admitted")
    assert execution.submitted[-1] == "j-1.2"


def test_the_abandoned_key_is_looked_for_once_the_backend_answers_again(
    sessions: SessionFactory,
) -> None:
    ctl, clock, execution = controller(sessions, after=60)
    ctl.schedule()
    ctl.dispatch()
    retry(ctl, clock, 200)
    down = execution.down
    assert down is not None and attempts(sessions)[0] == (1, down, "lost", False)
    ctl.send_cancels()
    assert execution.stopped == []  # the pool is still down: nothing to ask it yet
    ctl.backoff.succeeded(down)  # a probe answered
    ctl.send_cancels()
    assert execution.stopped == [(down, "j-1.1")]
    ctl.send_cancels()  # the stop is collected and remembered: asked once only
    assert execution.stopped == [(down, "j-1.1")]
    assert attempts(sessions)[0] == (1, down, "lost", True)


def test_without_a_limit_the_job_waits_for_its_backend(sessions: SessionFactory) -> None:
    ctl, clock, execution = controller(sessions, after=None)
    ctl.schedule()
    ctl.dispatch()
    retry(ctl, clock, 5000)
    assert job(sessions) == ("admitted", execution.down)
    assert attempts(sessions) == [(1, execution.down, "admitted", False)]
