"""Operator command on the store's history: ``history export``, a trace for ``simulate``.

Like ``db`` it works on the store named by ``GPUPOOL_DATABASE_URL`` (else the SQLite file in
``GPUPOOL_HOME``), not through the API, and imports the server side inside the command. The
trace carries no command, environment, name or user of any job (``sim.export``).
"""

from __future__ import annotations

from datetime import UTC, datetime
from pathlib import Path
from typing import Annotated

import typer

from gpupool.cli.db import _database_url, _fail
from gpupool.cli.exit_codes import USAGE
from gpupool.cli.operator import HomeOption

history_app = typer.Typer(help="The store's past jobs (operator: works on the local store).")


@history_app.command("export")
def export(
    start: Annotated[
        datetime, typer.Option("--from", help="First submit time to export (UTC if no zone).")
    ],
    end: Annotated[datetime, typer.Option("--to", help="Export jobs submitted before this time.")],
    out: Annotated[Path, typer.Option(help="The trace CSV to write (replaced if it exists).")],
    home: HomeOption = None,
) -> None:
    """Write the jobs submitted in [--from, --to) as a simulator trace (generic CSV), to replay
    under another configuration: gpupool simulate --trace OUT --config proposed.yaml."""
    from gpupool.sim.export import trace_rows, write_trace
    from gpupool.state import history
    from gpupool.state.db import make_engine, session_factory

    start, end = _utc(start), _utc(end)
    if end <= start:
        typer.secho("error: --to must be after --from", fg="red", err=True)
        raise typer.Exit(USAGE)
    engine = make_engine(_database_url(home))
    try:
        with session_factory(engine)() as session:
            found = trace_rows(history.submitted_between(session, start, end))
    finally:
        engine.dispose()
    try:
        write_trace(out, found)
    except OSError as exc:
        raise _fail(f"cannot write {out}: {exc.strerror or exc}") from None
    left = ", ".join(f"{count} {why}" for why, count in sorted(found.skipped.items()))
    typer.echo(f"wrote {len(found.rows)} jobs to {out}" + (f" (left out: {left})" if left else ""))


def _utc(moment: datetime) -> datetime:
    return moment.replace(tzinfo=UTC) if moment.tzinfo is None else moment.astimezone(UTC)


def register(app: typer.Typer) -> None:
    app.add_typer(history_app, name="history")
