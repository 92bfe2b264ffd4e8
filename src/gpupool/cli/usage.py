"""``gpupool usage`` and ``gpupool costs``: GPU-hours and their cost per period and group.

Members and viewers see their own teams; platform admins and auditors see every team and
the idle capacity of each pool. ``--attempts`` lists attempts instead of grouped totals.
Spans the server has no data for are printed as warnings, never as zero use.
"""

from __future__ import annotations

from enum import StrEnum
from typing import Annotated, Any

import typer

from gpupool.cli import output
from gpupool.cli.context import client
from gpupool.client.sdk import Client
from gpupool.client.usage import MissingSpan, UsageAttempt, UsageReport


class By(StrEnum):
    team = "team"
    user = "user"
    gpu_type = "gpu-type"
    pool = "pool"
    priority_class = "priority-class"


class PeriodKind(StrEnum):
    day = "day"
    week = "week"
    month = "month"
    quarter = "quarter"
    year = "year"


TeamOpt = Annotated[str | None, typer.Option(help="Only this team.")]
PeriodOpt = Annotated[
    PeriodKind | None,
    typer.Option(
        help="The period holding --at (default: this month); with --from/--to, the range is "
        "cut into such periods."
    ),
]
AtOpt = Annotated[str | None, typer.Option(help="A date (YYYY-MM-DD) in the period.")]
FromOpt = Annotated[
    str | None, typer.Option("--from", help="Start: a date or ISO time (in the server's zone).")
]
ToOpt = Annotated[str | None, typer.Option("--to", help="End, exclusive (default: now).")]
ByOpt = Annotated[
    list[By] | None,
    typer.Option("--by", help="Group by (repeat for more; default team, gpu-type)."),
]
AttemptsOpt = Annotated[bool, typer.Option("--attempts", help="One line per attempt.")]
CsvOpt = Annotated[bool, typer.Option("--csv", help="Print the server's CSV.")]
JsonOpt = Annotated[bool, typer.Option("--json", help="Print machine-readable JSON.")]


def _query(
    team: str | None,
    period: PeriodKind | None,
    at: str | None,
    start: str | None,
    end: str | None,
    by: list[By] | None,
) -> dict[str, Any]:
    return {
        "team": team,
        "period": period.value if period else None,
        "at": at,
        "start": start,
        "end": end,
        "group_by": [b.value.replace("-", "_") for b in by] if by else None,
    }


def _hours(value: float) -> str:
    return f"{value:,.2f}"


def _money(value: float | None, currency: str | None) -> str:
    return "-" if value is None else f"{value:,.2f} {currency or ''}".strip()


def _warn_missing(missing: list[MissingSpan]) -> None:
    for span in missing:
        output.stderr().print(
            f"warning: no usage data from {output.timestamp(span.start)} to "
            f"{output.timestamp(span.end)} ({span.reason}): not counted, not zero"
        )


def _summary_table(report: UsageReport, costs: bool) -> None:
    groups = list(report.group_by)
    # (idle) rows name their team as "(idle)" and their pool whatever the grouping.
    groups += [
        f for f in ("team", "pool") if f not in groups and any(getattr(r, f) for r in report.rows)
    ]
    columns = ["period", *(g.replace("_", " ") for g in groups), "GPU-h", "borrowed", "idle"]
    if costs:
        columns += ["cost"]
    rows = []
    for r in report.rows:
        cells: list[Any] = [r.period, *(getattr(r, g) for g in groups)]
        cells += [_hours(r.allocated_gpu_hours), _hours(r.borrowed_gpu_hours)]
        cells += [_hours(r.idle_gpu_hours)]
        if costs:
            cells.append(
                _money(r.total_cost, report.currency) + (" (unpriced)" if r.unpriced else "")
            )
        rows.append(cells)
    title = (
        f"{'Costs' if costs else 'Usage'}, {output.timestamp(report.start)} to "
        f"{output.timestamp(report.end)} ({report.timezone})"
    )
    output.stdout().print(output.table(columns, rows, title=title))


def _attempts_table(items: list[UsageAttempt], costs: bool) -> None:
    columns = [
        "attempt",
        "job",
        "team",
        "user",
        "pool",
        "gpus",
        "started",
        "ended",
        "GPU-h",
        "borrowed",
    ]
    if costs:
        columns.append("cost")
    rows = []
    for a in items:
        cells: list[Any] = [a.attempt_id, a.job_id, a.team, a.user, a.pool, a.gpus]
        cells += [
            output.timestamp(a.started_at),
            output.timestamp(a.ended_at) if a.ended_at else "running",
        ]
        cells += [_hours(a.allocated_gpu_hours), _hours(a.borrowed_gpu_hours)]
        if costs:
            cells.append(_money(a.total_cost, None))
        rows.append(cells)
    output.stdout().print(output.table(columns, rows))


def _run(
    ctx: typer.Context,
    costs: bool,
    query: dict[str, Any],
    attempts: bool,
    as_csv: bool,
    as_json: bool,
) -> None:
    with client(ctx) as sdk:
        if as_csv:
            typer.echo(sdk.usage_csv(costs=costs, attempts=attempts, **query), nl=False)
            return
        if attempts:
            _print_attempts(sdk, costs, query, as_json)
            return
        report = sdk.costs(**query) if costs else sdk.usage(**query)
    if as_json:
        output.print_json(report)
        return
    _warn_missing(report.missing)
    _summary_table(report, costs)


def _print_attempts(sdk: Client, costs: bool, query: dict[str, Any], as_json: bool) -> None:
    query = {k: v for k, v in query.items() if k != "group_by"}
    first = page = sdk.usage_attempts(costs=costs, **query)
    items = list(page.items)
    while page.next_cursor:
        page = sdk.usage_attempts(costs=costs, cursor=page.next_cursor, **query)
        items += page.items
    if as_json:
        output.print_json(items)
        return
    _warn_missing(first.missing)
    _attempts_table(items, costs)


def usage(
    ctx: typer.Context,
    team: TeamOpt = None,
    period: PeriodOpt = None,
    at: AtOpt = None,
    start: FromOpt = None,
    end: ToOpt = None,
    by: ByOpt = None,
    attempts: AttemptsOpt = False,
    as_csv: CsvOpt = False,
    as_json: JsonOpt = False,
) -> None:
    """GPU-hours used within quota, borrowed, and each row's share of idle capacity."""
    _run(ctx, False, _query(team, period, at, start, end, by), attempts, as_csv, as_json)


def costs(
    ctx: typer.Context,
    team: TeamOpt = None,
    period: PeriodOpt = None,
    at: AtOpt = None,
    start: FromOpt = None,
    end: ToOpt = None,
    by: ByOpt = None,
    attempts: AttemptsOpt = False,
    as_csv: CsvOpt = False,
    as_json: JsonOpt = False,
) -> None:
    """What that usage costs at the configured prices (chargeback and showback)."""
    _run(ctx, True, _query(team, period, at, start, end, by), attempts, as_csv, as_json)


def register(app: typer.Typer) -> None:
    app.command("usage")(usage)
    app.command("costs")(costs)
