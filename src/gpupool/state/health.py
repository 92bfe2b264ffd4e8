"""What ``gpupool doctor`` asks of the store: can it be reached, is its schema current, how
far this machine's clock is from the database server's, and which controller holds the lease.

Everything here reads; nothing migrates or writes. Errors come back as values (a sentence
without the URL's password), so callers outside ``state/`` never handle SQLAlchemy's
exceptions.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from sqlalchemy import text
from sqlalchemy.engine import make_url
from sqlalchemy.exc import ArgumentError, SQLAlchemyError
from sqlalchemy.orm import Session

from gpupool.state import lease
from gpupool.state.db import make_engine
from gpupool.state.lease import LeaseView
from gpupool.state.schema import SchemaStatus, SchemaVerdict, schema_status


@dataclass(frozen=True, slots=True)
class StoreReport:
    url: str  # the database URL with its password masked
    dialect: str  # "sqlite", "postgresql"
    error: str | None = None  # why it could not be read; None when it answered
    schema: SchemaStatus | None = None
    # The database server's clock minus this machine's (seconds; PostgreSQL only: SQLite
    # runs inside this process and has no clock of its own).
    skew_s: float | None = None
    file: Path | None = None  # SQLite: the store's file, as the URL names it
    # PostgreSQL: the controller lease as the database sees it (None: no row yet).
    lease: LeaseView | None = None


def _reason(exc: BaseException) -> str:
    # The driver's own message (psycopg: "connection refused ..."), first line only; it names
    # host and port, never the password.
    origin = getattr(exc, "orig", None) or exc
    lines = str(origin).strip().splitlines()
    return f"{type(origin).__name__}: {lines[0] if lines else 'no detail'}"


def clock_skew(connection_execute: Callable[[], float], now: Callable[[], float]) -> float:
    """The server's epoch seconds minus ours, taken at the midpoint of the round trip."""
    before = now()
    server = connection_execute()
    after = now()
    return server - (before + after) / 2


def inspect_store(database_url: str, now: Callable[[], float] = time.time) -> StoreReport:
    """Reach the store at ``database_url`` and report on it (``now``: this machine's clock).

    A SQLite file that does not exist is reported, not created (the server creates it)."""
    try:
        parsed = make_url(database_url)
    except ArgumentError:
        return StoreReport("?", "?", error="GPUPOOL_DATABASE_URL is not a database URL")
    url = parsed.render_as_string(hide_password=True)
    dialect = parsed.get_backend_name()
    named = parsed.database if dialect == "sqlite" and parsed.database != ":memory:" else None
    file = Path(named) if named else None
    if file is not None and not file.exists():
        return StoreReport(url, dialect, error=f"no store at {file}", file=file)
    try:
        engine = make_engine(database_url)
    except ImportError as exc:  # the URL names a driver that is not installed
        hint = "; pip install 'gpupool[postgres]'" if dialect == "postgresql" else ""
        return StoreReport(url, dialect, error=f"{exc}{hint}")
    try:
        status = schema_status(engine)
        skew = None
        held = None
        if dialect == "postgresql":
            with engine.connect() as connection:
                # clock_timestamp(), not now(): now() is when the transaction began.
                query = text("SELECT EXTRACT(EPOCH FROM clock_timestamp())")
                skew = clock_skew(lambda: float(connection.execute(query).scalar_one()), now)
            if status.verdict is SchemaVerdict.CURRENT:  # the lease's row is there
                with Session(engine) as session:
                    held = lease.read(session)
        return StoreReport(url, dialect, schema=status, skew_s=skew, file=file, lease=held)
    except SQLAlchemyError as exc:
        return StoreReport(url, dialect, error=_reason(exc))
    finally:
        engine.dispose()
