"""Smoke test of bench/controller.py on a small queue (no timing asserts)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

BENCH = Path(__file__).resolve().parents[2] / "bench"


def test_controller_bench_reports_its_keys() -> None:
    done = subprocess.run(
        [
            sys.executable,
            str(BENCH / "controller.py"),
            "--queued",
            "300",
            "--teams",
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
    assert (result["queued"], result["teams"]) == (300, 50)
    assert sorted(result["stores"]) == ["postgresql", "sqlite"]
    for store, measured in result["stores"].items():
        if "skipped" in measured:
            pytest.skip(f"{measured['skipped']}: start PostgreSQL on 127.0.0.1:5432")
        for key in ("first_schedule_ms", "schedule_ms", "cycle_ms"):
            assert measured[key] > 0, store
        assert measured["cycle_ms"] <= measured["schedule_ms"]
        assert isinstance(measured["met"], bool)
