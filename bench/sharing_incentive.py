"""The sharing incentive on the bundled Philly trace at several loads: per capacity scale, the
three policies, each team's queueing delay under gpupool against hard quotas, and the targets.

Runs ``gpupool simulate``'s engine in this process (no report files) on
``examples/traces/philly`` at each ``--capacity-scale`` (default 0.15, 0.18 and 0.2: offered
load 86 %, 72 % and 65 %) and prints a Markdown table per scale, or with ``--json`` one object:
per scale, gpupool's ``sharing_incentive`` and ``targets`` blocks of ``metrics.json`` (see
``gpupool.sim.compare``) and each policy's wall time.

    python bench/sharing_incentive.py [--scale F ...] [--limit N] [--workers N] [--json]

A whole replay of the three policies at one scale takes minutes; ``--limit N`` replays the
first N jobs only (say so when quoting its numbers).
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path
from typing import Any

from gpupool.sim.cluster import POLICIES
from gpupool.sim.run import Request, prepare, simulate_all

DATA = Path(__file__).resolve().parent.parent / "examples" / "traces" / "philly"
SCALES = (0.15, 0.18, 0.2)
POLICY = "gpupool"


def run(scale: float, limit: int | None, workers: int) -> dict[str, Any]:
    prepared = prepare(
        Request(
            trace=DATA / "philly.csv",
            trace_format="philly",
            philly_vcs=DATA / "philly_vc.csv",
            capacity_scale=scale,
            policies=list(POLICIES),
            limit=limit,
        )
    )
    metrics, _ = simulate_all(prepared, workers=workers)
    ours = metrics[POLICY]
    return {
        "capacity_scale": scale,
        "jobs": len(prepared.jobs),
        "sharing_incentive": ours["sharing_incentive"],
        "targets": ours["targets"],
        "policies": {
            name: {
                k: m[k]
                for k in (
                    "avg_queue_s",
                    "p99_queue_s",
                    "jain_fairness",
                    "utilization",
                    "preemptions",
                    "lost_gpu_hours",
                    "wall_s",
                )
            }
            for name, m in metrics.items()
        },
    }


def table(result: dict[str, Any]) -> str:
    """One scale as Markdown: the teams, then the targets."""
    sharing = result["sharing_incentive"]
    lines = [
        f"### capacity scale {result['capacity_scale']:g} ({result['jobs']:,} jobs)",
        "",
        "| team | nominal GPUs | jobs | avg queue h (hard quota) | avg ratio "
        "| p90 queue h (hard quota) | p90 ratio | flag |",
        "|---|---:|---:|---:|---:|---:|---:|---|",
    ]
    for team, d in sharing.get("teams", {}).items():
        flag = ("above 1" if d["above_1"] else "") + ("; misses target" * (not d["within_target"]))
        lines.append(
            f"| {team} | {d['nominal_gpus']} | {d['jobs']:,} | {d['avg_queue_s'] / 3600:.2f} "
            f"({d['baseline_avg_queue_s'] / 3600:.2f}) | {_ratio(d['avg_ratio'])} "
            f"| {d['p90_queue_s'] / 3600:.2f} ({d['baseline_p90_queue_s'] / 3600:.2f}) "
            f"| {_ratio(d['p90_ratio'])} | {flag} |"
        )
    lines += ["", "| target | value | baseline | met |", "|---|---:|---:|---|"]
    for name, t in result["targets"].items():
        lines.append(
            f"| {name}: {t['target']} | {_value(t['value'])} | {_value(t.get('baseline'))} "
            f"| {t['met']} |"
        )
    return "\n".join(lines)


def _ratio(value: float | None) -> str:
    return "inf" if value is None else f"{value:.2f}"


def _value(value: Any) -> str:
    if value is None:
        return "-"
    return f"{value:.3f}" if isinstance(value, float) else str(value)


def main(argv: list[str] | None = None) -> list[dict[str, Any]]:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--scale", type=float, action="append", help="capacity scale (repeat)")
    parser.add_argument("--limit", type=int, default=None, help="only the first N jobs")
    parser.add_argument("--workers", type=int, default=1, help="policies simulated at once")
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args(argv)
    results = [run(scale, args.limit, args.workers) for scale in args.scale or SCALES]
    if args.json:
        print(json.dumps(results))
    else:
        print("\n\n".join(table(r) for r in results))
    return results


if __name__ == "__main__":
    main()
