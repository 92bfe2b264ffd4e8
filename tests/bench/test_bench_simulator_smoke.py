"""Smoke test of bench/simulator.py, bench/sharing_incentive.py and bench/helios_philly.py on
small inputs (no timing asserts: benchmarks report speed, tests only check they run and say
what they should)."""

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
        assert numbers["cpu_s"] > 0
    # The replay-time target is judged on the whole trace at scale 0.18 only.
    assert result["target"]["met"] is None and "120 s" in result["target"]["target"]


def test_sharing_incentive_bench_writes_the_table() -> None:
    done = subprocess.run(
        [sys.executable, str(BENCH / "sharing_incentive.py"), "--scale", "0.18", "--limit", "300"],
        capture_output=True,
        text=True,
        check=True,
        timeout=120,
    )
    assert "### capacity scale 0.18 (300 jobs)" in done.stdout
    assert "| 6214e9 | 96 |" in done.stdout  # the busiest VC, with its quota at this scale
    assert "utilization_vs_fifo" in done.stdout
