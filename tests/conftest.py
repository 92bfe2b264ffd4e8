"""Shared fixtures and the CI rule that no test may skip (GPUPOOL_REQUIRE_ALL=1)."""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path

import pytest

from support.databases import postgres_url  # noqa: F401  (a session fixture for every test)
from support.stores import store_engine  # noqa: F401  (a store on SQLite and PostgreSQL)

ROOT = Path(__file__).resolve().parent.parent
DEMO = ROOT / "examples" / "demo.yaml"


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item: pytest.Item, call: pytest.CallInfo[None]) -> Iterator[None]:
    outcome = yield
    report = outcome.get_result()  # type: ignore[attr-defined]
    if os.environ.get("GPUPOOL_REQUIRE_ALL") and report.skipped and not hasattr(report, "wasxfail"):
        report.outcome = "failed"
        report.longrepr = f"skipped, but GPUPOOL_REQUIRE_ALL=1 forbids skips: {report.longrepr}"


@pytest.fixture
def demo_path() -> Path:
    return DEMO


@pytest.fixture
def open_dir() -> Iterator[Path]:
    """A directory every uid may use: jobs run as their user's uid when tests run as root,
    and pytest's own tmp_path is private to the test user."""
    import shutil
    import tempfile

    path = Path(tempfile.mkdtemp(prefix="gpupool-test-"))
    path.chmod(0o777)
    try:
        yield path
    finally:
        shutil.rmtree(path, ignore_errors=True)
