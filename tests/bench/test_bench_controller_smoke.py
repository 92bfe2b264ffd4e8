"""Smoke test of bench/controller.py on a small queue (no timing asserts)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

BENCH = Path(__file__).resolve().parents[2] / "bench"


def test_controller_bench_reports_its_keys() -> None:
    done = subprocess.run(
        [
            sys.executable,
            str(BENCH / "controller.py"),
            "--queued",
            "300",
            "--repeat",
            "2",
            "--json",
        ],
        capture_output=True,
        text=True,
        check=True,
        timeout=120,
    )
    result = json.loads(done.stdout)
    assert (result["queued"], result["teams"], result["store"]) == (300, 50, "sqlite")
    for key in ("first_schedule_ms", "schedule_ms", "cycle_ms"):
        assert result[key] > 0
    assert result["cycle_ms"] <= result["schedule_ms"]
