"""C1: SIGKILL the server while jobs run and restart it late: the usage ledger counts every
millisecond of the jobs exactly once (they held their GPUs while no server ran) and records
the span no controller accrued as a gap, with no capacity in it."""

from __future__ import annotations

from datetime import UTC, datetime
from pathlib import Path

import pytest
from sqlalchemy import func, select

from gpupool.accounting.hours import epoch_ms
from gpupool.config import sqlite_url
from gpupool.state import usage
from gpupool.state.db import SessionFactory, make_engine, session_factory
from gpupool.state.models import (
    AccountingGapRow,
    AttemptRow,
    CapacityHourRow,
    UsageHourRow,
    UsageRow,
)
from support.server import ServerProcess, wait_for

pytestmark = pytest.mark.slow

WAIT = ["sh", "-c", 'while [ ! -f "$RELEASE" ]; do sleep 0.05; done']
DEMO_GPUS = 4 + 4  # the demo's pools: one node of 4 h100, one of 4 t4
GAP_AFTER_S = 3.0
# The demo, accruing every second; a controller that finds the ledger older than 3 s gaps it.
ACCOUNTING = f"\naccounting:\n  accrual_interval_s: 1\n  gap_after_s: {GAP_AFTER_S}\n"


def accrued(sessions: SessionFactory) -> datetime | None:
    with sessions() as session:
        return usage.accrued_until(session)


def accruing(sessions: SessionFactory) -> int:
    """Ledger rows that have counted some time already."""
    with sessions() as session:
        return session.scalar(select(func.count()).where(UsageRow.gpu_ms > 0)) or 0


def test_a_late_restart_counts_running_jobs_once_and_leaves_a_gap(
    tmp_path: Path, open_dir: Path, demo_path: Path
) -> None:
    config = tmp_path / "cluster.yaml"
    config.write_text(demo_path.read_text() + ACCOUNTING)
    home = tmp_path / "home"
    release = open_dir / "release"
    server = ServerProcess(home, config)
    started = datetime.now(UTC)
    server.start()
    up = datetime.now(UTC)
    engine = make_engine(sqlite_url(home))
    sessions = session_factory(engine)
    try:
        alice = server.client("alice")
        ids = [
            alice.post(
                "/v1/jobs",
                json={
                    "command": WAIT,
                    "env": {"RELEASE": str(release)},
                    "resources": {"gpus": gpus, "gpu_types": [gpu_type]},
                },
            ).json()["id"]
            for gpus, gpu_type in ((1, "h100"), (2, "t4"))
        ]

        def statuses() -> list[str]:
            return [alice.get(f"/v1/jobs/{j}").json()["status"] for j in ids]

        wait_for(lambda: statuses() == ["running", "running"], what="2 running")
        wait_for(lambda: accruing(sessions) == 2, what="the running jobs accrued")
        server.kill()
        alice.close()
        before = accrued(sessions)
        assert before is not None
        wait_for(
            lambda: (datetime.now(UTC) - before).total_seconds() > GAP_AFTER_S + 1,
            what="late enough for a gap",
        )

        restarted = ServerProcess(home, config, port=server.port)
        restarted.tokens = server.tokens
        restarted.start()
        try:
            alice = restarted.client("alice")
            assert statuses() == ["running", "running"]  # re-attached, never lost
            wait_for(lambda: (accrued(sessions) or before) > before, what="an accrual")
            release.touch()
            wait_for(lambda: statuses() == ["succeeded", "succeeded"], what="both succeeded")
            alice.close()
        finally:
            restarted.stop()

        with sessions() as session:
            rows = session.execute(select(UsageRow).order_by(UsageRow.gpus)).scalars().all()
            attempts = {a.id: a for a in session.execute(select(AttemptRow)).scalars()}
            hours = session.scalar(select(func.sum(UsageHourRow.gpu_ms)))
            capacity = session.scalar(select(func.sum(CapacityHourRow.gpu_ms))) or 0
            gaps = session.execute(select(AccountingGapRow)).scalars().all()
            final = usage.accrued_until(session)
    finally:
        server.stop()
        engine.dispose()

    # Each attempt: one row, closed, counted over its whole run, the dead server's time too.
    assert [(r.gpus, r.outcome) for r in rows] == [(1, "succeeded"), (2, "succeeded")]
    for row in rows:
        attempt = attempts[row.attempt_id]
        assert (row.started_at, row.ended_at) == (attempt.started_at, attempt.finished_at)
        assert attempt.started_at is not None and attempt.finished_at is not None
        assert row.gpu_ms == row.gpus * (epoch_ms(attempt.finished_at) - epoch_ms(row.started_at))
    assert hours == sum(r.gpu_ms for r in rows)  # no hour counted twice

    # One gap, from the last accrual before the kill to the restarted controller's first.
    assert len(gaps) == 1 and gaps[0].start == before
    gap = gaps[0]
    assert (gap.end - gap.start).total_seconds() > GAP_AFTER_S
    # Capacity covers the time a controller accrued, and not the gap: from the first
    # accrual (between the start and the server answering) to the kill, then from the gap's
    # end to the last accrual.
    assert final is not None
    after = epoch_ms(final) - epoch_ms(gap.end)
    most = epoch_ms(before) - epoch_ms(started) + after
    least = epoch_ms(before) - epoch_ms(up) + after
    assert capacity % DEMO_GPUS == 0
    assert DEMO_GPUS * least <= capacity <= DEMO_GPUS * most
