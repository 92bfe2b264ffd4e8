"""Smoke test of bench/simulator.py and bench/helios_philly.py on small inputs (no timing
asserts: benchmarks report speed, tests only check they run and say what they should)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

BENCH = Path(__file__).resolve().parents[2] / "bench"


def test_simulator_bench_reports_every_policy() -> None:
    done = subprocess.run(
        [sys.executable, str(BENCH / "simulator.py"), "--limit", "400", "--json"],
        capture_output=True,
        text=True,
        check=True,
        timeout=120,
    )
    result = json.loads(done.stdout)
    assert result["jobs"] == 400
    assert set(result["policies"]) == {"hard-quota-fifo", "fifo", "gpupool"}
    for numbers in result["policies"].values():
        assert numbers["events"] > 400 and numbers["wall_s"] > 0 and numbers["cycles"] > 0
