"""Writers of one SQLite file take turns across threads and processes (a server's API workers):
a read-then-write transaction never meets a stale snapshot and no increment is lost."""

from __future__ import annotations

import subprocess
import sys
import textwrap
import time
from pathlib import Path

from sqlalchemy import text

from gpupool.state.db import Sessions, SqliteWriters, make_engine

# Each transaction reads the counter, then writes it plus one: two processes doing this at
# once without turns would fail (SQLITE_BUSY_SNAPSHOT) or, on other stores, lose increments.
INCREMENTS = """
import os, sys, time
from sqlalchemy import text
from gpupool.state.db import Sessions, make_engine
sessions = Sessions(make_engine(f"sqlite:///{sys.argv[1]}"))
while not os.path.exists(sys.argv[3]):  # start together
    time.sleep(0.01)
for _ in range(int(sys.argv[2])):
    with sessions.begin() as session:
        n = session.execute(text("SELECT n FROM counter")).scalar_one()
        session.execute(text("UPDATE counter SET n = :n"), {"n": n + 1})
"""

HOLD = """
import fcntl, os, sys, time
fd = os.open(sys.argv[1], os.O_RDWR | os.O_CREAT, 0o600)
fcntl.flock(fd, fcntl.LOCK_EX)
print("held", flush=True)
time.sleep(float(sys.argv[2]))
"""


def counter_store(path: Path) -> Sessions:
    sessions = Sessions(make_engine(f"sqlite:///{path}"))
    with sessions.begin() as session:
        session.execute(text("CREATE TABLE counter (n INTEGER NOT NULL)"))
        session.execute(text("INSERT INTO counter VALUES (0)"))
    return sessions


def test_factories_of_one_file_share_its_lock(tmp_path: Path) -> None:
    first = Sessions(make_engine(f"sqlite:///{tmp_path / 'a.db'}"))
    again = Sessions(make_engine(f"sqlite:///{tmp_path / 'a.db'}"))
    other = Sessions(make_engine(f"sqlite:///{tmp_path / 'b.db'}"))
    assert first._write_lock is again._write_lock
    assert first._write_lock is not other._write_lock
    assert isinstance(first._write_lock, SqliteWriters)


def test_a_write_waits_while_another_process_holds_the_turn(tmp_path: Path) -> None:
    db = tmp_path / "store.db"
    sessions = counter_store(db)
    with subprocess.Popen(
        [sys.executable, "-c", HOLD, f"{db}-writers", "0.6"], stdout=subprocess.PIPE, text=True
    ) as holder:
        assert holder.stdout is not None and holder.stdout.readline().strip() == "held"
        began = time.monotonic()
        with sessions.begin() as session:
            session.execute(text("UPDATE counter SET n = n + 1"))
        waited = time.monotonic() - began
    assert waited >= 0.3, f"the write went ahead of the other process's turn ({waited:.2f} s)"


def test_processes_writing_at_once_lose_nothing(tmp_path: Path) -> None:
    db = tmp_path / "store.db"
    sessions = counter_store(db)
    each, go = 600, tmp_path / "go"
    writers = [
        subprocess.Popen(
            [sys.executable, "-c", textwrap.dedent(INCREMENTS), str(db), str(each), str(go)],
            stderr=subprocess.PIPE,
            text=True,
        )
        for _ in range(3)
    ]
    time.sleep(1.5)  # the writers import and open the store meanwhile
    go.touch()
    errors = [w.communicate(timeout=120)[1] for w in writers]
    assert [w.returncode for w in writers] == [0, 0, 0], errors
    with sessions() as session:
        assert session.execute(text("SELECT n FROM counter")).scalar_one() == 3 * each
