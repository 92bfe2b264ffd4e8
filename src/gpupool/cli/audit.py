"""``gpupool audit``: the audit trail — who changed what, when, and how it ended.

For platform admins (every entry) and team admins (their teams' entries).
"""

from __future__ import annotations

from datetime import datetime
from typing import Annotated

import typer

from gpupool.cli import output
from gpupool.cli.context import client


def audit(
    ctx: typer.Context,
    team: Annotated[str | None, typer.Option(help="Only entries of this team.")] = None,
    actor: Annotated[str | None, typer.Option(help="Only entries made by this user.")] = None,
    action: Annotated[
        str | None, typer.Option(help="Only this action, e.g. job.submit, job.cancel.")
    ] = None,
    outcome: Annotated[
        str | None, typer.Option(help="Only this outcome: ok, forbidden, invalid_request, ...")
    ] = None,
    since: Annotated[
        datetime | None, typer.Option(help="From this time on (UTC unless a zone is given).")
    ] = None,
    until: Annotated[datetime | None, typer.Option(help="Before this time.")] = None,
    limit: Annotated[int, typer.Option(min=1, help="At most this many entries.")] = 50,
    as_json: Annotated[bool, typer.Option("--json", help="Print machine-readable JSON.")] = False,
) -> None:
    """List audit entries, newest first."""
    filters = {
        "team": team,
        "actor": actor,
        "action": action,
        "outcome": outcome,
        "since": since,
        "until": until,
    }
    with client(ctx) as sdk:
        found = []
        for entry in sdk.iter_audit(page_size=min(limit, 500), **filters):
            found.append(entry)
            if len(found) >= limit:
                break
    if as_json:
        output.print_json(found)
        return
    rows = [
        (
            output.timestamp(e.at),
            e.actor,
            e.token_id,
            e.action,
            e.target,
            e.team,
            e.outcome,
        )
        for e in found
    ]
    columns = ("time", "actor", "token", "action", "target", "team", "outcome")
    output.stdout().print(output.table(columns, rows))


def register(app: typer.Typer) -> None:
    app.command("audit")(audit)
