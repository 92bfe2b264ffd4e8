"""Operator commands on the store: ``db upgrade`` and ``db backup``.

Like ``server`` and ``token`` they work on the store named by ``GPUPOOL_DATABASE_URL`` (else
the SQLite file in ``GPUPOOL_HOME``), not through the API, and import the server side inside
each command. A server refuses to start on a store at an older schema revision and names
``gpupool db upgrade``; that command is the only thing that migrates an existing store.
"""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from gpupool.cli.exit_codes import REJECTED
from gpupool.cli.operator import HomeOption

db_app = typer.Typer(help="Upgrade and back up the store (operator: works on the local store).")


def _fail(message: str) -> typer.Exit:
    typer.secho(f"error: {message}", fg="red", err=True)
    return typer.Exit(REJECTED)


def _database_url(home: Path | None) -> str:
    from gpupool.config import load_settings
    from gpupool.core.errors import ConfigInvalid

    try:
        return load_settings(home=home).database_url
    except ConfigInvalid as exc:
        raise _fail(exc.message) from None


@db_app.command("upgrade")
def db_upgrade(home: HomeOption = None) -> None:
    """Migrate the store to this release's schema (stop the servers and back it up first)."""
    from gpupool.core.errors import ConfigInvalid
    from gpupool.state.db import make_engine
    from gpupool.state.schema import upgrade_store

    engine = make_engine(_database_url(home))
    try:
        before, after = upgrade_store(engine)
    except ConfigInvalid as exc:
        raise _fail(exc.message) from None
    finally:
        engine.dispose()
    if before.revision == after.revision:
        typer.echo(f"already at revision {after.revision}; nothing to do")
    else:
        typer.echo(
            f"upgraded the store from revision {before.revision or '(empty)'} to {after.revision}"
        )


@db_app.command("backup")
def db_backup(
    dest: Annotated[Path, typer.Argument(help="A new file for the copy (never overwritten).")],
    home: HomeOption = None,
) -> None:
    """Copy a SQLite store to DEST while the server runs (SQLite's online backup).

    PostgreSQL stores are backed up with pg_dump (docs/deployment.md)."""
    from gpupool.core.errors import InvalidRequest
    from gpupool.state.backup import backup_sqlite

    try:
        result = backup_sqlite(_database_url(home), dest)
    except InvalidRequest as exc:
        raise _fail(exc.message) from None
    typer.echo(f"backed up {result.source} to {result.dest} ({result.bytes} bytes)")


def register(app: typer.Typer) -> None:
    app.add_typer(db_app, name="db")
