"""Pooled PostgreSQL connections are pinged only when they sat unused for a while: a
connection handed back moments ago is handed out again as it is (no round trip per
transaction), and one that died while idle (a database restart) is replaced, not given out."""

from __future__ import annotations

import pytest
from sqlalchemy import Engine, text

from gpupool.state import db
from gpupool.state.db import make_engine


@pytest.fixture
def engine(postgres_url: str) -> Engine:
    built = make_engine(postgres_url)
    yield built
    built.dispose()


def pings(engine: Engine, monkeypatch: pytest.MonkeyPatch) -> list[int]:
    seen: list[int] = []
    real = engine.dialect.do_ping

    def counted(dbapi_conn: object) -> bool:
        seen.append(1)
        return bool(real(dbapi_conn))

    monkeypatch.setattr(engine.dialect, "do_ping", counted)
    return seen


def backend_pid(engine: Engine) -> int:
    with engine.connect() as connection:
        return int(connection.execute(text("SELECT pg_backend_pid()")).scalar_one())


def test_a_connection_back_moments_ago_is_not_pinged(
    engine: Engine, monkeypatch: pytest.MonkeyPatch
) -> None:
    seen = pings(engine, monkeypatch)
    first = backend_pid(engine)  # a new connection: nothing to ping yet
    assert [backend_pid(engine) for _ in range(5)] == [first] * 5
    assert seen == []


def test_an_idle_connection_is_pinged_and_a_dead_one_replaced(
    engine: Engine, monkeypatch: pytest.MonkeyPatch, postgres_url: str
) -> None:
    seen = pings(engine, monkeypatch)
    first = backend_pid(engine)
    other = make_engine(postgres_url)
    try:
        with other.connect() as connection:  # as a restart would: the server ends it
            connection.execute(text("SELECT pg_terminate_backend(:pid)"), {"pid": first})
    finally:
        other.dispose()
    monkeypatch.setattr(db.time, "monotonic", lambda: 1e12)  # long after it came back
    assert backend_pid(engine) != first  # not an error: a new connection
    assert len(seen) == 1
