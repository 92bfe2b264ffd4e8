"""The ``gpupool`` entry point: the Typer app, its global options and command registration.

User commands (submit, jobs, job, logs, cancel, why, teams, pools, whoami, audit) talk to the
server through ``gpupool.client`` only; operator commands (server, token, config) come from
``gpupool.cli.operator``. Exit codes are documented in ``gpupool.cli.exit_codes``:

    0 ok · 1 unexpected error · 2 usage error · 3 not found · 4 unauthenticated/forbidden
    5 invalid request/conflict · 6 server unreachable
"""

from __future__ import annotations

from typing import Annotated

import typer

from gpupool.cli import audit, cluster, jobs, logs, operator, teams
from gpupool.cli.context import Options
from gpupool.cli.exit_codes import HELP as EXIT_CODES_HELP
from gpupool.client.settings import DEFAULT_URL, ENV_TOKEN, ENV_URL

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
    token: Annotated[str | None, typer.Option(help=f"API token (default: ${ENV_TOKEN}).")] = None,
) -> None:
    # The SDK's settings module resolves None from the environment, the one place that reads it.
    ctx.obj = Options(url=url, token=token)


jobs.register(app)
logs.register(app)
teams.register(app)
cluster.register(app)
audit.register(app)
operator.register(app)


def main() -> None:
    app()
