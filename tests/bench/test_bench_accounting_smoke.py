"""Smoke test of bench/accounting.py on a small store (no timing asserts)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

BENCH = Path(__file__).resolve().parents[2] / "bench"


def test_ledger_overhead_section_reports_its_keys() -> None:
    done = subprocess.run(
        [
            sys.executable,
            str(BENCH / "accounting.py"),
            "--sections",
            "ledger_overhead",
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


def test_summary_section_reports_its_keys() -> None:
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
