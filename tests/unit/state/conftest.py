"""The store tests' engine: each test gets an empty store at the newest revision, on SQLite
and on PostgreSQL (the scratch database of ``postgres_url``)."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
from sqlalchemy import Engine, text

from gpupool.state.db import make_engine, upgrade
from gpupool.state.models import Base


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
