"""The store on SQLite and PostgreSQL: migrations, models, constraints, time zones."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest
from alembic.autogenerate import compare_metadata
from alembic.migration import MigrationContext
from sqlalchemy import Engine, select, text
from sqlalchemy.exc import IntegrityError

from gpupool.auth.tokens import create_token, verify_token
from gpupool.core.errors import Unauthenticated
from gpupool.state.db import StoreError, session_factory, upgrade
from gpupool.state.models import Base, JobRow
from gpupool.state.schema import head_revision
from support.rows import queued_job

T0 = datetime(2026, 12, 1, 12, 0, tzinfo=UTC)


def job(job_id: str, user: str = "alice", key: str | None = None) -> JobRow:
    return queued_job(
        job_id,
        user=user,
        idempotency_key=key,
        submitted_at=T0,
        priority_class="training",
        priority=100,
        kind="training",
        cpus=1.0,
        memory_gb=1.0,
        gpu_types=["h100"],
    )


def test_migrations_match_the_models(engine: Engine) -> None:
    with engine.connect() as conn:
        diff = compare_metadata(MigrationContext.configure(conn), Base.metadata)
    assert diff == []


MIGRATIONS = sorted(
    (Path(__file__).resolve().parents[3] / "src/gpupool/state/migrations/versions").glob("0*.py")
)


def test_upgrade_is_idempotent(engine: Engine) -> None:
    upgrade(engine)
    with engine.connect() as conn:
        at = conn.scalar(text("SELECT version_num FROM alembic_version"))
    # The last migration, and it is numbered after the count of migrations (0001, 0002, ...).
    assert at == head_revision(engine) == f"{len(MIGRATIONS):04d}"


def test_times_come_back_aware_utc(engine: Engine) -> None:
    sessions = session_factory(engine)
    with sessions.begin() as session:
        session.add(job("j-1"))
    with sessions() as session:
        row = session.scalars(select(JobRow)).one()
    assert row.submitted_at == T0 and row.submitted_at.tzinfo is not None


def test_naive_times_are_refused(engine: Engine) -> None:
    sessions = session_factory(engine)
    row = job("j-1")
    row.submitted_at = datetime(2026, 1, 1)
    with pytest.raises(Exception, match="naive datetime"), sessions.begin() as session:
        session.add(row)


def test_one_job_per_user_and_idempotency_key(engine: Engine) -> None:
    sessions = session_factory(engine)
    with sessions.begin() as session:
        session.add(job("j-1", key="k"))
        session.add(job("j-2", user="bob", key="k"))  # another user may reuse the key
    with pytest.raises(IntegrityError), sessions.begin() as session:
        session.add(job("j-3", key="k"))
    with sessions() as session:
        assert len(session.scalars(select(JobRow)).all()) == 2  # nothing half-written


def test_tokens_are_hashed_expire_and_verify(engine: Engine) -> None:
    sessions = session_factory(engine)
    with sessions.begin() as session:
        issued = create_token(session, "alice", T0, ttl=timedelta(hours=1))
    with sessions() as session:
        stored = session.execute(text("SELECT secret_hash FROM tokens")).scalar_one()
        assert issued.secret.split("_", 2)[2] not in stored
        assert verify_token(session, issued.secret, T0).user == "alice"
        with pytest.raises(Unauthenticated, match="expired"):
            verify_token(session, issued.secret, T0 + timedelta(hours=2))
        with pytest.raises(Unauthenticated, match="invalid"):
            verify_token(session, issued.secret[:-2] + "xx", T0)


def test_a_failed_statement_does_not_quote_its_parameters(engine: Engine) -> None:
    # Job environments and the grant key are statement parameters: an error must not show them.
    with pytest.raises(StoreError) as caught, engine.connect() as connection:
        connection.execute(text("INSERT INTO nowhere VALUES (:v)"), {"v": "s3cr3t-value"})
    assert "s3cr3t-value" not in str(caught.value)


def test_the_day_rollups_are_back_filled_from_the_hours(tmp_path: Path) -> None:
    """A store upgraded with usage history (migration 0013) reports the same: its hours are
    summed into days, key by key."""
    from alembic import command

    from gpupool.config import sqlite_url
    from gpupool.state.db import alembic_config, make_engine
    from gpupool.state.models import UsageDayRow

    engine = make_engine(sqlite_url(tmp_path))
    cfg = alembic_config(engine)
    with engine.begin() as connection:
        cfg.attributes["connection"] = connection
        command.upgrade(cfg, "0012")
    day = datetime(2027, 3, 1, tzinfo=UTC)
    hours = [(day + timedelta(hours=h), "team-a", 3_600_000, 1_000) for h in (0, 5, 23, 24)]
    with engine.begin() as connection:
        for hour, team, ms, borrowed in hours:
            connection.execute(
                text(
                    "INSERT INTO usage_hours VALUES (:hour, :team, 'alice', 'h100', 'p', "
                    "'training', 'dedicated', :ms, :borrowed)"
                ),
                {"hour": hour.strftime("%Y-%m-%d %H:%M:%S.%f"), "team": team, "ms": ms,
                 "borrowed": borrowed},
            )  # fmt: skip
    upgrade(engine)
    with session_factory(engine)() as session:
        days = session.execute(select(UsageDayRow).order_by(UsageDayRow.day)).scalars().all()
    assert [(d.day, d.gpu_ms, d.borrowed_gpu_ms) for d in days] == [
        (day, 3 * 3_600_000, 3_000),
        (day + timedelta(days=1), 3_600_000, 1_000),
    ]
    engine.dispose()


def test_active_attempts_are_read_together_and_ended_ones_left_out(engine: Engine) -> None:
    from gpupool.state import jobs as job_rows
    from gpupool.state.models import AttemptRow

    def attempt(job_id: str, number: int, status: str) -> AttemptRow:
        return AttemptRow(
            job_id=job_id,
            number=number,
            status=status,
            pool="p",
            gpu_type="h100",
            placements=[],
            admitted_at=T0,
        )

    sessions = session_factory(engine)
    with sessions.begin() as session:
        session.add_all([job("j-a"), job("j-b"), job("j-c")])
        session.flush()
        session.add_all(
            [
                attempt("j-a", 1, "lost"),
                attempt("j-a", 2, "running"),
                attempt("j-b", 1, "admitted"),
                attempt("j-c", 1, "succeeded"),
            ]
        )
    wanted = [("j-a", 1), ("j-a", 2), ("j-b", 1), ("j-c", 1), ("j-gone", 1)]
    with sessions() as session:
        found = job_rows.active_attempts(session, wanted)
        singles = {key: job_rows.active_attempt(session, *key) for key in wanted}
    assert sorted(found) == [("j-a", 2), ("j-b", 1)]
    assert {k for k, v in singles.items() if v is not None} == set(found)
    assert all(j.id == key[0] and a.number == key[1] for key, (j, a) in found.items())
