"""``gpupool pools`` and ``gpupool whoami``: what capacity exists and who you are to it."""

from __future__ import annotations

from typing import Annotated

import typer

from gpupool.cli import output
from gpupool.cli.context import client
from gpupool.client.models import Pool

JsonFlag = Annotated[bool, typer.Option("--json", help="Print machine-readable JSON.")]


def pools(ctx: typer.Context, as_json: JsonFlag = False) -> None:
    """List pools with allocated/total GPUs, and why a pool is unavailable."""
    with client(ctx) as sdk:
        found = sdk.pools()
    if as_json:
        output.print_json(found)
        return
    rows = [
        (
            p.name,
            p.backend,
            p.gpu_type,
            _nodes(p),
            f"{p.gpus_allocated}/{p.gpus_total}",
            p.dedicated_to,
            "available" if p.available else f"unavailable: {p.message or 'no reason given'}",
        )
        for p in found
    ]
    columns = (
        "pool",
        "backend",
        "gpu type",
        "nodes x gpus",
        "allocated/total",
        "dedicated to",
        "state",
    )
    output.stdout().print(output.table(columns, rows))


def _nodes(pool: Pool) -> str:
    """``2x4``, or for an autoscaled pool the nodes up of the most: ``1 of 3x4, target 2``
    (plus those coming up or draining)."""
    scale = pool.autoscale
    if scale is None:
        return f"{pool.nodes}x{pool.gpus_per_node}"
    moving = [
        f"{n} {what}"
        for n, what in ((scale.provisioning, "coming up"), (scale.draining, "draining"))
        if n
    ]
    extra = f" ({', '.join(moving)})" if moving else ""
    return f"{scale.ready} of {pool.nodes}x{pool.gpus_per_node}, target {scale.target}{extra}"


def whoami(ctx: typer.Context, as_json: JsonFlag = False) -> None:
    """Show the user behind the token and their team roles."""
    with client(ctx) as sdk:
        me = sdk.whoami()
    if as_json:
        output.print_json(me)
        return
    admin = " (platform admin)" if me.platform_admin else ""
    teams = ", ".join(f"{team} ({role})" for team, role in sorted(me.teams.items())) or "none"
    typer.echo(f"user: {me.user}{admin}\nteams: {teams}")


def register(app: typer.Typer) -> None:
    app.command("pools")(pools)
    app.command("whoami")(whoami)
