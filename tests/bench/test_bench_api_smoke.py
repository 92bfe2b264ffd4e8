"""Smoke test of bench/api.py's job-array case on SQLite (no timing asserts)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

BENCH = Path(__file__).resolve().parents[2] / "bench"


def test_api_bench_arrays_case_reports_its_keys() -> None:
    done = subprocess.run(
        [sys.executable, str(BENCH / "api.py"), "--cases", "arrays", "--stores", "sqlite",
         "--arrays", "2", "--array-size", "50", "--json"],
        capture_output=True,
        text=True,
        check=True,
        timeout=120,
    )  # fmt: skip
    result = json.loads(done.stdout)
    measured = result["arrays"]["sqlite"]
    assert (measured["arrays"], measured["tasks_per_array"], measured["jobs"]) == (2, 50, 100)
    assert measured["jobs_per_s"] > 0 and measured["p50_array_ms"] > 0
    assert "submit" not in result  # the other cases were not run


def test_api_bench_every_case_reports_its_keys_per_store() -> None:
    done = subprocess.run(
        [sys.executable, str(BENCH / "api.py"), "--stores", "sqlite", "--arrays", "1",
         "--array-size", "10", "--queued", "2", "--probes", "2", "--burst", "3",
         "--drain", "8", "--drain-seconds", "0.2", "--submits", "8", "--clients", "2", "--json"],
        capture_output=True,
        text=True,
        check=True,
        timeout=180,
    )  # fmt: skip
    result = json.loads(done.stdout)
    assert result["stores"] == ["sqlite"]
    assert result["submit"]["sqlite"]["jobs"] == 8
    assert result["submit_to_running"]["sqlite"]["jobs"] == 2
    assert result["burst_submit_to_running"]["sqlite"]["jobs"] == 3
    drain = result["drain"]["sqlite"]
    assert (drain["jobs"], drain["gpus"], drain["ideal_s"]) == (8, 8, 0.2)
    assert 0 < drain["efficiency"] <= 1  # no task can end before it has run its 0.2 s
