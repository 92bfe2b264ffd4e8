"""Database URLs for store tests: SQLite always, PostgreSQL when it can be reached.

PostgreSQL comes from ``GPUPOOL_TEST_POSTGRES_URL`` or 127.0.0.1:5432 (trust auth, as on the
CI machine). Each test session gets its own database, dropped at the end.
"""

from __future__ import annotations

import os
import secrets
from collections.abc import Iterator
from contextlib import contextmanager

import pytest

ADMIN_URL = os.environ.get(
    "GPUPOOL_TEST_POSTGRES_URL", "postgresql://postgres@127.0.0.1:5432/postgres"
)
HOW_TO_GET = (
    "PostgreSQL is not reachable at 127.0.0.1:5432; start it "
    "(pg_ctlcluster --skip-systemctl-redirect <version> main start) "
    "or set GPUPOOL_TEST_POSTGRES_URL"
)


@pytest.fixture(scope="session")
def postgres_url() -> Iterator[str]:
    with scratch_database("gpupool_test") as url:
        yield url


@contextmanager
def scratch_database(prefix: str = "gpupool_scratch") -> Iterator[str]:
    """A PostgreSQL database of its own for one test (dropped after), for tests whose
    processes or rows must not meet those of other tests (e.g. the controller lease);
    skips with :data:`HOW_TO_GET` when PostgreSQL cannot be reached."""
    try:
        import psycopg
    except ImportError:
        pytest.skip("psycopg is not installed: pip install 'gpupool[postgres]'")
    name = f"{prefix}_{secrets.token_hex(4)}"
    try:
        with psycopg.connect(ADMIN_URL, autocommit=True, connect_timeout=3) as conn:
            conn.execute(f'CREATE DATABASE "{name}"')
    except psycopg.OperationalError:
        pytest.skip(HOW_TO_GET)
    base = ADMIN_URL.rsplit("/", 1)[0].replace("postgresql://", "postgresql+psycopg://", 1)
    try:
        yield f"{base}/{name}"
    finally:
        with psycopg.connect(ADMIN_URL, autocommit=True) as conn:
            conn.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')
