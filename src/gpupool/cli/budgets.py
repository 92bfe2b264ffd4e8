"""``gpupool budget set|show|deliveries``: team budgets and the webhook delivery log.

``set`` (platform admins) stores a new configuration version with the team's budget added or
replaced, like ``gpupool config apply``; ``show`` (team admins: their teams) prints how each
budget stands this period; ``deliveries`` (platform admins) lists webhook tries.
"""

from __future__ import annotations

from datetime import date, datetime
from enum import StrEnum
from typing import Annotated

import typer

from gpupool.cli import output
from gpupool.cli.context import client
from gpupool.client.models import BudgetStatus

app = typer.Typer(help="Team budgets per period, their alerts and enforcement.")


class Period(StrEnum):
    MONTH = "month"
    WEEK = "week"
    QUARTER = "quarter"
    CUSTOM = "custom"


class Enforcement(StrEnum):
    ALERT = "alert"
    NO_BORROW = "no-borrow"
    HOLD = "hold"


def _day(value: datetime | None) -> date | None:
    return None if value is None else value.date()


@app.command("set")
def set_budget(
    ctx: typer.Context,
    team: Annotated[str, typer.Argument(help="The team.")],
    name: Annotated[str, typer.Option(help="The budget's name within the team.")] = "monthly",
    period: Annotated[Period, typer.Option(help="month, week, quarter or custom.")] = Period.MONTH,
    gpu_hours: Annotated[
        float | None, typer.Option(help="Limit in GPU-hours (or --amount).", show_default=False)
    ] = None,
    amount: Annotated[
        float | None,
        typer.Option(help="Limit in the accounting currency (or --gpu-hours).", show_default=False),
    ] = None,
    gpu_type: Annotated[
        str | None, typer.Option(help="Count only this gpu type.", show_default=False)
    ] = None,
    enforcement: Annotated[
        Enforcement, typer.Option(help="At 100 %: alert, no-borrow or hold.")
    ] = Enforcement.ALERT,
    thresholds: Annotated[
        str | None, typer.Option(help="Alert at these percents, e.g. 50,80,100 (the default).")
    ] = None,
    start: Annotated[
        datetime | None, typer.Option(formats=["%Y-%m-%d"], help="custom: the first day.")
    ] = None,
    end: Annotated[
        datetime | None, typer.Option(formats=["%Y-%m-%d"], help="custom: the last day.")
    ] = None,
    base_version: Annotated[
        int | None,
        typer.Option(help="Refuse (exit 5) unless this configuration version is current."),
    ] = None,
) -> None:
    """Add or replace a team's budget: stores a new configuration version (platform admins)."""
    try:
        percents = None if thresholds is None else [float(t) for t in thresholds.split(",")]
    except ValueError:
        raise typer.BadParameter(
            f"{thresholds!r} is not a comma-separated list of numbers", param_hint="--thresholds"
        ) from None
    with client(ctx) as sdk:
        done = sdk.set_budget(
            team,
            name,
            period=period.value,
            gpu_hours=gpu_hours,
            amount=amount,
            gpu_type=gpu_type,
            enforcement=enforcement.value,
            thresholds=percents,
            start=_day(start),
            end=_day(end),
            base_version=base_version,
        )
    if done.applied:
        typer.echo(f"budget {team}/{name} set: configuration version {done.version}")
    else:
        typer.echo(f"budget {team}/{name} unchanged (configuration version {done.version})")


@app.command("show")
def show(
    ctx: typer.Context,
    team: Annotated[
        str | None, typer.Argument(help="One team (default: every team you administer).")
    ] = None,
    as_json: Annotated[bool, typer.Option("--json", help="Print machine-readable JSON.")] = False,
) -> None:
    """How each budget stands this period: used, limit, remaining, state, period end."""
    with client(ctx) as sdk:
        found = sdk.budgets(team)
    if as_json:
        output.print_json(found)
        return
    rows = [
        (
            b.team,
            b.name + (f" ({b.gpu_type})" if b.gpu_type else ""),
            b.period_label,
            amount(b.used, b.unit),
            amount(b.limit, b.unit),
            amount(b.remaining, b.unit),
            state_text(b),
            b.enforcement,
            output.timestamp(b.period_end) if b.period_end else None,
        )
        for b in found
    ]
    columns = ("team", "budget", "period", "used", "limit", "remaining", "state", "enforcement",
               "period ends")  # fmt: skip
    output.stdout().print(output.table(columns, rows))


@app.command("deliveries")
def deliveries(
    ctx: typer.Context,
    webhook: Annotated[str | None, typer.Option(help="Only this webhook.")] = None,
    limit: Annotated[int, typer.Option(min=1, max=500, help="At most this many tries.")] = 50,
    as_json: Annotated[bool, typer.Option("--json", help="Print machine-readable JSON.")] = False,
) -> None:
    """The webhook delivery log, newest first (platform admins)."""
    with client(ctx) as sdk:
        found = sdk.webhook_deliveries(webhook=webhook, limit=limit)
    if as_json:
        output.print_json(found)
        return
    rows = [
        (output.timestamp(d.at) if d.at else None, d.webhook, d.event, d.message_id,
         d.try_number, d.outcome, d.status_code, d.error)
        for d in found
    ]  # fmt: skip
    columns = ("time", "webhook", "event", "message", "try", "outcome", "status", "error")
    output.stdout().print(output.table(columns, rows))


def amount(value: float, unit: str) -> str:
    """``1,012 GPU-h`` / ``1,012.50 USD``."""
    if unit == "GPU-h":
        return f"{value:,.0f} {unit}" if value >= 10 else f"{value:,.1f} {unit}"
    return f"{value:,.2f} {unit}"


def state_text(budget: BudgetStatus) -> str:
    """``ok 12%`` / ``warning 85%`` / ``over 101% (hold)``."""
    text = f"{budget.status} {budget.percent:.0f}%"
    return f"{text} ({budget.enforcement})" if budget.enforced else text


def register(root: typer.Typer) -> None:
    root.add_typer(app, name="budget")
