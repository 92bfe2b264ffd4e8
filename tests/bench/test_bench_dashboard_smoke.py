"""Smoke test of bench/dashboard.py on a small store (no timing asserts)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

BENCH = Path(__file__).resolve().parents[2] / "bench"


def test_the_jobs_list_bench_reports_each_case() -> None:
    done = subprocess.run(
        [
            sys.executable,
            str(BENCH / "dashboard.py"),
            "--jobs",
            "300",
            "--repeat",
            "2",
            "--pages",
            "2",
            "--json",
        ],
        capture_output=True,
        text=True,
        check=True,
        timeout=120,
    )
    result = json.loads(done.stdout)
    assert (result["jobs"], result["store"]) == (300, "sqlite")
    assert sorted(result["cases"]) == ["deep_page", "filtered", "first_page", "job", "overview"]
    assert "cursor=" in result["deep_path"]  # two pages were followed
    for case in result["cases"].values():
        assert 0 < case["p50_ms"] <= case["p95_ms"] <= case["max_ms"]
    assert isinstance(result["met"], bool)
