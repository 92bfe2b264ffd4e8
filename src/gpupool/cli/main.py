"""The ``gpupool`` entry point: the Typer app, its global options and command registration.

User commands (submit, jobs, job, logs, cancel, why, teams, pools, whoami, audit, budget,
usage, costs) talk to the server through ``gpupool.client`` only; operator commands (server,
token, config) come from ``gpupool.cli.operator``, ``db`` (upgrade, backup) from
``gpupool.cli.db``, ``doctor`` from ``gpupool.cli.doctor``, and ``simulate`` runs the trace
simulator in this process (``gpupool.cli.simulate``). Exit codes are documented in
``gpupool.cli.exit_codes``:

    0 ok · 1 unexpected error · 2 usage error · 3 not found · 4 unauthenticated/forbidden
    5 invalid request/conflict · 6 server unreachable

``login`` / ``logout`` (``gpupool.cli.login``) sign in through the identity provider and keep
the token for the server.

Output passes :mod:`gpupool.data.redaction` (tokens, signed URLs and keys are masked), except
that of the commands in ``SHOWS_SECRETS``, whose purpose is to hand out a token.
"""

from __future__ import annotations

from typing import Annotated

import typer

from gpupool.cli import (
    audit,
    budgets,
    cluster,
    db,
    doctor,
    export,
    jobs,
    login,
    logs,
    operator,
    simulate,
    teams,
    usage,
    webhook,
)
from gpupool.cli.context import Options
from gpupool.cli.exit_codes import HELP as EXIT_CODES_HELP
from gpupool.client.settings import DEFAULT_URL, ENV_TOKEN, ENV_URL
from gpupool.data.redaction import install_logging, redacting_streams

# Commands whose output is a secret on purpose: a new API token (``token create``, the
# first-start tokens of ``server``). The server's log lines are redacted all the same.
SHOWS_SECRETS = frozenset({"server", "token"})

app = typer.Typer(
    name="gpupool",
    help="Share GPUs between teams: submit jobs, follow them, see quota and capacity.",
    epilog=EXIT_CODES_HELP,
    no_args_is_help=True,
    # Locals in a pretty traceback would print the API token held by the client.
    pretty_exceptions_show_locals=False,
)


@app.callback()
def options(
    ctx: typer.Context,
    url: Annotated[
        str | None,
        typer.Option(help=f"Server URL (default: ${ENV_URL}, else {DEFAULT_URL})."),
    ] = None,
    token: Annotated[
        str | None, typer.Option(help=f"API token (default: ${ENV_TOKEN}, else `gpupool login`'s).")
    ] = None,
) -> None:
    # The SDK's settings module resolves None from the environment, the one place that reads it.
    ctx.obj = Options(url=url, token=token)
    install_logging()
    if ctx.invoked_subcommand not in SHOWS_SECRETS:
        # Everything a command prints (tables, JSON, job logs, errors) is redacted; the
        # streams are restored, and any held partial line written, when the command ends.
        ctx.with_resource(redacting_streams())


jobs.register(app)
logs.register(app)
teams.register(app)
cluster.register(app)
audit.register(app)
budgets.register(app)
login.register(app)
usage.register(app)
webhook.register(app)
operator.register(app)
db.register(app)
doctor.register(app)
simulate.register(app)
export.register(app)


# What a client-only install (`pip install gpupool`: the CLI and the SDK) leaves out; the
# operator commands (server, db, doctor, simulate, ...) import them when they run.
SERVER_PACKAGES = frozenset(
    {
        "sqlalchemy",
        "alembic",
        "fastapi",
        "uvicorn",
        "psutil",
        "jwt",
        "fastapi_offline",
        "prometheus_client",
    }
)


def main() -> None:
    try:
        app()
    except ModuleNotFoundError as exc:
        missing = (exc.name or "").split(".")[0]
        if missing not in SERVER_PACKAGES:
            raise
        typer.secho(
            f"error: this command runs gpupool's server side, and its packages are not "
            f"installed ({missing} is missing): pip install 'gpupool[server]'",
            fg="red",
            err=True,
        )
        raise SystemExit(1) from None
