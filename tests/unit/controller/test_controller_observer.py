"""What the controller tells its observer: each cycle with what it read and decided, and each
failed backend call with its pool and operation."""

from __future__ import annotations

from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

from gpupool.backends.base import JobSpec
from gpupool.backends.errors import BackendUnavailable
from gpupool.config import sqlite_url
from gpupool.controller.loop import Controller
from gpupool.controller.observer import CycleSeen
from gpupool.spec.models import ClusterConfig, GpuType, NodeShape, Pool, Quota, Team
from gpupool.state.db import make_engine, session_factory, upgrade
from support.rows import queued_job

NOW = datetime(2026, 1, 1, tzinfo=UTC)
CONFIG = ClusterConfig(
    gpu_types={"gpu": GpuType()},
    pools=[Pool(name="p", backend="local", gpu_type="gpu", nodes=1, node=NodeShape(gpus=4))],
    teams={"a": Team(quota={"gpu": Quota(nominal=2, borrowing_limit=0)})},
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


class Recording:
    def __init__(self) -> None:
        self.cycles: list[CycleSeen] = []
        self.errors: list[tuple[str, str, BaseException]] = []

    def step(self, seconds: float) -> None:
        raise AssertionError("not a whole tick in this test")

    def cycle(self, seen: CycleSeen) -> None:
        self.cycles.append(seen)

    def backend_error(self, pool: str, operation: str, error: BaseException) -> None:
        self.errors.append((pool, operation, error))

    def evicted(self, pool: str) -> None:
        raise AssertionError("no eviction in this test")


def test_the_observer_sees_each_cycle_and_each_failed_dispatch(tmp_path: Path) -> None:
    engine = make_engine(sqlite_url(tmp_path))
    upgrade(engine)
    sessions = session_factory(engine)
    with sessions.begin() as session:
        for n in range(3):  # 2 GPUs of quota: the third waits
            submitted = NOW - timedelta(seconds=30 - n)
            session.add(queued_job(f"j-{n}", team="a", user="u", submitted_at=submitted))
    execution = Deferred()
    observer = Recording()
    controller = Controller(sessions, lambda: CONFIG, execution, FixedClock())  # type: ignore[arg-type]
    controller.observe(observer)
    controller.schedule()
    (seen,) = observer.cycles
    assert sorted(a.job_id for a in seen.result.admissions) == ["j-0", "j-1"]
    assert [job.id for job in seen.queued["a"]] == ["j-0", "j-1", "j-2"]
    admitted = seen.job("j-0")
    assert admitted is not None and seen.at - admitted.waiting_since == 30
    reasons = seen.reasons("j-2")
    assert reasons is not None and reasons[0].code.value == "quota"
    controller.dispatch()
    assert len(execution.calls) == 2
    spec, done = execution.calls[0]
    done(spec, BackendUnavailable("connection refused"))
    ((pool, operation, error),) = observer.errors
    assert (pool, operation) == ("p", "dispatch")
    assert isinstance(error, BackendUnavailable)
    controller.schedule()  # the store now lists both admitted; neither has started
    latest = observer.cycles[-1]
    assert {job.id for job in latest.snapshot.running} == {"j-0", "j-1"}
    assert not latest.started("j-0")
    engine.dispose()
