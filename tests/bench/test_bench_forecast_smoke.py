"""Smoke test of bench/forecast.py: the S size runs and reports every key (no timing asserts)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

SCRIPT = Path(__file__).resolve().parents[2] / "bench" / "forecast.py"
TIMES = ("history_build_ms", "head_forecast_ms", "deep_forecast_ms", "cached_why_ms")


def test_size_s_reports_every_key() -> None:
    args = ["--size", "S", "--json", "--repeat", "1", "--max-cycles", "20", "--budget-s", "0"]
    done = subprocess.run(
        [sys.executable, str(SCRIPT), *args],
        capture_output=True,
        text=True,
        timeout=120,
        check=True,
    )
    result = json.loads(done.stdout)
    assert (result["size"], result["nodes"], result["pending"]) == ("S", 50, 1000)
    for key in TIMES:
        assert result[key] > 0, key
    assert 1 <= result["head_cycles"] <= 20 and 1 <= result["deep_cycles"] <= 20
    assert result["head_start_in_s"] is not None  # the head of a queue starts within 20 cycles
    assert isinstance(result["deep_started"], bool)
    assert result["history_jobs"] == 10 * 5 * 5 * 5  # teams x gpu types x sizes x samples
