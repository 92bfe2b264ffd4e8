"""Smoke test of bench/accounting.py on a small ledger (no timing asserts)."""

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
            "--sections",
            "summary",
            "--summary-attempts",
            "2000",
            "--summary-teams",
            "20",
            "--summary-running",
            "10",
            "--summary-repeat",
            "1",
            "--stores",
            "sqlite,postgresql",
            "--json",
        ],
        capture_output=True,
        text=True,
        check=True,
        timeout=300,
    )
    result = json.loads(done.stdout)
    assert result["benchmark"] == "accounting" and result["cpus"] > 0
    section = result["sections"]["summary"]
    assert (section["attempts"], section["teams"]) == (2000, 20)
    assert section["targets"]["summary_ms"] > 0
    gpu_hours = set()
    for store, measured in section["stores"].items():
        if "skipped" in measured:
            pytest.skip(f"{measured['skipped']}: start PostgreSQL on 127.0.0.1:5432")
        assert measured["summary_ms"] > 0 and measured["fill_s"] >= 0, store
        assert measured["rows"] >= 20  # every team has a row
        assert isinstance(measured["met"], bool)
        gpu_hours.add(measured["gpu_hours"])
    assert len(gpu_hours) == 1, "the stores disagree on the month's GPU-hours"
