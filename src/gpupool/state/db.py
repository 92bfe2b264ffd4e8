"""Engine and session factory; schema upgrades through Alembic.

SQLite runs in WAL mode with a busy timeout so the API and the controller can write from
different threads; PostgreSQL is used as is.

The SQLite store holds every team's commands, environments (secrets included), token hashes
and the audit log, so its files are the server's alone: the database is created 0600 before
SQLite opens it (SQLite gives its ``-wal`` and ``-shm`` the database's mode), and an existing
store's files are narrowed to 0600 when it is opened. Its directory is made 0711 (jobs may
have to traverse ``GPUPOOL_HOME`` to their work dirs; they cannot list it).

This module is also the store's face to the rest of gpupool: the ``Session`` (a unit of
work, passed to the repository functions of ``state/``), ``SessionFactory`` (what makes them;
``begin()`` opens a transaction), ``Engine`` and ``IntegrityError`` are re-exported here so
no package outside ``gpupool.state`` imports SQLAlchemy (tests/unit/test_import_rules.py).

A store that goes away (PostgreSQL restarting, a network cut, a pool with no free connection)
is told apart from a bug by :func:`store_outage`, which turns SQLAlchemy's connection-level
errors into :class:`~gpupool.core.errors.StoreUnavailable`: the API answers it 503 with a
``Retry-After``, the controller pauses and retries (``StoreError`` is what the API's handler
is registered for). PostgreSQL engines ping a pooled connection before reusing it, so once
the database is back the first request gets a fresh connection instead of a dead one.
"""

from __future__ import annotations

import fcntl
import logging
import os
import threading
import time
from collections.abc import Iterator
from contextlib import AbstractContextManager, contextmanager, nullcontext
from pathlib import Path
from typing import Any, cast

from alembic import command
from alembic.config import Config
from sqlalchemy import CursorResult, Engine, Executable, create_engine, event, text
from sqlalchemy.exc import (
    DBAPIError,
    DisconnectionError,
    IntegrityError,
    InterfaceError,
    OperationalError,
)
from sqlalchemy.exc import SQLAlchemyError as StoreError
from sqlalchemy.exc import TimeoutError as PoolTimeout
from sqlalchemy.orm import Session, sessionmaker

from gpupool.core.errors import StoreUnavailable
from gpupool.state import changes

__all__ = [
    "Engine",
    "IntegrityError",
    "Session",
    "SessionFactory",
    "Sessions",
    "StoreError",
    "make_engine",
    "ping",
    "session_factory",
    "store_outage",
    "upgrade",
    "write_conflict",
]

# What callers are given to open sessions with: ``factory()`` to read, ``factory.begin()`` to
# write in one transaction. (A plain sessionmaker, or the SQLite-serialized ``Sessions``.)
SessionFactory = sessionmaker[Session]

MIGRATIONS = Path(__file__).parent / "migrations"
SQLITE_SIDE_FILES = ("-wal", "-shm", "-journal")
WRITERS_SIDE_FILE = "-writers"  # flock'd by each write transaction (SqliteWriters)
CONNECT_TIMEOUT_S = 5
PING_IDLE_S = 1.0  # a pooled connection unused this long is pinged before it is handed out
_RETURNED = "gpupool.returned_at"

log = logging.getLogger(__name__)


def private_sqlite_files(db: Path) -> None:
    """Create ``db`` 0600 if it does not exist; narrow it and its side files to 0600."""
    db.parent.mkdir(mode=0o711, parents=True, exist_ok=True)
    os.close(os.open(db, os.O_RDWR | os.O_CREAT, 0o600))  # an empty file is an empty store
    for path in (db, *(db.with_name(db.name + side) for side in SQLITE_SIDE_FILES)):
        try:
            mode = path.stat().st_mode & 0o777
            if mode & 0o077:
                path.chmod(mode & 0o700)
        except FileNotFoundError:
            continue
        except PermissionError:  # not ours: the operator set it up; say so, do not fail
            log.warning("cannot make %s private (mode %o): chmod it 0600", path, mode)


def make_engine(url: str) -> Engine:
    """An engine whose errors never quote a statement's parameters (``hide_parameters``): a
    failed insert's message would otherwise carry job environments or the grant key into a
    traceback or a log line."""
    if url.startswith("sqlite"):
        path = url.split("///", 1)[-1].split("?", 1)[0] if "///" in url else ""
        if path and path != ":memory:":
            private_sqlite_files(Path(path))
        engine = create_engine(
            url,
            connect_args={"check_same_thread": False, "timeout": 30},
            hide_parameters=True,
        )

        @event.listens_for(engine, "connect")
        def _sqlite_pragmas(dbapi_conn: Any, _record: Any) -> None:
            cursor = dbapi_conn.cursor()
            cursor.execute("PRAGMA journal_mode=WAL")
            cursor.execute("PRAGMA synchronous=NORMAL")
            cursor.execute("PRAGMA foreign_keys=ON")
            cursor.execute("PRAGMA busy_timeout=30000")
            cursor.close()

        return engine
    # connect_timeout: an unreachable host fails a request in seconds, not minutes.
    connect_args = {} if "connect_timeout" in url else {"connect_timeout": CONNECT_TIMEOUT_S}
    engine = create_engine(
        url,
        pool_size=10,
        max_overflow=10,
        connect_args=connect_args,
        hide_parameters=True,
    )
    ping_idle_connections(engine)
    return engine


def ping_idle_connections(engine: Engine, idle_s: float = PING_IDLE_S) -> None:
    """Hand out a pooled connection unused for ``idle_s`` only after a ``SELECT 1`` went
    through (one kept across a database restart is replaced, not handed out dead). Unlike
    ``pool_pre_ping``, a connection back in the pool moments ago is not asked again: under
    load every transaction would pay a round trip for it. One that died while busy fails its
    statement, which the callers treat as an outage (``store_outage``), and the pool then
    drops every connection made before (SQLAlchemy's handling of a disconnect)."""

    @event.listens_for(engine, "checkin")
    def _returned(_dbapi_conn: Any, record: Any) -> None:
        record.info[_RETURNED] = time.monotonic()

    @event.listens_for(engine, "checkout")
    def _ping(dbapi_conn: Any, record: Any, _proxy: Any) -> None:
        returned = record.info.get(_RETURNED)  # None: connected just now (info is per link)
        if returned is None or time.monotonic() - returned < idle_s:
            return
        try:
            engine.dialect.do_ping(dbapi_conn)
        except Exception as exc:  # any failure: the pool retries with a new connection
            raise DisconnectionError(f"a pooled connection no longer answers: {exc}") from exc


def alembic_config(engine: Engine) -> Config:
    cfg = Config()
    cfg.set_main_option("script_location", str(MIGRATIONS))
    cfg.set_main_option("sqlalchemy.url", engine.url.render_as_string(hide_password=False))
    return cfg


def upgrade(engine: Engine) -> None:
    """Bring the schema to the newest revision (idempotent)."""
    cfg = alembic_config(engine)
    with engine.begin() as connection:
        cfg.attributes["connection"] = connection
        command.upgrade(cfg, "head")


def rows_changed(session: Session, statement: Executable) -> int:
    """Execute an UPDATE or DELETE; how many rows it changed (for conditional writes)."""
    result = session.execute(statement)
    return cast(CursorResult[Any], result).rowcount


def ping(engine: Engine) -> None:
    """Raise if the store cannot answer a trivial query (readiness)."""
    with engine.connect() as connection:
        connection.execute(text("SELECT 1"))


def store_outage(exc: BaseException) -> StoreUnavailable | None:
    """``exc`` as :class:`StoreUnavailable` when it says the store cannot be reached now (a
    lost or refused connection, a server shutting down or restarting, no free connection in
    the pool, a statement or lock timeout), else None: an error that retrying may cure.

    The message names the driver's error class and the first line of its text only: never
    SQLAlchemy's rendering, which quotes the statement and its parameters (job environments
    may hold secrets)."""
    if isinstance(exc, StoreUnavailable):
        return exc
    if write_conflict(exc):
        return StoreUnavailable(
            "a concurrent write conflicted with this one (the database chose it to undo): retry"
        )
    if isinstance(exc, PoolTimeout):
        return StoreUnavailable(f"no free database connection: {str(exc).splitlines()[0]}")
    lost = isinstance(exc, OperationalError | InterfaceError) or (
        isinstance(exc, DBAPIError) and exc.connection_invalidated
    )
    if not lost:
        return None
    orig = getattr(exc, "orig", None) or exc
    first = (str(orig).strip().splitlines() or [""])[0][:200]
    return StoreUnavailable(f"the database cannot be reached: {type(orig).__name__}: {first}")


# PostgreSQL undoes one transaction of a deadlock (40P01) or of a serialization conflict
# (40001): the store is fine, and the same transaction run again goes through.
CONFLICT_STATES = frozenset({"40P01", "40001"})


def write_conflict(exc: BaseException) -> bool:
    """Whether ``exc`` is a transaction the database undid for a conflict with a concurrent
    one (a deadlock): nothing is lost, and running it again is the cure."""
    orig = getattr(exc, "orig", None)
    state = getattr(orig, "sqlstate", None) or getattr(orig, "pgcode", None)
    return isinstance(exc, DBAPIError) and state in CONFLICT_STATES


class SqliteWriters:
    """The writers of one SQLite file, queued: first among this process's threads, then,
    by ``flock`` on a side file, among the processes that share the file (a server's API
    workers). Queued writers wait without sleeping, and a transaction begins only once the
    last writer has committed, so it never finds its snapshot stale at its first write."""

    _by_path: dict[str, SqliteWriters] = {}
    _made = threading.Lock()

    def __init__(self, path: str | None) -> None:
        self._threads = threading.Lock()
        self._fd: int | None = None
        if path is not None:
            self._fd = os.open(f"{path}{WRITERS_SIDE_FILE}", os.O_RDWR | os.O_CREAT, 0o600)

    @classmethod
    def of(cls, path: str | None) -> SqliteWriters:
        """The one lock of ``path`` in this process (None: a private in-memory store)."""
        if path is None:
            return cls(None)
        with cls._made:
            if path not in cls._by_path:
                cls._by_path[path] = cls(path)
            return cls._by_path[path]

    def __enter__(self) -> None:
        self._threads.acquire()
        if self._fd is not None:
            try:
                fcntl.flock(self._fd, fcntl.LOCK_EX)
            except BaseException:
                self._threads.release()
                raise

    def __exit__(self, *_: object) -> None:
        if self._fd is not None:
            fcntl.flock(self._fd, fcntl.LOCK_UN)
        self._threads.release()


def _sqlite_file(engine: Engine) -> str | None:
    database = engine.url.database
    return None if not database or database == ":memory:" else str(Path(database).absolute())


class Sessions(sessionmaker[Session]):
    """A session factory whose ``begin()`` (the write path) is serialized on SQLite.

    SQLite allows one writer at a time; writers that collide wait in SQLite's busy handler,
    which sleeps in growing steps (up to 100 ms) and under concurrent submits spends most
    of its time asleep. Taking :class:`SqliteWriters` first queues them without sleeping.
    Reads (``sessions()``) are not serialized: WAL lets them run beside a writer.
    """

    def __init__(self, engine: Engine) -> None:
        super().__init__(engine, expire_on_commit=False)
        changes.track(self)  # the controller reads only the jobs that changed
        self._write_lock: AbstractContextManager[Any] = (
            SqliteWriters.of(_sqlite_file(engine))
            if engine.dialect.name == "sqlite"
            else nullcontext()
        )

    @contextmanager
    def begin(self) -> Iterator[Session]:  # type: ignore[override]
        with self._write_lock, super().begin() as session:
            yield session


def session_factory(engine: Engine) -> Sessions:
    return Sessions(engine)
