"""Simulator speed: the whole Philly trace under each policy, wall time and events per second.

Runs ``gpupool simulate``'s engine in this process (no output files) on the bundled trace
(``examples/traces/philly``): 82,247 jobs, one team per VC, 8-GPU nodes. ``--capacity-scale``
shrinks the cluster and the quotas (1 = the VC sizes, offered load 13 %; 0.18 = 72 %).
Events are arrivals, ends and scheduling cycles. Prints a table or, with ``--json``, one
object: per policy ``wall_s``, ``events``, ``events_per_s``, ``cycles``, ``jobs``.

    python bench/simulator.py [--capacity-scale F] [--limit N] [--json]
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path
from typing import Any

from gpupool.sim.cluster import POLICIES
from gpupool.sim.run import Request, prepare, simulate_all

DATA = Path(__file__).resolve().parent.parent / "examples" / "traces" / "philly"


def run(scale: float, limit: int | None, policies: list[str]) -> dict[str, Any]:
    prepared = prepare(
        Request(
            trace=DATA / "philly.csv",
            trace_format="philly",
            philly_vcs=DATA / "philly_vc.csv",
            capacity_scale=scale,
            policies=policies,
            limit=limit,
        )
    )
    metrics, _ = simulate_all(prepared)
    return {
        "capacity_scale": scale,
        "jobs": len(prepared.jobs),
        "policies": {
            name: {k: m[k] for k in ("wall_s", "events", "events_per_s", "cycles", "utilization")}
            for name, m in metrics.items()
        },
    }


def main(argv: list[str] | None = None) -> dict[str, Any]:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--capacity-scale", type=float, default=1.0)
    parser.add_argument("--limit", type=int, default=None, help="only the first N jobs")
    parser.add_argument("--policy", action="append", choices=POLICIES)
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args(argv)
    result = run(args.capacity_scale, args.limit, args.policy or list(POLICIES))
    if args.json:
        print(json.dumps(result))
    else:
        print(f"{result['jobs']:,} jobs, capacity scale {args.capacity_scale:g}")
        for name, m in result["policies"].items():
            print(
                f"  {name:16} {m['wall_s']:7.1f} s  {m['events']:>9,} events  "
                f"{m['events_per_s']:>9,.0f}/s  {m['cycles']:>8,} cycles"
            )
    return result


if __name__ == "__main__":
    main()
