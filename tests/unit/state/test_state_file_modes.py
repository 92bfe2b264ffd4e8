"""The store's files and GPUPOOL_HOME are private to the server (H1), new or pre-existing."""

from __future__ import annotations

import stat
from dataclasses import dataclass
from pathlib import Path

import pytest
from sqlalchemy import text

from gpupool.server.runtime import private_home
from gpupool.state.db import make_engine


def mode(path: Path) -> int:
    return stat.S_IMODE(path.stat().st_mode)


def test_a_new_store_and_its_wal_are_0600(tmp_path: Path) -> None:
    db = tmp_path / "home" / "gpupool.db"
    engine = make_engine(f"sqlite:///{db}")
    with engine.begin() as conn:  # a write: SQLite makes the -wal and -shm now
        conn.execute(text("CREATE TABLE t (x INTEGER)"))
        conn.execute(text("INSERT INTO t VALUES (1)"))
        files = {p.name: mode(p) for p in db.parent.iterdir()}
    engine.dispose()

    assert files == {"gpupool.db": 0o600, "gpupool.db-wal": 0o600, "gpupool.db-shm": 0o600}
    assert mode(db.parent) == 0o711


def test_an_existing_world_readable_store_is_narrowed_when_opened(tmp_path: Path) -> None:
    db = tmp_path / "gpupool.db"
    for name in ("gpupool.db", "gpupool.db-wal", "gpupool.db-shm"):
        (tmp_path / name).touch(mode=0o644)
        (tmp_path / name).chmod(0o644)

    make_engine(f"sqlite:///{db}").dispose()

    assert {p.name: mode(p) for p in tmp_path.iterdir()} == {
        "gpupool.db": 0o600,
        "gpupool.db-wal": 0o600,
        "gpupool.db-shm": 0o600,
    }


@dataclass(frozen=True)
class HomeCase:
    before: int | None  # None: the home does not exist yet
    after: int


@pytest.mark.parametrize(
    "case",
    [
        pytest.param(HomeCase(None, 0o711), id="made 0711"),
        pytest.param(HomeCase(0o755, 0o711), id="0755 loses read"),
        pytest.param(HomeCase(0o777, 0o711), id="0777 loses read and write"),
        pytest.param(HomeCase(0o700, 0o700), id="0700 stays (never widened)"),
    ],
)
def test_home_and_state_dir_are_at_most_traversable(tmp_path: Path, case: HomeCase) -> None:
    home = tmp_path / "home"
    if case.before is not None:
        home.mkdir()
        home.chmod(case.before)
        (home / "grant.key").write_text("00\n")
        (home / "grant.key").chmod(0o644)

    private_home(home, home / "runs")

    assert mode(home) == case.after
    assert mode(home / "runs") == 0o711
    if case.before is not None:
        assert mode(home / "grant.key") == 0o600
