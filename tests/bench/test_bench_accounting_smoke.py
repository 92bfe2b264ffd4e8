"""Smoke test of bench/accounting.py on a small store (no timing asserts)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

BENCH = Path(__file__).resolve().parents[2] / "bench"


def test_accounting_bench_reports_its_sections() -> None:
    done = subprocess.run(
        [
            sys.executable,
            str(BENCH / "accounting.py"),
            "--queued",
            "200",
            "--teams",
            "10",
            "--running",
            "50",
            "--repeat",
            "2",
            "--stores",
            "sqlite,postgresql",
            "--json",
        ],
        capture_output=True,
        text=True,
        check=True,
        timeout=120,
    )
    result = json.loads(done.stdout)
    section = result["sections"]["ledger_overhead"]
    assert (section["queued"], section["running"]) == (200, 50)
    assert sorted(section["stores"]) == ["postgresql", "sqlite"]
    for store, measured in section["stores"].items():
        if "skipped" in measured:
            pytest.skip(f"{measured['skipped']}: start PostgreSQL on 127.0.0.1:5432")
        for key in ("step_ms", "accruing_step_ms", "accrual_ms", "per_step_pct"):
            assert measured[key] > 0, store
        assert measured["per_step_pct"] < measured["worst_step_pct"]
        assert isinstance(measured["met"], bool)
