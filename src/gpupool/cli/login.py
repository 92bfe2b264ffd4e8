"""``gpupool login`` / ``gpupool logout``: sign in through the company identity provider.

``login`` asks the server which provider it trusts and which public client to sign in as
(``GET /v1/auth/config``; ``--issuer`` / ``--client-id`` / ``--scope`` override it), runs the
provider's device flow (:mod:`gpupool.client.signin`), shows the page to open and the code to
enter there, and waits for the approval. The token it gets is tried on the server first
(``whoami``): only a token the server accepts is stored (:mod:`gpupool.client.credentials`),
so a misconfigured audience is reported now rather than at the next command. Afterwards every
command sent to that server without ``--token`` / ``GPUPOOL_TOKEN`` uses it. ``logout`` forgets
the server's credential. Neither ever prints a token.
"""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, NoReturn

import httpx
import typer

from gpupool.cli import context, output
from gpupool.cli.context import Options
from gpupool.cli.exit_codes import USAGE, exit_code_for
from gpupool.client import credentials, signin, wire
from gpupool.client.credentials import Credential
from gpupool.client.errors import Forbidden, GpupoolError, Unauthenticated
from gpupool.client.models import WhoAmI
from gpupool.client.settings import ENV_TOKEN, credentials_file, environment_token, resolve_url


def login(
    ctx: typer.Context,
    issuer: Annotated[
        str | None,
        typer.Option(help="The identity provider's issuer URL (default: the server says)."),
    ] = None,
    client_id: Annotated[
        str | None,
        typer.Option(help="The public client to sign in as (default: the server says)."),
    ] = None,
    scope: Annotated[
        str | None,
        typer.Option(
            help=f"The scopes to ask for (default: the server says, else {signin.DEFAULT_SCOPE!r})."
        ),
    ] = None,
) -> None:
    """Sign in through the identity provider (device flow) and keep the token for this server."""
    options = ctx.find_object(Options) or Options()
    url = resolve_url(options.url)
    path = _credentials_path()
    try:
        with httpx.Client(
            timeout=signin.TIMEOUT_S, headers={"User-Agent": wire.USER_AGENT}
        ) as http:
            config = signin.SignInConfig()
            if issuer is None or client_id is None:
                config = signin.server_config(http, url)
            issuer = issuer or config.issuer
            client_id = client_id or config.client_id
            if issuer is None:
                _fail(
                    f"the server at {url} accepts API tokens only: it trusts no identity "
                    "provider (GPUPOOL_OIDC_ISSUER); ask an operator for a token, or pass "
                    "--issuer and --client-id"
                )
            if client_id is None:
                _fail(
                    f"the server at {url} names no client to sign in as "
                    "(GPUPOOL_OIDC_CLIENT_ID); pass --client-id"
                )
            provider = signin.discover(http, issuer)
            code = signin.start(
                http, provider, client_id, scope or config.scope or signin.DEFAULT_SCOPE
            )
            _show(code)
            tokens = signin.poll(http, provider, client_id, code)
        me = _check_with_the_server(url, tokens.access_token)
        credential = Credential(
            server_url=url,
            issuer=provider.issuer,
            client_id=client_id,
            token_endpoint=provider.token_endpoint,
            access_token=tokens.access_token,
            refresh_token=tokens.refresh_token,
            expires_at=tokens.expires_at,
        )
        _save(path, credential)
    except GpupoolError as error:
        output.print_error(error)
        raise typer.Exit(exit_code_for(error)) from None
    typer.echo(f"Signed in to {url} as {me.user}; the credential is in {path}.")
    if options.token is None and environment_token() is not None:
        typer.echo(f"Note: {ENV_TOKEN} is set and is used instead; unset it to use this sign-in.")


def logout(ctx: typer.Context) -> None:
    """Forget the credential `gpupool login` stored for this server."""
    options = ctx.find_object(Options) or Options()
    url = resolve_url(options.url)
    path = _credentials_path()
    try:
        removed = credentials.remove(path, url)
    except GpupoolError as error:
        output.print_error(error)
        raise typer.Exit(exit_code_for(error)) from None
    typer.echo(f"Signed out of {url}." if removed else f"Not signed in to {url}; nothing to do.")


def _check_with_the_server(url: str, token: str) -> WhoAmI:
    """Who the server says the new token is; a refusal says the sign-in itself worked."""
    try:
        # Looked up at call time, as every command's client is (tests replace it).
        with context.make_client(url, token) as sdk:
            return sdk.whoami()
    except (Unauthenticated, Forbidden) as error:
        raise signin.SignInFailed(
            f"signed in at the identity provider, but the server at {url} refuses the token: "
            f"{error.message}"
        ) from error


def _save(path: Path, credential: Credential) -> None:
    try:
        credentials.save(path, credential)
    except OSError as exc:
        raise GpupoolError(
            f"signed in, but the credential cannot be written to {path} "
            f"({exc.strerror or exc}); fix the directory's permissions and run `gpupool login` "
            "again"
        ) from exc


def _show(code: signin.DeviceCode) -> None:
    typer.echo(f"To sign in, open {code.verification_uri} and enter the code {code.user_code}")
    if code.verification_uri_complete:
        typer.echo(f"(or open {code.verification_uri_complete})")
    typer.echo(f"Waiting for the approval (the code expires in {code.expires_in:.0f} s)...")


def _credentials_path() -> Path:
    path = credentials_file()
    if path is None:
        output.print_error(
            GpupoolError(
                "no configuration directory to keep the credential in: set HOME or XDG_CONFIG_HOME"
            )
        )
        raise typer.Exit(USAGE)
    return path


def _fail(message: str) -> NoReturn:
    raise signin.SignInFailed(message)


def register(app: typer.Typer) -> None:
    app.command("login")(login)
    app.command("logout")(logout)
