"""``gpupool teams [TEAM]``: quota and usage per team and gpu type, usage this month and budget
left (the columns of Slurm's ``sshare``: raw usage and its share)."""

from __future__ import annotations

from typing import Annotated

import typer

from gpupool.cli import completion, output
from gpupool.cli.budgets import amount
from gpupool.cli.context import client
from gpupool.client.models import Team, TeamQuota


def teams(
    ctx: typer.Context,
    name: Annotated[
        str | None,
        typer.Argument(
            help="Show one team, with members.",
            show_default=False,
            autocompletion=completion.teams,
        ),
    ] = None,
    as_json: Annotated[bool, typer.Option("--json", help="Print machine-readable JSON.")] = False,
) -> None:
    """List teams with quota used/nominal per gpu type, GPU-hours this month, their share of
    all teams' GPU-hours and the tightest budget's remaining; or show one team."""
    with client(ctx) as sdk:
        found = [sdk.team(name)] if name else sdk.teams()
    if as_json:
        output.print_json(found[0] if name else found)
        return
    console = output.stdout()
    rows = [
        (t.name, t.cohort, f"{t.weight:g}", quota_text(t), t.queued, t.running,
         f"{t.usage_gpu_hours:,.1f}", f"{100 * t.usage_share:.1f}%", budget_text(t))
        for t in found
    ]  # fmt: skip
    columns = ("team", "cohort", "weight", "quota used/nominal", "queued", "running",
               "GPU-h this month", "share", "budget left")  # fmt: skip
    console.print(output.table(columns, rows))
    if name and found[0].members:
        members = sorted(found[0].members.items())
        console.print(output.table(("member", "role"), members, title="members"))


def budget_text(team: Team) -> str | None:
    """The tightest budget's remaining: ``988 GPU-h (ok)``; None without budgets."""
    if team.budget_remaining is None or team.budget_unit is None:
        return None
    return f"{amount(team.budget_remaining, team.budget_unit)} ({team.budget_status})"


def quota_text(team: Team) -> str:
    """One line per gpu type: ``h100 3/4 (+1 borrowed)``."""
    return "\n".join(quota_line(gpu, q) for gpu, q in sorted(team.quota.items()))


def quota_line(gpu_type: str, quota: TeamQuota) -> str:
    line = f"{gpu_type} {quota.used}/{quota.nominal}"
    return f"{line} (+{quota.borrowed} borrowed)" if quota.borrowed else line


def register(app: typer.Typer) -> None:
    app.command("teams")(teams)
