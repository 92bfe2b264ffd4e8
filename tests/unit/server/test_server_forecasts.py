"""The server's forecasts: made from the controller's last cycle, at most once per cycle and
job, with past runtimes from the store; without a cycle, no estimate and a reason."""

from __future__ import annotations

from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest

from gpupool.config import sqlite_url
from gpupool.controller.observer import CycleSeen
from gpupool.core.jobs import JobStatus
from gpupool.scheduler import (
    CycleResult,
    NodeView,
    PendingJob,
    Placement,
    PoolView,
    QuotaView,
    RunningJob,
    Snapshot,
    TeamView,
)
from gpupool.server.services import forecasts as module
from gpupool.server.services.forecasts import ForecastService
from gpupool.spec.models import ClusterConfig
from gpupool.state.db import SessionFactory, make_engine, session_factory
from gpupool.state.models import AttemptRow
from gpupool.state.schema import ensure_schema
from support.rows import queued_job

NOW = datetime(2026, 3, 1, tzinfo=UTC)
CONFIG = ClusterConfig.model_validate(
    {
        "gpu_types": {"h100": {}},
        "pools": [{"name": "p", "backend": "local", "gpu_type": "h100", "nodes": 1,
                   "node": {"gpus": 8}}],
        "teams": {"a": {"quota": {"h100": {"nominal": 8}}}},
    }
)  # fmt: skip


@pytest.fixture
def sessions(tmp_path: Path) -> Iterator[SessionFactory]:
    engine = make_engine(sqlite_url(tmp_path))
    ensure_schema(engine)
    factory = session_factory(engine)
    with factory.begin() as session:  # three finished 8-GPU jobs of team a: 1,000 s each
        for n in range(3):
            started = NOW - timedelta(hours=n + 2)
            session.add(queued_job(f"j-{n}", team="a", gpus=8, status="succeeded", attempt=1))
            session.flush()
            session.add(
                AttemptRow(
                    job_id=f"j-{n}",
                    number=1,
                    status=JobStatus.SUCCEEDED.value,
                    pool="p",
                    gpu_type="h100",
                    placements=[],
                    admitted_at=started,
                    started_at=started,
                    finished_at=started + timedelta(seconds=1_000),
                )
            )
    yield factory
    engine.dispose()


def seen(at: float) -> CycleSeen:
    """One job running on every GPU for 400 s (no limit), one queued behind it."""
    running = RunningJob(
        "r", "a", 0, "h100", "p", (Placement("p-0", tuple(range(8))),), started_at=at - 400
    )
    pool = PoolView("p", "h100", "local", (NodeView("p-0", 8, 64, 512, frozenset(range(8))),))
    teams = {"a": TeamView("a", quota={"h100": QuotaView(8)})}
    snapshot = Snapshot(at, (pool,), teams, running=(running,))
    queued = {"a": (PendingJob("q", "a", 0, at - 10, 8),)}
    return CycleSeen(at, 0.0, snapshot, queued, CycleResult(), lambda _: None, bool, lambda _: None)


def test_made_once_per_cycle_from_past_runtimes(
    sessions: SessionFactory, monkeypatch: pytest.MonkeyPatch
) -> None:
    cycles = [seen(NOW.timestamp())]
    service = ForecastService(sessions, lambda: CONFIG, lambda: cycles[-1])
    made: list[str] = []
    real = module.forecast

    def counting(*args: object, **kwargs: object) -> object:
        made.append("x")
        return real(*args, **kwargs)  # type: ignore[arg-type]

    monkeypatch.setattr(module, "forecast", counting)
    found, cycle = service.forecast("q")
    assert found is not None and cycle is cycles[-1]
    # the running job has run 400 s of the 1,000 its similar past jobs ran
    assert found.start == pytest.approx(NOW.timestamp() + 600)
    assert found.method == "past jobs" and "3 similar past jobs" in found.basis
    assert service.forecast("q")[0] is found and made == ["x"]  # the same cycle: a lookup
    cycles.append(seen(NOW.timestamp() + 5))
    assert service.forecast("q")[0] is not found and made == ["x", "x"]  # a new cycle
    assert service.forecast("unknown")[0] is None


def test_without_a_cycle_there_is_no_estimate(sessions: SessionFactory) -> None:
    service = ForecastService(sessions, lambda: CONFIG, lambda: None)
    found, cycle = service.forecast("q")
    assert (found, cycle) == (None, None)
    estimate = service.estimate(found, cycle)
    assert estimate.start_at is None and "does not lead" in estimate.basis
