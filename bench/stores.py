"""The stores a benchmark runs on: SQLite in a temporary directory, or PostgreSQL in a scratch
database of its own (dropped after), found at ``GPUPOOL_BENCH_POSTGRES_URL`` or 127.0.0.1:5432."""

from __future__ import annotations

import contextlib
import os
import secrets
from collections.abc import Iterator

POSTGRES_ADMIN_URL = os.environ.get(
    "GPUPOOL_BENCH_POSTGRES_URL", "postgresql://postgres@127.0.0.1:5432/postgres"
)


@contextlib.contextmanager
def postgres_database() -> Iterator[str | None]:
    """A scratch PostgreSQL database for one run (dropped after); None when unreachable."""
    try:
        import psycopg
    except ImportError:
        yield None
        return
    name = f"gpupool_bench_{secrets.token_hex(4)}"
    try:
        with psycopg.connect(POSTGRES_ADMIN_URL, autocommit=True, connect_timeout=3) as conn:
            conn.execute(f'CREATE DATABASE "{name}"')
    except psycopg.OperationalError:
        yield None
        return
    base = POSTGRES_ADMIN_URL.rsplit("/", 1)[0]
    try:
        yield f"{base.replace('postgresql://', 'postgresql+psycopg://', 1)}/{name}"
    finally:
        with psycopg.connect(POSTGRES_ADMIN_URL, autocommit=True) as conn:
            conn.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')
