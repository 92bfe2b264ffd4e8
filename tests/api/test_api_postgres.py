"""The same API scenarios on PostgreSQL (production mode) instead of SQLite."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
from sqlalchemy import text

from api import test_api_arrays as arrays
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


@pytest.mark.parametrize(
    "scenario",
    [
        pytest.param(arrays.test_an_array_is_answered_compactly_and_its_tasks_are_jobs, id="read"),
        pytest.param(arrays.test_the_idempotency_key_names_the_whole_array, id="idempotency"),
        pytest.param(arrays.test_cancel_applies_to_the_whole_array_or_to_one_task, id="cancel"),
        pytest.param(arrays.test_a_grouped_listing_shows_an_array_once_with_counts, id="grouped"),
        pytest.param(arrays.test_each_task_sees_its_array_id_and_index, id="task env"),
    ],
)
def test_job_arrays_on_postgres(api_pg: Api, scenario: Callable[[Api], None]) -> None:
    """Tasks are stored through COPY on PostgreSQL: they read back as from SQLite."""
    scenario(api_pg)


def test_a_failed_array_insert_rolls_back_on_postgres(
    api_pg: Api, monkeypatch: pytest.MonkeyPatch
) -> None:
    arrays.test_a_task_that_cannot_be_stored_rolls_the_whole_array_back(api_pg, monkeypatch)
