"""The same API scenarios on PostgreSQL (production mode) instead of SQLite."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
from sqlalchemy import text

from api import test_api_flow as flow
from api import test_api_submit as submit
from gpupool.state.db import make_engine
from gpupool.state.models import Base
from support.apikit import Api, make_api


@pytest.fixture
def api_pg(tmp_path: Path, demo_path: Path, postgres_url: str) -> Iterator[Api]:
    engine = make_engine(postgres_url)
    with engine.begin() as conn:
        Base.metadata.drop_all(conn)
        conn.execute(text("DROP TABLE IF EXISTS alembic_version"))
    engine.dispose()
    built = make_api(tmp_path / "home", demo_path, database_url=postgres_url)
    try:
        yield built
    finally:
        built.client.close()
        built.runtime.close()


def test_quota_flow_on_postgres(api_pg: Api, open_dir: Path) -> None:
    flow.test_third_job_waits_for_team_quota_then_starts(api_pg, open_dir)


def test_idempotency_on_postgres(api_pg: Api) -> None:
    submit.test_same_idempotency_key_returns_the_same_job(api_pg)


def test_cursor_paging_on_postgres(api_pg: Api) -> None:
    submit.test_list_pages_with_a_cursor(api_pg)
