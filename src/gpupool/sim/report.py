"""What ``gpupool simulate --out DIR`` writes: ``metrics.json``, ``jobs.csv``, ``report.html``.

The report is one self-contained HTML file (plots inlined as SVG, no scripts, nothing
fetched), so it opens from disk and can be attached to a ticket. Plots need matplotlib
(``pip install 'gpupool[sim]'``); without it the report has the tables only and says so.
"""

from __future__ import annotations

import csv
import html
import io
import json
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from gpupool.sim.engine import Outcome
from gpupool.sim.metrics import utilization_series

CDF_POINTS = 1000
TABLE_KEYS = (
    ("jobs", "jobs", "{:,.0f}"),
    ("completed", "completed", "{:,.0f}"),
    ("unschedulable", "unschedulable", "{:,.0f}"),
    ("avg_jct_s", "avg JCT (h)", "hours"),
    ("p50_jct_s", "p50 JCT (h)", "hours"),
    ("p99_jct_s", "p99 JCT (h)", "hours"),
    ("avg_queue_s", "avg queue (h)", "hours"),
    ("p50_queue_s", "p50 queue (s)", "{:,.0f}"),
    ("p99_queue_s", "p99 queue (h)", "hours"),
    ("utilization", "utilization", "{:.1%}"),
    ("makespan_s", "makespan (days)", "days"),
    ("preemptions", "preemptions", "{:,.0f}"),
    ("preemptions_per_job.at_least_1", "jobs preempted >= 1", "{:,.0f}"),
    ("preemptions_per_job.at_least_3", "jobs preempted >= 3", "{:,.0f}"),
    ("preemptions_per_job.mean", "preemptions/job mean", "{:.3f}"),
    ("preemptions_per_job.p99", "preemptions/job p99", "{:.1f}"),
    ("preemptions_per_job.max", "preemptions/job max", "{:,.0f}"),
    ("evictions", "spot evictions", "{:,.0f}"),
    ("lost_gpu_hours", "lost GPU-h", "{:,.0f}"),
    ("borrowed_gpu_hours", "borrowed GPU-h", "{:,.0f}"),
    ("cost", "cost (teams' use)", "{:,.0f}"),
    ("idle_gpu_hours", "idle GPU-h", "{:,.0f}"),
    ("idle_cost", "idle cost", "{:,.0f}"),
    ("node_hours", "node-hours", "{:,.0f}"),
    ("capacity_cost", "nodes' cost", "{:,.0f}"),
    ("quota_violation_s", "quota violation (h)", "hours"),
    ("jain_fairness", "Jain fairness", "{:.3f}"),
    ("forecast.median_abs_error_s", "start forecast error p50 (h)", "hours"),
    ("forecast.p90_abs_error_s", "start forecast error p90 (h)", "hours"),
    ("forecast.waited_median_abs_error_s", "  of jobs that waited: p50 (h)", "hours"),
    ("forecast.waited_p90_abs_error_s", "  of jobs that waited: p90 (h)", "hours"),
    ("forecast.within_range", "starts within forecast range", "{:.0%}"),
    ("wall_s", "wall (s)", "{:.1f}"),
    ("events_per_s", "events/s", "{:,.0f}"),
)


def fmt(value: Any, how: str) -> str:
    if value is None:
        return "-"
    if how == "hours":
        return f"{value / 3600:,.2f}"
    if how == "days":
        return f"{value / 86400:,.1f}"
    return how.format(value)


def table_rows(metrics: Mapping[str, Mapping[str, Any]]) -> list[list[str]]:
    """The summary table: one row per metric, one column per policy."""
    return [
        [label, *(fmt(_get(metrics[p], key), how) for p in metrics)]
        for key, label, how in TABLE_KEYS
        # rows of optional blocks (forecast: only with --forecast-sample) when some policy has it
        if "." not in key
        or key.startswith("preemptions_per_job.")
        or any(_get(metrics[p], key) is not None for p in metrics)
    ]


def _get(block: Mapping[str, Any], dotted: str) -> Any:
    value: Any = block
    for part in dotted.split("."):
        value = value.get(part) if isinstance(value, Mapping) else None
    return value


SHARING_HEAD = ["policy", "team", "avg queue h (hard quota)", "avg ratio", "p90 (hard quota)",
                "p90 ratio", "flag"]  # fmt: skip
TARGETS_HEAD = ["policy", "target", "value", "baseline", "met"]


def sharing_rows(metrics: Mapping[str, Mapping[str, Any]]) -> list[list[str]]:
    """Per policy compared with hard-quota-fifo and team with a quota: its average and p90
    queueing delay (hard quota's in brackets), their ratios and whether it is worse off; a
    policy that could not be compared gets one row saying why."""
    rows = []
    for policy, block in metrics.items():
        sharing = block.get("sharing_incentive")
        if sharing is None:
            continue
        if not sharing["measured"]:
            rows.append([policy, "-", sharing["note"], "", "", "", ""])
            continue
        for team, d in sharing["teams"].items():
            flags = [
                *(["above 1"] if d["above_1"] else []),
                *([] if d["within_target"] else ["misses 1.1x + 1 h"]),
            ]
            rows.append(
                [
                    policy,
                    team,
                    f"{d['avg_queue_s'] / 3600:,.2f} ({d['baseline_avg_queue_s'] / 3600:,.2f})",
                    _ratio(d["avg_ratio"]),
                    f"{d['p90_queue_s'] / 3600:,.2f} ({d['baseline_p90_queue_s'] / 3600:,.2f})",
                    _ratio(d["p90_ratio"]),
                    ", ".join(flags),
                ]
            )
    return rows


def target_rows(metrics: Mapping[str, Mapping[str, Any]]) -> list[list[str]]:
    """Per policy with targets: each target, its value, the baseline's and whether met."""
    rows = []
    for policy, block in metrics.items():
        for t in block.get("targets", {}).values():
            met = {True: "yes", False: "NO", None: f"- ({t.get('note', '')})"}[t["met"]]
            rows.append([policy, t["target"], _number(t["value"]), _number(t.get("baseline")), met])
    return rows


def _ratio(value: float | None) -> str:
    return "inf" if value is None else f"{value:.2f}"


def _number(value: Any) -> str:
    if value is None:
        return "-"
    if isinstance(value, float):
        return f"{value:,.3f}" if value < 100 else f"{value:,.0f}"
    return str(value)


def write_metrics(out: Path, metrics: Mapping[str, Any]) -> Path:
    path = out / "metrics.json"
    path.write_text(json.dumps(metrics, indent=2, sort_keys=False) + "\n", encoding="utf-8")
    return path


def write_jobs(out: Path, outcomes: list[Outcome]) -> Path:
    path = out / "jobs.csv"
    with path.open("w", newline="", encoding="utf-8") as handle:
        writer = csv.writer(handle)
        writer.writerow(
            [
                "policy",
                "job_id",
                "team",
                "gpus",
                "nodes",
                "submit_s",
                "duration_s",
                "start_s",
                "end_s",
                "pool",
                "attempts",
                "preempted",
                "lost_gpu_s",
                "unschedulable",
            ]
        )
        for outcome in outcomes:
            for r in outcome.jobs:
                writer.writerow(
                    [
                        outcome.policy,
                        r.trace.job_id,
                        r.trace.team,
                        r.shape.total,
                        r.shape.nodes,
                        f"{r.trace.submit_s:g}",
                        f"{r.trace.duration_s:g}",
                        "" if r.first_start is None else f"{r.first_start:g}",
                        "" if r.end is None else f"{r.end:g}",
                        r.pool,
                        r.attempts,
                        r.preempted,
                        f"{r.lost_gpu_s:g}",
                        r.unschedulable,
                    ]
                )
    return path


def write_forecasts(out: Path, outcomes: list[Outcome]) -> Path:
    """``forecasts.csv``: with ``--forecast-sample``, each forecast job per policy, its forecast
    start and range beside its simulated start (seconds from the trace's start)."""
    path = out / "forecasts.csv"
    keys = ("job_id", "team", "gpus", "submit_s", "forecast_start_s", "earliest_s", "latest_s")
    keys += ("actual_start_s", "method")
    with path.open("w", newline="", encoding="utf-8") as handle:
        writer = csv.writer(handle)
        writer.writerow(["policy", *keys])
        for outcome in outcomes:
            for row in outcome.forecast_rows:
                writer.writerow([outcome.policy, *("" if row[k] is None else row[k] for k in keys)])
    return path


def write_report(
    out: Path, metrics: Mapping[str, Mapping[str, Any]], outcomes: list[Outcome], title: str
) -> Path:
    path = out / "report.html"
    try:
        plots = _plots(metrics, outcomes)
    except ImportError:
        plots = ["<p><em>Plots need matplotlib: <code>pip install 'gpupool[sim]'</code>.</em></p>"]
    head = "".join(f"<th>{html.escape(p)}</th>" for p in metrics)
    body = "".join(
        "<tr>" + "".join(f"<td>{html.escape(c)}</td>" for c in row) + "</tr>"
        for row in table_rows(metrics)
    )
    sharing = _html_table(SHARING_HEAD, sharing_rows(metrics))
    goals = _html_table(TARGETS_HEAD, target_rows(metrics))
    budgets = budget_section(metrics)
    path.write_text(
        f"""<!doctype html>
<html lang="en"><head><meta charset="utf-8"><title>{html.escape(title)}</title>
<style>
body {{ font-family: system-ui, sans-serif; margin: 2em auto; max-width: 1100px; color: #222; }}
table {{ border-collapse: collapse; margin: 1em 0; }}
td, th {{ border: 1px solid #ccc; padding: 0.25em 0.7em; text-align: right; }}
td:first-child, th:first-child {{ text-align: left; }}
figure {{ margin: 1.5em 0; }} figcaption {{ color: #555; }}
</style></head><body>
<h1>{html.escape(title)}</h1>
<p>Definitions of every number: <code>gpupool.sim.metrics</code> and the README's simulator
section. Per-team numbers and every job's times are in <code>metrics.json</code> and
<code>jobs.csv</code> next to this file.</p>
<table><thead><tr><th>metric</th>{head}</tr></thead><tbody>{body}</tbody></table>
<p>A preempted attempt loses the work it did since its job's last checkpoint (all of it
for a job without <code>checkpoint_interval_s</code>); <em>lost GPU-h</em> is that work, run
again by the next attempt, and counts in the queueing delay.</p>
<h2>Sharing incentive: each team against its own hard quota</h2>
<p>Per team with a quota, its average and p90 queueing delay under the policy, with
hard-quota-fifo's in brackets, over the team's jobs that completed under both; a ratio above 1
means the team waited longer sharing than behind its own quota (flagged). The target allows
1.1 x the hard-quota average + 1 h.</p>
{sharing}
<h2>Targets</h2>
{goals}
{budgets}
{"".join(plots)}
</body></html>
""",
        encoding="utf-8",
    )
    return path


BUDGETS_HEAD = ["policy", "team", "budget", "enforcement", "limit", "periods over", "held back"]


def budget_rows(metrics: Mapping[str, Mapping[str, Any]]) -> list[list[str]]:
    """Each policy's configured budgets: how often they were used up and how long they held
    their team back (the fifo baseline has one team and no budgets)."""
    return [
        [
            policy,
            run["team"],
            run["budget"],
            run["enforcement"],
            f"{run['limit']:,.0f} {run['unit']}",
            str(run["periods_over"]),
            f"{run['enforced_hours']:,.1f} h",
        ]
        for policy, found in metrics.items()
        for run in found.get("budgets", [])
    ]


def budget_section(metrics: Mapping[str, Mapping[str, Any]]) -> str:
    rows = budget_rows(metrics)
    if not rows:
        return ""
    return (
        "<h2>Budgets</h2>\n<p>The configuration's budgets, enforced as the controller enforces "
        "them: <em>held back</em> is the time a used-up <code>hold</code> or "
        "<code>no-borrow</code> budget constrained its team.</p>\n"
        + _html_table(BUDGETS_HEAD, rows)
    )


def _html_table(head: list[str], rows: list[list[str]]) -> str:
    if not rows:
        return "<p><em>Nothing to compare: no policy ran beside its baselines.</em></p>"
    top = "".join(f"<th>{html.escape(h)}</th>" for h in head)
    body = "".join(
        "<tr>" + "".join(f"<td>{html.escape(c)}</td>" for c in row) + "</tr>" for row in rows
    )
    return f"<table><thead><tr>{top}</tr></thead><tbody>{body}</tbody></table>"


def _plots(metrics: Mapping[str, Mapping[str, Any]], outcomes: list[Outcome]) -> list[str]:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    figures = []

    fig, ax = plt.subplots(figsize=(9, 4.5))
    for outcome in outcomes:
        delays = sorted(
            max(1.0, r.end - r.trace.submit_s - r.trace.duration_s)
            for r in outcome.jobs
            if r.end is not None
        )
        if delays:
            # At most CDF_POINTS points a policy: the plot looks the same and the report stays
            # small (a point per job would be megabytes of SVG for a long trace).
            step = max(1, len(delays) // CDF_POINTS)
            picked = [*range(0, len(delays), step), len(delays) - 1]
            xs = [delays[i] for i in picked]
            ys = [(i + 1) / len(delays) for i in picked]
            ax.step(xs, ys, where="post", label=outcome.policy)
    ax.set_xscale("log")
    ax.set_xlabel("queueing delay (s, log scale; under 1 s drawn at 1 s)")
    ax.set_ylabel("fraction of jobs")
    ax.grid(alpha=0.3)
    ax.legend()
    figures.append(_svg(fig, "Queueing delay CDF per policy."))

    fig, ax = plt.subplots(figsize=(9, 4.5))
    for outcome in outcomes:
        series = utilization_series(outcome)
        if series:
            ax.plot([t / 86400 for t, _ in series], [u for _, u in series], label=outcome.policy)
    ax.set_xlabel("days since the first submit")
    ax.set_ylabel("GPUs held / cluster GPUs")
    ax.set_ylim(0, 1.05)
    ax.grid(alpha=0.3)
    ax.legend()
    figures.append(_svg(fig, "GPU utilisation over time (mean per bucket)."))

    teams = sorted({t for m in metrics.values() for t in m.get("per_team", {})})
    teams = [
        t for t in teams if any(m["per_team"].get(t, {}).get("completed") for m in metrics.values())
    ]
    if teams:
        fig, ax = plt.subplots(figsize=(min(14, max(9, 0.4 * len(teams) * len(metrics))), 4.5))
        width = 0.8 / max(1, len(metrics))
        for k, (policy, m) in enumerate(metrics.items()):
            values = [m["per_team"].get(t, {}).get("avg_jct_s", 0.0) / 3600 for t in teams]
            ax.bar([i + k * width for i in range(len(teams))], values, width, label=policy)
        ax.set_xticks([i + width * (len(metrics) - 1) / 2 for i in range(len(teams))])
        ax.set_xticklabels(teams, rotation=45, ha="right")
        ax.set_ylabel("average JCT (hours)")
        ax.grid(alpha=0.3, axis="y")
        ax.legend()
        figures.append(_svg(fig, "Average job completion time per team and policy."))
    plt.close("all")
    return figures


def _svg(fig: Any, caption: str) -> str:
    buffer = io.StringIO()
    fig.tight_layout()
    fig.savefig(buffer, format="svg")
    svg = buffer.getvalue()
    svg = svg[svg.index("<svg") :]  # drop the XML prolog and doctype: inlined in HTML
    return f"<figure>{svg}<figcaption>{html.escape(caption)}</figcaption></figure>"
