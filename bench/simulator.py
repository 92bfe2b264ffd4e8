"""Simulator speed: the whole Philly trace under each policy, wall time and events per second.

Runs ``gpupool simulate``'s engine in this process (no output files) on the bundled trace
(``examples/traces/philly``): 82,247 jobs, one team per VC, 8-GPU nodes. ``--capacity-scale``
shrinks the cluster and the quotas (1 = the VC sizes, offered load 13 %; 0.18 = 72 %).
Events are arrivals, ends and scheduling cycles. Prints a table or, with ``--json``, one
object: per policy ``wall_s``, ``cpu_s`` (this process's CPU time: what a busy machine does
not inflate), ``events``, ``events_per_s``, ``cycles``, ``jobs``; and ``target``: the whole
trace under gpupool at capacity scale 0.18 in at most 120 s on a 2-core machine, with the
measured ``value`` and ``met`` (null for any other run: only that case has the target).

    python bench/simulator.py [--capacity-scale F] [--limit N] [--policy P] [--json]
    python bench/simulator.py --capacity-scale 0.18 --policy gpupool --json   # the target
"""

from __future__ import annotations

import argparse
import json
import time
from dataclasses import replace
from pathlib import Path
from typing import Any

from gpupool.sim.cluster import POLICIES
from gpupool.sim.run import Request, prepare, simulate_all

DATA = Path(__file__).resolve().parent.parent / "examples" / "traces" / "philly"
TARGET_POLICY, TARGET_SCALE, TARGET_WALL_S = "gpupool", 0.18, 120.0


def run(scale: float, limit: int | None, policies: list[str]) -> dict[str, Any]:
    prepared = prepare(
        Request(
            trace=DATA / "philly.csv",
            trace_format="philly",
            philly_vcs=DATA / "philly_vc.csv",
            capacity_scale=scale,
            policies=policies,
            limit=limit,
            baselines=False,  # measure what was asked for
        )
    )
    result: dict[str, Any] = {"capacity_scale": scale, "jobs": len(prepared.jobs), "policies": {}}
    for setup in prepared.setups:  # one at a time, each with its own CPU time
        one = replace(prepared, setups=[setup])
        cpu = time.process_time()
        metrics, _ = simulate_all(one)
        m = metrics[setup.name]
        keys = ("wall_s", "events", "events_per_s", "cycles", "utilization")
        result["policies"][setup.name] = {
            **{k: m[k] for k in keys},
            "cpu_s": time.process_time() - cpu,
        }
    result["target"] = target(result, limit)
    return result


def target(result: dict[str, Any], limit: int | None) -> dict[str, Any]:
    """The replay-time target, judged only on the run it is about (the whole trace)."""
    ran = result["policies"].get(TARGET_POLICY)
    applies = ran is not None and result["capacity_scale"] == TARGET_SCALE
    applies = applies and limit is None
    return {
        "target": "whole Philly trace under gpupool at --capacity-scale 0.18 in <= 120 s (2 cores)",
        "value_wall_s": ran["wall_s"] if applies and ran else None,
        "value_cpu_s": ran["cpu_s"] if applies and ran else None,
        "met": ran["wall_s"] <= TARGET_WALL_S if applies and ran else None,
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
                f"  {name:16} {m['wall_s']:7.1f} s  (cpu {m['cpu_s']:.1f} s)  "
                f"{m['events']:>9,} events  {m['events_per_s']:>9,.0f}/s  {m['cycles']:>8,} cycles"
            )
        goal = result["target"]
        if goal["met"] is not None:
            print(f"  target: {goal['target']}: {'met' if goal['met'] else 'NOT met'}")
    return result


if __name__ == "__main__":
    main()
