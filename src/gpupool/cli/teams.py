"""``gpupool teams [TEAM]``: quota and usage per team and gpu type."""

from __future__ import annotations

from typing import Annotated

import typer

from gpupool.cli import completion, output
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
    """List teams with quota used/nominal per gpu type, or show one team."""
    with client(ctx) as sdk:
        found = [sdk.team(name)] if name else sdk.teams()
    if as_json:
        output.print_json(found[0] if name else found)
        return
    console = output.stdout()
    rows = [(t.name, t.cohort, f"{t.weight:g}", quota_text(t), t.queued, t.running) for t in found]
    columns = ("team", "cohort", "weight", "quota used/nominal", "queued", "running")
    console.print(output.table(columns, rows))
    if name and found[0].members:
        members = sorted(found[0].members.items())
        console.print(output.table(("member", "role"), members, title="members"))


def quota_text(team: Team) -> str:
    """One line per gpu type: ``h100 3/4 (+1 borrowed)``."""
    return "\n".join(quota_line(gpu, q) for gpu, q in sorted(team.quota.items()))


def quota_line(gpu_type: str, quota: TeamQuota) -> str:
    line = f"{gpu_type} {quota.used}/{quota.nominal}"
    return f"{line} (+{quota.borrowed} borrowed)" if quota.borrowed else line


def register(app: typer.Typer) -> None:
    app.command("teams")(teams)
