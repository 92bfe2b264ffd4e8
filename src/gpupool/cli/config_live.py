"""``gpupool config diff|apply|history``: change the running configuration (platform admins).

These talk to the server through the SDK, like the user commands; nothing here touches the
store. ``apply`` shows the diff it is about to apply and asks before it does (``--yes`` for
scripts), then sends the file with the version the diff was made against: if someone applied
another version in between, the server refuses (409) and nothing changes.
"""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Any

import typer

from gpupool.cli import output
from gpupool.cli.context import client
from gpupool.cli.exit_codes import REJECTED
from gpupool.client.models import ConfigDiff

FileArgument = Annotated[Path, typer.Argument(help="The cluster configuration YAML.")]
JsonFlag = Annotated[bool, typer.Option("--json", help="Print machine-readable JSON.")]


def _read(path: Path) -> str:
    try:
        return path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        typer.secho(f"error: cannot read {path}: {exc}", fg="red", err=True)
        raise typer.Exit(REJECTED) from None


def _show(diff: ConfigDiff) -> None:
    typer.echo(f"against version {diff.base_version}:")
    typer.echo(diff.text)
    if diff.jobs_in_use:
        typer.echo(f"jobs still using a removed team or pool ({len(diff.jobs_in_use)}):")
        for job in diff.jobs_in_use:
            where = f" on {job.pool}" if job.pool else ""
            typer.echo(f"  {job.id}  {job.team}  {job.status}{where}")


def config_diff(ctx: typer.Context, file: FileArgument, as_json: JsonFlag = False) -> None:
    """Show what FILE would change against the running configuration."""
    text = _read(file)
    with client(ctx) as sdk:
        diff = sdk.config_diff(text, source=str(file))
    if as_json:
        output.print_json(diff)
        return
    _show(diff)


def config_apply(
    ctx: typer.Context,
    file: FileArgument,
    yes: Annotated[bool, typer.Option("--yes", "-y", help="Apply without asking.")] = False,
    force: Annotated[
        bool,
        typer.Option(
            help="Remove teams and pools that jobs still use: their queued jobs fail, "
            "their running jobs are cancelled."
        ),
    ] = False,
) -> None:
    """Validate FILE, show the diff, and make it the running configuration (no restart)."""
    text = _read(file)
    with client(ctx) as sdk:
        diff = sdk.config_diff(text, source=str(file))
        _show(diff)
        if not diff.changes:
            return
        if diff.jobs_in_use and not force:
            typer.secho(
                "error: jobs still use a team or pool this removes; wait for them, cancel "
                "them, or apply with --force",
                fg="red",
                err=True,
            )
            raise typer.Exit(REJECTED)
        if not yes and not typer.confirm(f"apply as version {diff.base_version + 1}?"):
            typer.echo("nothing applied")
            raise typer.Exit(1)
        done = sdk.apply_config(text, diff.base_version, source=str(file), force=force)
    settled = ""
    if done.failed_jobs or done.cancelled_jobs:
        settled = f"; {done.failed_jobs} queued job(s) failed, {done.cancelled_jobs} cancelled"
    typer.echo(f"version {done.version} in force{settled}")


def config_history(
    ctx: typer.Context,
    limit: Annotated[int, typer.Option(help="How many versions, newest first.")] = 20,
    as_json: JsonFlag = False,
) -> None:
    """List the configuration versions: who applied each, when, and what changed."""
    with client(ctx) as sdk:
        versions = sdk.config_versions(limit)
    if as_json:
        output.print_json(versions)
        return
    rows: list[tuple[Any, ...]] = [
        (
            v.version,
            v.applied_at.strftime("%Y-%m-%d %H:%M:%S") if v.applied_at else "",
            v.applied_by,
            v.source,
            v.summary,
        )
        for v in versions
    ]
    columns = ("version", "applied at (UTC)", "by", "source", "changes")
    output.stdout().print(output.table(columns, rows))


def register(config_app: typer.Typer) -> None:
    config_app.command("diff")(config_diff)
    config_app.command("apply")(config_apply)
    config_app.command("history")(config_history)
