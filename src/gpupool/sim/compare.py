"""Policies against the two baselines: the sharing incentive per team and the run's targets.

The baselines are the policies of :mod:`gpupool.sim.cluster` that sharing must beat:
``hard-quota-fifo`` (each team alone behind its own quota) and ``fifo`` (one global queue).

Sharing incentive (Q9): a team with a quota is no worse off sharing than behind its own hard
quota. Per team, its average and p90 queueing delay under a policy are compared with those under
``hard-quota-fifo``, over the team's jobs that completed under both (a job larger than the
team's quota never runs under hard quotas and is left out of both sides, so each side averages
the same jobs). Delays are compared at a resolution of a minute (:data:`RESOLUTION_S`: a wait
shorter than that counts as one minute on both sides), so that a team that hardly waits either
way (a tick's 50 ms against nothing) gets a ratio near 1, not an infinite one. A ratio above 1
flags the team; the target allows 1.1 times the hard-quota average plus an hour
(:data:`SLACK_FACTOR`, :data:`SLACK_S`) before it counts as a miss.

Targets of a run (every policy but the baselines), each with its value, what it is compared
with and ``met`` (None when the baseline did not run in the same invocation, with a note):

* ``teams_sharing_incentive``: no team with a quota misses the target above;
* ``p99_queue_vs_fifo``: p99 queueing delay at most global FIFO's;
* ``jain_vs_hard_quota_fifo``, ``jain_vs_fifo``: Jain's index at least each baseline's;
* ``utilization_vs_fifo``: utilization at least 95 % of FIFO's (:data:`UTILIZATION_SHARE`).

Everything here is arithmetic on finished outcomes and their metrics; nothing is simulated.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Mapping, Sequence
from typing import Any

from gpupool.sim.engine import JobRecord, Outcome
from gpupool.sim.metrics import percentile, queue_delay

HARD_QUOTA = "hard-quota-fifo"
GLOBAL_FIFO = "fifo"
BASELINES = (HARD_QUOTA, GLOBAL_FIFO)
RESOLUTION_S = 60.0
SLACK_FACTOR = 1.1
SLACK_S = 3600.0
UTILIZATION_SHARE = 0.95


def compare(metrics: Mapping[str, dict[str, Any]], outcomes: Sequence[Outcome]) -> None:
    """Add ``sharing_incentive`` to every policy's metrics but hard-quota-fifo's, and
    ``targets`` to every policy's but the baselines'."""
    by_policy = {outcome.policy: outcome for outcome in outcomes}
    baseline = by_policy.get(HARD_QUOTA)
    for policy, block in metrics.items():
        if policy == HARD_QUOTA:
            continue
        block["sharing_incentive"] = sharing_incentive(by_policy[policy], baseline)
        if policy not in BASELINES:
            block["targets"] = targets(block, metrics)


def sharing_incentive(outcome: Outcome, baseline: Outcome | None) -> dict[str, Any]:
    if baseline is None:
        return {
            "baseline": HARD_QUOTA,
            "measured": False,
            "note": f"{HARD_QUOTA} did not run in this invocation: nothing to compare with",
        }
    mine, theirs = _completed(outcome.jobs), _completed(baseline.jobs)
    teams: dict[str, Any] = {}
    for team in sorted(outcome.nominal):
        if outcome.nominal[team] <= 0:
            continue  # no quota, no guarantee to compare with
        both = sorted(mine.get(team, {}).keys() & theirs.get(team, {}).keys())
        if both:
            teams[team] = team_delays(
                outcome.nominal[team],
                [queue_delay(mine[team][j]) for j in both],
                [queue_delay(theirs[team][j]) for j in both],
            )
    return {
        "baseline": HARD_QUOTA,
        "measured": True,
        "teams": teams,
        "teams_above_1": [t for t, d in teams.items() if d["above_1"]],
        "teams_missing_target": [t for t, d in teams.items() if not d["within_target"]],
    }


def team_delays(nominal: int, delays: list[float], baseline: list[float]) -> dict[str, Any]:
    """One team's delays under a policy and under hard quotas, over the same jobs."""
    delays, baseline = sorted(delays), sorted(baseline)
    avg, base_avg = sum(delays) / len(delays), sum(baseline) / len(baseline)
    p90, base_p90 = percentile(delays, 0.9), percentile(baseline, 0.9)
    return {
        "nominal_gpus": nominal,
        "jobs": len(delays),
        "avg_queue_s": avg,
        "baseline_avg_queue_s": base_avg,
        "avg_ratio": ratio(avg, base_avg),
        "p90_queue_s": p90,
        "baseline_p90_queue_s": base_p90,
        "p90_ratio": ratio(p90, base_p90),
        "above_1": ratio(avg, base_avg) > 1 or ratio(p90, base_p90) > 1,
        "limit_avg_queue_s": limit(base_avg),
        "within_target": avg <= limit(base_avg),
    }


def ratio(value: float, baseline: float) -> float:
    """``value / baseline``, each at least :data:`RESOLUTION_S`."""
    return max(value, RESOLUTION_S) / max(baseline, RESOLUTION_S)


def limit(baseline_avg_s: float) -> float:
    return SLACK_FACTOR * baseline_avg_s + SLACK_S


def targets(block: Mapping[str, Any], metrics: Mapping[str, Mapping[str, Any]]) -> dict[str, Any]:
    hard, fifo = metrics.get(HARD_QUOTA), metrics.get(GLOBAL_FIFO)
    sharing = block["sharing_incentive"]
    out: dict[str, Any] = {}
    if sharing["measured"]:
        missing = sharing["teams_missing_target"]
        out["teams_sharing_incentive"] = {
            "target": f"every team with a quota: average queueing delay <= {SLACK_FACTOR:g} x "
            f"its {HARD_QUOTA} average + {SLACK_S / 3600:g} h",
            "value": len(missing),
            "teams": missing,
            "met": not missing,
        }
    else:
        out["teams_sharing_incentive"] = _not_run(HARD_QUOTA, "every team's delay")
    out["p99_queue_vs_fifo"] = _at_most(
        block["p99_queue_s"], fifo, "p99_queue_s", 1.0, f"p99 queueing delay <= {GLOBAL_FIFO}'s"
    )
    out["jain_vs_hard_quota_fifo"] = _at_least(
        block["jain_fairness"], hard, HARD_QUOTA, "jain_fairness", 1.0, "Jain's index"
    )
    out["jain_vs_fifo"] = _at_least(
        block["jain_fairness"], fifo, GLOBAL_FIFO, "jain_fairness", 1.0, "Jain's index"
    )
    out["utilization_vs_fifo"] = _at_least(
        block["utilization"], fifo, GLOBAL_FIFO, "utilization", UTILIZATION_SHARE, "utilization"
    )
    return out


def _at_most(
    value: float, base: Mapping[str, Any] | None, key: str, share: float, target: str
) -> dict[str, Any]:
    if base is None:
        return _not_run(GLOBAL_FIFO, target)
    bound = share * base[key]
    return {"target": target, "value": value, "baseline": base[key], "met": value <= bound}


def _at_least(
    value: float,
    base: Mapping[str, Any] | None,
    name: str,
    key: str,
    share: float,
    what: str,
) -> dict[str, Any]:
    scaled = f"{share:.0%} of " if share != 1 else ""
    target = f"{what} >= {scaled}{name}'s"
    if base is None:
        return _not_run(name, target)
    bound = share * base[key]
    return {"target": target, "value": value, "baseline": base[key], "met": value >= bound}


def _not_run(baseline: str, target: str) -> dict[str, Any]:
    return {
        "target": target,
        "value": None,
        "baseline": None,
        "met": None,
        "note": f"{baseline} did not run in this invocation",
    }


def _completed(records: Sequence[JobRecord]) -> dict[str, dict[str, JobRecord]]:
    """Completed jobs by trace team and id."""
    out: dict[str, dict[str, JobRecord]] = defaultdict(dict)
    for r in records:
        if r.end is not None:
            out[r.trace.team][r.trace.job_id] = r
    return out
