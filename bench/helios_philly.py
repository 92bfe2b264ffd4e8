"""The Helios per-VC FIFO setting on Philly, replayed by the simulator and compared with the
study's published averages.

Setting (Hu et al., SC'21, artifact ``framework/QSSF Service``): Philly jobs submitted
2017-10-01 .. 2017-11-30 of the 11 VCs in ``philly_vc.csv``; each VC its own cluster of 8-GPU
nodes (here: one pool per VC, dedicated to it, via ``--dedicated-pools``); FIFO with
head-of-line blocking, no borrowing, no preemption (here: the ``hard-quota-fifo`` policy).

The input differs: the study used the artifact's own ``philly_trace.csv``; this replays the
Pollux ``philly.csv`` (durations summed over a job's attempts; jobs without attempts dropped),
so expect the gaps the README discusses, not a match. Prints a table (or ``--json`` one
object): per VC our average JCT and queueing delay next to the published FIFO figures.

    python bench/helios_philly.py [--json]
"""

from __future__ import annotations

import argparse
import csv
import json
import sys
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from gpupool.sim.run import Request, prepare, simulate_all

DATA = Path(__file__).resolve().parent.parent / "examples" / "traces" / "philly"


def published(name: str) -> dict[str, float]:
    with (DATA / name).open(newline="") as handle:
        return {row["vc"]: float(row["fifo_consolidate"]) for row in csv.DictReader(handle)}


def run() -> dict[str, Any]:
    request = Request(
        trace=DATA / "philly.csv",
        trace_format="philly",
        philly_vcs=DATA / "philly_vc.csv",
        policies=["hard-quota-fifo"],
        since=datetime(2017, 10, 1, tzinfo=UTC),
        until=datetime(2017, 12, 1, tzinfo=UTC),
        dedicated_pools=True,
    )
    prepared = prepare(request)
    metrics, _ = simulate_all(prepared)
    ours = metrics["hard-quota-fifo"]
    jct, queue = (
        published("reference_results_philly_avg_jct_s.csv"),
        published("reference_results_philly_avg_queue_s.csv"),
    )
    rows = {}
    for vc in sorted(jct):
        mine = ours if vc == "all" else ours["per_team"].get(vc, {})
        rows[vc] = {
            "jobs": mine.get("completed", 0),
            "avg_jct_s": mine.get("avg_jct_s", 0.0),
            "helios_avg_jct_s": jct[vc],
            "avg_queue_s": mine.get("avg_queue_s", 0.0),
            "helios_avg_queue_s": queue[vc],
        }
    return {
        "setting": "Philly 2017-10-01..2017-11-30, per-VC FIFO, 11 VCs, dedicated 8-GPU nodes",
        "unschedulable": ours["unschedulable"],
        "utilization": ours["utilization"],
        "wall_s": ours["wall_s"],
        "per_vc": rows,
    }


def table(result: dict[str, Any]) -> str:
    lines = [
        result["setting"],
        f"{'vc':8} {'jobs':>7} {'JCT h':>9} {'Helios':>9} {'queue h':>9} {'Helios':>9}",
    ]
    for vc, r in result["per_vc"].items():
        lines.append(
            f"{vc:8} {r['jobs']:>7,} {r['avg_jct_s'] / 3600:>9.2f} "
            f"{r['helios_avg_jct_s'] / 3600:>9.2f} {r['avg_queue_s'] / 3600:>9.2f} "
            f"{r['helios_avg_queue_s'] / 3600:>9.2f}"
        )
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> dict[str, Any]:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--json", action="store_true", help="print one JSON object")
    args = parser.parse_args(argv)
    result = run()
    print(json.dumps(result) if args.json else table(result), file=sys.stdout)
    return result


if __name__ == "__main__":
    main()
