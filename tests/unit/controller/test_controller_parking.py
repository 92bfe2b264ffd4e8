"""The controller hands each cycle the last one's parking: a queue that cannot change is not
decided again, and its jobs keep their stored reasons."""

from __future__ import annotations

from datetime import UTC, datetime
from pathlib import Path
from unittest import mock

from gpupool.config import sqlite_url
from gpupool.controller.loop import Controller
from gpupool.scheduler import cycle as cycle_module
from gpupool.spec.models import ClusterConfig, GpuType, NodeShape, Pool, Quota, Team
from gpupool.state.db import make_engine, session_factory, upgrade
from gpupool.state.models import JobRow
from support.rows import queued_job

NOW = datetime(2026, 1, 1, tzinfo=UTC)
CONFIG = ClusterConfig(
    gpu_types={"gpu": GpuType()},
    pools=[Pool(name="p", backend="local", gpu_type="gpu", nodes=1, node=NodeShape(gpus=4))],
    teams={
        "a": Team(quota={"gpu": Quota(nominal=0, borrowing_limit=0)}),  # may never run
        "b": Team(quota={"gpu": Quota(nominal=4)}),
    },
)


class FixedClock:
    def now(self) -> datetime:
        return NOW

    def monotonic(self) -> float:
        return 0.0


def test_a_queue_that_cannot_change_is_parked_across_cycles(tmp_path: Path) -> None:
    engine = make_engine(sqlite_url(tmp_path))
    upgrade(engine)
    sessions = session_factory(engine)
    with sessions.begin() as session:
        session.add_all(
            queued_job(f"a-{i}", team="a", user="u", submitted_at=NOW) for i in range(3)
        )
    controller = Controller(sessions, lambda: CONFIG, mock.Mock(), FixedClock())  # type: ignore[arg-type]
    controller.schedule()
    assert list(controller._parking.teams) == ["a"]
    with sessions() as session:
        stored = {row.id: row.pending_reasons for row in session.query(JobRow)}
    assert all(reasons and reasons[0]["code"] == "quota" for reasons in stored.values())

    real = cycle_module.decide
    with mock.patch.object(cycle_module, "decide", wraps=real) as decide:
        controller.schedule()
    assert decide.call_count == 0
    with sessions() as session:
        assert {row.id: row.pending_reasons for row in session.query(JobRow)} == stored

    with sessions.begin() as session:  # a job of another team: team a stays parked
        session.add(queued_job("b-1", team="b", user="u", submitted_at=NOW, gpus=8))
    with mock.patch.object(cycle_module, "decide", wraps=real) as decide:
        controller.schedule()
    assert [call.args[0].id for call in decide.call_args_list] == ["b-1"]
    engine.dispose()
