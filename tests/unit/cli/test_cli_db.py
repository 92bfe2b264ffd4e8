"""``gpupool db upgrade`` and ``db backup``, and the start rule for a store's schema
(``state.schema``): a fresh store is created, an older one refused, on SQLite and PostgreSQL."""

from __future__ import annotations

import os
import sqlite3
import threading
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest
from alembic import command
from sqlalchemy import text
from typer.testing import CliRunner

from gpupool.cli.main import app
from gpupool.config import Settings, sqlite_url
from gpupool.server.serve import resolve_config
from gpupool.state.db import alembic_config, make_engine
from gpupool.state.schema import (
    SchemaNotCurrent,
    SchemaVerdict,
    ensure_schema,
    head_revision,
    schema_status,
)

runner = CliRunner()
FIRST = "0001"


@pytest.fixture(params=["sqlite", "postgresql"])
def store_url(
    request: pytest.FixtureRequest, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> str:
    """An empty store; the CLI's settings point at it (``GPUPOOL_DATABASE_URL``)."""
    monkeypatch.setenv("GPUPOOL_HOME", str(tmp_path / "home"))
    if request.param == "sqlite":
        url = sqlite_url(tmp_path / "home")
    else:
        url = request.getfixturevalue("postgres_url")
        engine = make_engine(url)
        with engine.begin() as connection:  # the session's database, emptied for this test
            connection.execute(text("DROP SCHEMA public CASCADE; CREATE SCHEMA public"))
        engine.dispose()
    monkeypatch.setenv("GPUPOOL_DATABASE_URL", url)
    return url


def migrate_to(url: str, revision: str) -> None:
    engine = make_engine(url)
    cfg = alembic_config(engine)
    with engine.begin() as connection:
        cfg.attributes["connection"] = connection
        command.upgrade(cfg, revision)
    engine.dispose()


def set_revision(url: str, revision: str) -> None:
    engine = make_engine(url)
    with engine.begin() as connection:
        connection.execute(text("UPDATE alembic_version SET version_num = :r"), {"r": revision})
    engine.dispose()


def verdict(url: str) -> SchemaVerdict:
    engine = make_engine(url)
    try:
        return schema_status(engine).verdict
    finally:
        engine.dispose()


@dataclass(frozen=True)
class StartCase:
    prepare: str  # "nothing", "first revision", "newer revision", "tables without revision"
    starts: bool
    says: str  # in the refusal


START_CASES = [
    pytest.param(StartCase("nothing", True, ""), id="an empty store is created at start"),
    pytest.param(StartCase("head", True, ""), id="a current store is used as is"),
    pytest.param(
        StartCase("first revision", False, "gpupool db upgrade"),
        id="an older store is refused, naming gpupool db upgrade",
    ),
    pytest.param(
        StartCase("newer revision", False, "a newer gpupool wrote it"),
        id="a store from a newer release is refused",
    ),
    pytest.param(
        StartCase("tables without revision", False, "no schema revision"),
        id="gpupool's tables without a revision are refused",
    ),
]


def prepare(url: str, how: str) -> None:
    if how == "head":
        migrate_to(url, "head")
    elif how == "first revision":
        migrate_to(url, FIRST)
    elif how == "newer revision":
        migrate_to(url, "head")
        set_revision(url, "9999_from_the_future")
    elif how == "tables without revision":
        migrate_to(url, "head")
        engine = make_engine(url)
        with engine.begin() as connection:
            connection.execute(text("DROP TABLE alembic_version"))
        engine.dispose()


@pytest.mark.parametrize("case", START_CASES)
def test_start_creates_a_fresh_store_and_refuses_an_old_one(
    case: StartCase, store_url: str
) -> None:
    prepare(store_url, case.prepare)
    engine = make_engine(store_url)
    try:
        if case.starts:
            assert ensure_schema(engine).verdict is SchemaVerdict.CURRENT
            assert schema_status(engine).revision == head_revision(engine)
        else:
            before = schema_status(engine)
            with pytest.raises(SchemaNotCurrent) as refused:
                ensure_schema(engine)
            assert case.says in refused.value.message
            assert schema_status(engine) == before  # refusing changed nothing
    finally:
        engine.dispose()


def test_server_start_on_an_older_store_exits_5_naming_the_command(
    store_url: str, demo_path: Path, tmp_path: Path
) -> None:
    migrate_to(store_url, FIRST)
    done = runner.invoke(app, ["server", "--config", str(demo_path)])
    assert done.exit_code == 5
    assert "gpupool db upgrade" in done.output
    assert verdict(store_url) is SchemaVerdict.OLDER  # nothing was migrated behind our back


def test_db_upgrade_brings_an_older_store_to_head_then_has_nothing_to_do(
    store_url: str, demo_path: Path, tmp_path: Path
) -> None:
    migrate_to(store_url, FIRST)
    done = runner.invoke(app, ["db", "upgrade"])
    assert done.exit_code == 0, done.output
    assert f"from revision {FIRST} to " in done.output
    assert verdict(store_url) is SchemaVerdict.CURRENT
    again = runner.invoke(app, ["db", "upgrade"])
    assert again.exit_code == 0 and "nothing to do" in again.output
    # ...and the configuration can now be stored and read (the server's first step).
    settings = Settings(home=tmp_path / "home", database_url=store_url)
    assert resolve_config(settings, demo_path).teams


def test_db_upgrade_refuses_a_store_from_a_newer_release(store_url: str) -> None:
    prepare(store_url, "newer revision")
    done = runner.invoke(app, ["db", "upgrade"])
    assert done.exit_code == 5
    assert "9999_from_the_future" in done.output


# -- backup --------------------------------------------------------------------------------


@pytest.fixture
def sqlite_store(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, demo_path: Path) -> Path:
    home = tmp_path / "home"
    monkeypatch.setenv("GPUPOOL_HOME", str(home))
    monkeypatch.delenv("GPUPOOL_DATABASE_URL", raising=False)
    resolve_config(Settings(home=home, database_url=sqlite_url(home)), demo_path)
    return home / "gpupool.db"


def rows(db: Path, table: str) -> int:
    with sqlite3.connect(db) as connection:
        return int(connection.execute(f"SELECT count(*) FROM {table}").fetchone()[0])


def test_backup_copies_a_store_that_is_being_written(sqlite_store: Path, tmp_path: Path) -> None:
    writer = sqlite3.connect(sqlite_store, check_same_thread=False)
    writer.execute("CREATE TABLE scratch (n INTEGER)")
    writer.commit()
    stop = threading.Event()

    def write() -> None:  # another process's writes, meanwhile (WAL: never blocked)
        n = 0
        while not stop.is_set():
            writer.execute("INSERT INTO scratch VALUES (?)", (n,))
            writer.commit()
            n += 1

    thread = threading.Thread(target=write)
    thread.start()
    try:
        dest = tmp_path / "copy.db"
        done = runner.invoke(app, ["db", "backup", str(dest)])
    finally:
        stop.set()
        thread.join()
        writer.close()
    assert done.exit_code == 0, done.output
    assert os.stat(dest).st_mode & 0o777 == 0o600
    assert rows(dest, "alembic_version") == 1  # the store's own tables came along
    assert 0 <= rows(dest, "scratch") <= rows(sqlite_store, "scratch")
    with sqlite3.connect(dest) as copy:
        assert copy.execute("PRAGMA integrity_check").fetchone()[0] == "ok"


@dataclass(frozen=True)
class RefusalCase:
    dest_exists: bool = False
    postgres: bool = False
    says: str = ""


@pytest.mark.parametrize(
    "case",
    [
        pytest.param(RefusalCase(dest_exists=True, says="exists"), id="never overwrites a file"),
        pytest.param(RefusalCase(postgres=True, says="pg_dump"), id="PostgreSQL: use pg_dump"),
    ],
)
def test_backup_refuses(
    case: RefusalCase, sqlite_store: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    dest = tmp_path / "copy.db"
    if case.dest_exists:
        dest.write_text("an older backup")
    if case.postgres:
        monkeypatch.setenv("GPUPOOL_DATABASE_URL", "postgresql+psycopg://db.example/gpupool")
    done = runner.invoke(app, ["db", "backup", str(dest)])
    assert done.exit_code == 5
    assert case.says in done.output
    if case.dest_exists:
        assert dest.read_text() == "an older backup"
    else:
        assert not dest.exists()


@pytest.fixture(autouse=True)
def _no_leftover_env(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    monkeypatch.delenv("GPUPOOL_DATABASE_URL", raising=False)
    yield
