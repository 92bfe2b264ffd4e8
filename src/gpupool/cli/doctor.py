"""``gpupool doctor``: check the database, the clock, the backends and the storage of this
machine's gpupool, print a table with what to fix, and exit 5 when anything fails.

An operator command (it reads the store and probes backends directly, not through the API);
the checks live in ``gpupool.server.doctor``, imported when the command runs.
"""

from __future__ import annotations

from dataclasses import asdict
from typing import TYPE_CHECKING, Annotated

import typer
from rich.console import Console
from rich.markup import escape
from rich.table import Table

from gpupool.cli import output
from gpupool.cli.exit_codes import REJECTED
from gpupool.cli.operator import ConfigOption, HomeOption

if TYPE_CHECKING:
    from gpupool.server.doctor import Finding

STYLES = {"ok": "green", "warn": "yellow", "fail": "bold red"}


def doctor(
    config: ConfigOption = None,
    home: HomeOption = None,
    as_json: Annotated[bool, typer.Option("--json", help="Print the findings as JSON.")] = False,
) -> None:
    """Check the database, clock, backends and storage; say what to fix (exit 5 on a failure).

    The database must be reachable with its schema current; PostgreSQL's clock within 2 s of
    this machine's; each pool's backend must answer; GPUPOOL_HOME and team storage must have
    their owners and modes. Without --config the stored configuration is checked."""
    from gpupool.config import load_settings
    from gpupool.core.errors import ConfigInvalid
    from gpupool.server.doctor import diagnose, failed
    from gpupool.server.serve import resolve_config
    from gpupool.spec.load import load_config
    from gpupool.state.health import inspect_store
    from gpupool.state.schema import SchemaVerdict

    try:
        settings = load_settings(home=home)
        store = inspect_store(settings.database_url)
        cluster = None
        if config is not None:
            cluster = load_config(config)
        elif store.schema is not None and store.schema.verdict is SchemaVerdict.CURRENT:
            try:
                cluster = resolve_config(settings, None)
            except ConfigInvalid:
                cluster = None  # none stored yet: diagnose says to pass --config
    except ConfigInvalid as exc:
        typer.secho(f"error: {exc.message}", fg="red", err=True)
        raise typer.Exit(REJECTED) from None
    findings = diagnose(settings, cluster, store)
    if as_json:
        output.print_json([asdict(f) for f in findings])
    else:
        Console(highlight=False).print(findings_table(findings))
    if failed(findings):
        raise typer.Exit(REJECTED)


def findings_table(findings: list[Finding]) -> Table:
    result = Table("area", "checked", "result", "detail", "fix", header_style="bold")
    for column in result.columns:
        column.overflow = "fold"  # paths and URLs are copied out of this table
    for f in findings:
        verdict = f"[{STYLES[f.verdict]}]{f.verdict}[/]"
        result.add_row(f.area, escape(f.subject), verdict, escape(f.detail), escape(f.fix or "-"))
    return result


def register(app: typer.Typer) -> None:
    app.command("doctor")(doctor)
