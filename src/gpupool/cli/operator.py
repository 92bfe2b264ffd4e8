"""Operator commands: ``server``, ``token``, ``config``.

Unlike the user commands these work on the local store and configuration, not through the
REST API, so their server-side imports are done inside each command: the user commands
never load them.
"""

from __future__ import annotations

from datetime import timedelta
from pathlib import Path
from typing import TYPE_CHECKING, Annotated

import typer

from gpupool.cli.exit_codes import REJECTED

if TYPE_CHECKING:
    from gpupool.config import Settings

ConfigOption = Annotated[
    Path | None,
    typer.Option("--config", "-c", help="Cluster configuration YAML (see examples/demo.yaml)."),
]
HomeOption = Annotated[
    Path | None, typer.Option(help="State directory (default: $GPUPOOL_HOME, else ./.gpupool).")
]


def _fail(message: str, code: int = REJECTED) -> typer.Exit:
    typer.secho(f"error: {message}", fg="red", err=True)
    return typer.Exit(code)


def _settings(**overrides: object) -> Settings:
    """The process settings; a bad ``GPUPOOL_*`` value is a clean error, not a traceback."""
    from gpupool.config import load_settings
    from gpupool.core.errors import ConfigInvalid

    try:
        return load_settings(**overrides)
    except ConfigInvalid as exc:
        raise _fail(exc.message) from None


def _require_store(settings: Settings) -> None:
    """Refuse, rather than create, a store that is not there: an operator command run from
    another directory must not start a new, empty gpupool beside the real one."""
    from gpupool.state.health import inspect_store
    from gpupool.state.schema import SchemaVerdict

    store = inspect_store(settings.database_url)
    fresh = store.schema is not None and store.schema.verdict is SchemaVerdict.FRESH
    if store.error is None and not fresh:
        return
    where = f"no gpupool store at {store.file or store.url}"
    if store.error is not None and store.file is None:
        where = f"the store at {store.url} cannot be read ({store.error})"
    raise _fail(
        f"{where}. Operator commands use the server's store: GPUPOOL_DATABASE_URL, else "
        f"$GPUPOOL_HOME/gpupool.db (GPUPOOL_HOME is now {settings.home.absolute()}; default "
        "./.gpupool). Run this where the server runs, or pass --home or set GPUPOOL_HOME."
    )


def server(
    config: ConfigOption = None,
    host: Annotated[str | None, typer.Option(help="Address to bind (default 127.0.0.1).")] = None,
    port: Annotated[int | None, typer.Option(help="Port (default 8080).")] = None,
    home: HomeOption = None,
    log_level: Annotated[str | None, typer.Option(help="debug, info, warning, error.")] = None,
    ssl_certfile: Annotated[
        Path | None,
        typer.Option(help="PEM certificate (chain): serve HTTPS. Default: $GPUPOOL_SSL_CERTFILE."),
    ] = None,
    ssl_keyfile: Annotated[
        Path | None,
        typer.Option(help="PEM private key of --ssl-certfile. Default: $GPUPOOL_SSL_KEYFILE."),
    ] = None,
    role: Annotated[
        str | None,
        typer.Option(
            help="all: API and controller (default); api: HTTP only, for replicas; controller: "
            "scheduling only, one leads by a lease in the store (api and controller need "
            "PostgreSQL). Default: $GPUPOOL_ROLE, else all."
        ),
    ] = None,
    metrics_address: Annotated[
        str | None,
        typer.Option(
            help="HOST:PORT to serve Prometheus metrics on (/metrics, no token: keep it on a "
            "private address). Default: $GPUPOOL_METRICS_ADDRESS, else not served."
        ),
    ] = None,
    api_workers: Annotated[
        int | None,
        typer.Option(
            help="Processes that serve the API on the one port (about one per core; on SQLite "
            "too). Default: $GPUPOOL_API_WORKERS, else 1."
        ),
    ] = None,
) -> None:
    """Run the control plane (API + scheduler) on this machine."""
    from gpupool.controller.leader import StoreInUse
    from gpupool.core.errors import ConfigInvalid
    from gpupool.server.serve import serve
    from gpupool.spec.problems import format_problems

    settings = _settings(
        home=home,
        host=host,
        port=port,
        log_level=log_level,
        role=role,
        ssl_certfile=ssl_certfile,
        ssl_keyfile=ssl_keyfile,
        metrics_address=metrics_address,
        api_workers=api_workers,
    )
    try:
        serve(settings, config, echo=typer.echo)
    except ConfigInvalid as exc:
        if exc.details:
            typer.echo(format_problems(exc.details), err=True)
        raise _fail(exc.message) from None
    except StoreInUse as exc:  # a second server process on one SQLite store
        raise _fail(exc.message) from None


token_app = typer.Typer(
    help="API tokens: your own through the API (create, list, revoke); an operator's for any "
    "user on the store (create USER, revoke --home)."
)


@token_app.command("create")
def token_create(
    ctx: typer.Context,
    user: Annotated[
        str | None,
        typer.Argument(
            help="Operator: mint a token for this user of the configuration, on the store. "
            "Without it: a token for yourself, through the API (GPUPOOL_URL, GPUPOOL_TOKEN)."
        ),
    ] = None,
    ttl_days: Annotated[
        float | None, typer.Option(help="Expire after this many days (default: never).")
    ] = None,
    description: Annotated[str, typer.Option(help="Why the token exists.")] = "",
    home: HomeOption = None,
) -> None:
    """Print a new API token: your own (through the API; it expires, in 90 days by default),
    or, as an operator on the store, USER's."""
    if user is None:
        _create_own_token(ctx, ttl_days, description)
        return
    from gpupool.auth.audit import OK, AuditEntry, operator_actor, record
    from gpupool.auth.tokens import create_token
    from gpupool.controller.clock import SystemClock
    from gpupool.core.errors import ConfigInvalid
    from gpupool.server.serve import resolve_config
    from gpupool.state.db import make_engine, session_factory

    settings = _settings(home=home)
    _require_store(settings)
    try:
        config = resolve_config(settings, None)
    except ConfigInvalid as exc:
        raise _fail(exc.message) from None
    if user not in config.users:
        raise _fail(f"unknown user {user!r}; users: {', '.join(sorted(config.users))}")
    engine = make_engine(settings.database_url)
    ttl = timedelta(days=ttl_days) if ttl_days else None
    with session_factory(engine).begin() as session:
        now = SystemClock().now()
        issued = create_token(session, user, now, ttl=ttl, description=description)
        record(
            session,
            AuditEntry(now, operator_actor(), "token.create", OK, issued.id, f"user {user}"),
        )
    engine.dispose()
    typer.echo(issued.secret)


def _create_own_token(ctx: typer.Context, ttl_days: float | None, description: str) -> None:
    from gpupool.cli.context import client

    with client(ctx) as sdk:
        made = sdk.create_token(description=description, ttl_days=ttl_days)
    typer.echo(made.token)
    expires = made.expires_at.strftime("%Y-%m-%d %H:%M UTC") if made.expires_at else "never"
    typer.echo(f"token {made.id} for {made.user}, expires {expires} (shown once)", err=True)


@token_app.command("list")
def token_list(
    ctx: typer.Context,
    user: Annotated[
        str | None, typer.Option(help="A platform admin: this user's tokens (default: yours).")
    ] = None,
    as_json: Annotated[bool, typer.Option("--json", help="Print machine-readable JSON.")] = False,
) -> None:
    """List your API tokens (never their secrets), newest first."""
    from gpupool.cli import output
    from gpupool.cli.context import client

    with client(ctx) as sdk:
        found = sdk.tokens(user=user)
    if as_json:
        output.print_json(found)
        return
    rows = [
        (
            t.id,
            t.user,
            t.description,
            t.created_at,
            t.expires_at or "never",
            "revoked" if t.revoked_at else "active",
        )
        for t in found
    ]
    columns = ("id", "user", "description", "created", "expires", "state")
    output.stdout().print(output.table(columns, rows))


@token_app.command("revoke")
def token_revoke(
    ctx: typer.Context,
    token: Annotated[
        str,
        typer.Argument(
            metavar="TOKEN", help="The token as printed (gpt_<id>_<secret>), or its id alone."
        ),
    ],
    home: Annotated[
        Path | None,
        typer.Option(
            help="Operator: revoke on the store of this state directory (any user's token). "
            "Without it: one of your own tokens, through the API."
        ),
    ] = None,
) -> None:
    """Revoke a token at once."""
    if home is None:
        from gpupool.cli.context import client

        with client(ctx) as sdk:
            done = sdk.revoke_token(token)
        typer.echo(f"revoked {done.id}")
        return
    from gpupool.auth.audit import OK, AuditEntry, operator_actor, record
    from gpupool.auth.tokens import revoke_token
    from gpupool.controller.clock import SystemClock
    from gpupool.core.errors import ConfigInvalid, NotFound
    from gpupool.state.db import make_engine, session_factory
    from gpupool.state.schema import ensure_schema

    settings = _settings(home=home)
    _require_store(settings)
    engine = make_engine(settings.database_url)
    try:
        ensure_schema(engine)
        with session_factory(engine).begin() as session:
            now = SystemClock().now()
            token_id = revoke_token(session, token, now)
            record(session, AuditEntry(now, operator_actor(), "token.revoke", OK, token_id))
    except NotFound as exc:
        raise _fail(exc.message, 3) from None
    except ConfigInvalid as exc:  # the store's schema is not current
        raise _fail(exc.message) from None
    finally:
        engine.dispose()
    typer.echo(f"revoked {token_id}")


config_app = typer.Typer(
    help="Check cluster configuration files; diff, apply and list the running versions."
)


@config_app.command("validate")
def config_validate(
    file: Annotated[Path, typer.Argument(help="The YAML file to check.")],
) -> None:
    """Report every problem of FILE with its line, field path and a hint."""
    from gpupool.spec.load import validate_config_file
    from gpupool.spec.problems import format_problems

    problems = validate_config_file(file)
    if problems:
        typer.echo(format_problems(problems), err=True)
        raise _fail(f"{len(problems)} problem(s) in {file}")
    typer.echo(f"{file}: ok")


def register(app: typer.Typer) -> None:
    app.command("server")(server)
    app.add_typer(token_app, name="token")
    app.add_typer(config_app, name="config")
    from gpupool.cli import config_live  # diff, apply, history: through the API

    config_live.register(config_app)
