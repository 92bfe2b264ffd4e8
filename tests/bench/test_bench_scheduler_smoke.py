"""Smoke test of bench/scheduler.py: the S size runs and reports every key (no timing asserts)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

SCRIPT = Path(__file__).resolve().parents[2] / "bench" / "scheduler.py"

POSITIVE = (
    "nodes",
    "teams",
    "pending",
    "running",
    "gpus",
    "cpus",
    "snapshot_build_ms",
    "no_admission_cycle_ms",
    "admission_cycle_ms",
    "admitted",
    "admissions_per_s",
    "preemption_decision_ms",
    "preemption_cycle_full_ms",
    "peak_rss_mb",
)
COUNTS = ("preemptions", "preemptions_full", "no_admission_admitted", "admitted_full")


def test_size_s_reports_every_key() -> None:
    done = subprocess.run(
        [sys.executable, str(SCRIPT), "--size", "S", "--json", "--repeat", "1", "--seed", "3"],
        capture_output=True,
        text=True,
        timeout=60,
        check=True,
    )
    result = json.loads(done.stdout)
    assert result["size"] == "S"
    assert (result["nodes"], result["teams"], result["pending"]) == (50, 10, 1000)
    assert result["gpus"] == 50 * 8
    assert isinstance(result["python"], str) and result["python"]
    for key in POSITIVE:
        assert result[key] > 0, key
    for key in COUNTS:
        assert isinstance(result[key], int) and result[key] >= 0, key
    # The full cluster has no free device, so nothing can be admitted there.
    assert result["no_admission_admitted"] == 0
    assert result["preemptor"]["gpus"] in (1, 2, 4, 8)
