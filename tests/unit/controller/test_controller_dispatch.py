"""Dispatch submits each admitted attempt once, even when its submission is recorded between
dispatch reading the store and deciding what to submit (the execution threads race the loop)."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import contextmanager
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from sqlalchemy.orm import Session

from gpupool.backends.base import JobHandle, JobSpec
from gpupool.config import sqlite_url
from gpupool.controller.loop import Controller
from gpupool.core.jobs import JobStatus
from gpupool.spec.models import ClusterConfig, GpuType, NodeShape, Pool, Quota, Team
from gpupool.state.db import make_engine, session_factory, upgrade
from gpupool.state.models import AttemptRow
from support.rows import queued_job

NOW = datetime(2026, 1, 1, tzinfo=UTC)
CONFIG = ClusterConfig(
    gpu_types={"gpu": GpuType()},
    pools=[Pool(name="p", backend="local", gpu_type="gpu", nodes=1, node=NodeShape(gpus=4))],
    teams={"a": Team(quota={"gpu": Quota(nominal=4)})},
)


class FixedClock:
    def now(self) -> datetime:
        return NOW

    def monotonic(self) -> float:
        return 0.0


class Deferred:
    """An execution service whose submits finish only when the test says so."""

    def __init__(self) -> None:
        self.calls: list[tuple[JobSpec, Callable[[JobSpec, Any], None]]] = []

    def submit(self, spec: JobSpec, done: Callable[[JobSpec, Any], None]) -> None:
        self.calls.append((spec, done))

    def finish(self, index: int) -> None:
        spec, done = self.calls[index]
        done(spec, JobHandle("fake", spec.pool, spec.key, spec.key, {}))


class ReadThenRecord:
    """The store, except that right after its next read the deferred submit finishes: the
    read dispatch made is then stale, as when an execution thread wins the race."""

    def __init__(self, real: Any, then: Callable[[], None]) -> None:
        self._real, self._then = real, then
        self.armed = False

    @contextmanager
    def __call__(self) -> Iterator[Session]:
        with self._real() as session:
            yield session
        if self.armed:
            self.armed = False
            self._then()

    def begin(self) -> Any:
        return self._real.begin()


def test_a_submission_recorded_after_the_read_is_not_submitted_again(tmp_path: Path) -> None:
    engine = make_engine(sqlite_url(tmp_path))
    upgrade(engine)
    sessions = session_factory(engine)
    with sessions.begin() as session:
        session.add(queued_job("j-1", team="a", user="u", submitted_at=NOW))
    execution = Deferred()
    hooked = ReadThenRecord(sessions, lambda: execution.finish(0))
    controller = Controller(hooked, lambda: CONFIG, execution, FixedClock())  # type: ignore[arg-type]
    controller.schedule()
    controller.dispatch()  # submits attempt 1; the submit has not finished yet
    assert len(execution.calls) == 1
    hooked.armed = True  # the next read sees no handle, then the submit is recorded
    controller.dispatch()
    assert len(execution.calls) == 1
    with sessions() as session:
        attempt = session.query(AttemptRow).one()
        assert attempt.handle is not None and attempt.status == JobStatus.ADMITTED.value
    controller.dispatch()  # the store no longer lists it: nothing to submit, nothing kept
    assert len(execution.calls) == 1
    assert not controller._recorded
    engine.dispose()
