"""A migrated, empty store on SQLite and on PostgreSQL (the ``store_engine`` fixture), and a
clock that tests move by hand."""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from datetime import datetime, timedelta
from pathlib import Path

import pytest
from sqlalchemy import Engine, text

from gpupool.state.db import make_engine, upgrade
from gpupool.state.models import Base


@pytest.fixture(params=["sqlite", "postgresql"])
def store_engine(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Engine]:
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


@dataclass
class ManualClock:
    """Wall and monotonic time that move only when a test calls :meth:`advance`."""

    wall: datetime
    mono: float = 0.0

    def now(self) -> datetime:
        return self.wall

    def monotonic(self) -> float:
        return self.mono

    def advance(self, seconds: float) -> None:
        self.wall += timedelta(seconds=seconds)
        self.mono += seconds
