"""What the controller's snapshot and policy carry for preemption, fair share and routing: a
running job's earlier preemptions and a queued job's pinned backend (read from the store on
SQLite and PostgreSQL), the priority classes' minimum run times, the cap on preemptions and
what one GPU of each type counts in the fair share."""

from __future__ import annotations

from collections.abc import Iterator
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest
from sqlalchemy import Engine, text

from gpupool.controller.snapshot import policy_for
from gpupool.controller.state import pending_job, running_job
from gpupool.core.jobs import JobStatus
from gpupool.spec.load import parse_config
from gpupool.state import queue
from gpupool.state.db import make_engine, session_factory, upgrade
from gpupool.state.models import AttemptRow, Base
from support.rows import T0, queued_job


@pytest.fixture(params=["sqlite", "postgresql"])
def engine(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Engine]:
    if request.param == "sqlite":
        url = f"sqlite:///{tmp_path / 'store.db'}"
    else:
        url = request.getfixturevalue("postgres_url")
    built = make_engine(url)
    with built.begin() as conn:  # each test starts from an empty schema
        Base.metadata.drop_all(conn)
        conn.execute(text("DROP TABLE IF EXISTS alembic_version"))
    upgrade(built)
    try:
        yield built
    finally:
        built.dispose()


def attempt(job_id: str, number: int, status: str, **fields: Any) -> AttemptRow:
    values: dict[str, Any] = {
        "job_id": job_id,
        "number": number,
        "status": status,
        "pool": "p",
        "gpu_type": "h100",
        "placements": [{"node": "p-0", "devices": [0]}],
        "borrowed": 0,
        "admitted_at": T0 + timedelta(seconds=10 * number),
        "message": "",
        "cancel_sent": False,
    }
    values.update(fields)
    return AttemptRow(**values)


def test_a_running_job_carries_how_often_it_was_preempted(engine: Engine) -> None:
    sessions = session_factory(engine)
    running = JobStatus.RUNNING.value
    with sessions.begin() as session:
        session.add_all(
            [
                queued_job("fresh", status=running, attempt=1),
                queued_job("back", status=running, attempt=4),
            ]
        )
    with sessions.begin() as session:
        session.add_all(
            [
                attempt("fresh", 1, "running"),
                attempt("back", 1, "preempted", preempted_by="x"),
                attempt("back", 2, "lost"),  # lost, not preempted: does not count
                attempt("back", 3, "preempted", preempted_by="y"),
                attempt("back", 4, "running"),
            ]
        )
    with sessions() as session:
        jobs = {row.id: running_job(row) for row in queue.active(session)}
    assert jobs["fresh"].preemptions == 0
    assert jobs["back"].preemptions == 2
    assert jobs["back"].started_at == (T0 + timedelta(seconds=40)).timestamp()


def test_a_queued_job_carries_the_backend_it_was_pinned_to(engine: Engine) -> None:
    sessions = session_factory(engine)
    with sessions.begin() as session:
        session.add_all([queued_job("any"), queued_job("pinned", backend="slurm")])
    with sessions() as session:
        jobs = {row.id: pending_job(row) for row in queue.queued(session)}
    assert jobs["any"].backend is None  # backend: auto
    assert jobs["pinned"].backend == "slurm"


def test_the_policy_carries_protection_and_gpu_type_weights(demo_path: Path) -> None:
    text = demo_path.read_text(encoding="utf-8")
    text = text.replace(
        "training: {value: 100, default: true}",
        "training: {value: 100, default: true, min_runtime_s: 600}",
    )
    text = text.replace(
        "t4: {price_per_gpu_hour: 0.35}", "t4: {price_per_gpu_hour: 0.35, fair_share_weight: 1}"
    )
    text = text.replace("max_preemptions_per_job: 3", "max_preemptions_per_job: 5")
    policy = policy_for(parse_config(text))
    assert policy.min_runtime_s == {100: 600.0}
    assert policy.max_preemptions_per_job == 5
    assert policy.gpu_type_weights == {"h100": 4.0, "t4": 1.0}


def test_without_prices_every_gpu_type_counts_one(demo_path: Path) -> None:
    text = demo_path.read_text(encoding="utf-8")
    text = text.replace("{price_per_gpu_hour: 4.00, spot_price_per_gpu_hour: 1.60}", "{}")
    text = text.replace("{price_per_gpu_hour: 0.35}", "{}")
    assert policy_for(parse_config(text)).gpu_type_weights == {"h100": 1.0, "t4": 1.0}
