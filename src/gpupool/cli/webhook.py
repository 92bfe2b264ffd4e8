"""``gpupool webhook serve``: the admission webhook that runs team pods as their users.

It needs the cluster configuration (users, teams) and, optionally, the directory file, not the
gpupool server, so its imports are done inside the command. Exit codes: 0 stopped by a
signal, 5 bad configuration, certificate or key (the message names the option).
"""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from gpupool.cli.exit_codes import REJECTED

webhook_app = typer.Typer(
    help="The Kubernetes admission webhook that stamps pods with their user's POSIX identity.",
    no_args_is_help=True,
)


def _fail(message: str) -> typer.Exit:
    typer.secho(f"error: {message}", fg="red", err=True)
    return typer.Exit(REJECTED)


@webhook_app.command("serve")
def serve(
    config: Annotated[
        Path, typer.Option("--config", "-c", help="Cluster configuration YAML (users, teams).")
    ],
    cert: Annotated[Path, typer.Option(help="PEM certificate (chain) to serve HTTPS with.")],
    key: Annotated[Path, typer.Option(help="PEM private key of --cert.")],
    host: Annotated[str, typer.Option(help="Address to bind.")] = "0.0.0.0",
    port: Annotated[int, typer.Option(help="Port.")] = 8443,
    directory: Annotated[
        Path | None,
        typer.Option(
            help="Directory file with users' identities (default $GPUPOOL_DIRECTORY_FILE)."
        ),
    ] = None,
    username_prefix: Annotated[
        str, typer.Option(help="The API server's --oidc-username-prefix, removed from user names.")
    ] = "",
    delegate: Annotated[
        list[str] | None,
        typer.Option(
            help="A user that creates pods or Jobs for others and is trusted to keep the "
            "identity it was given (repeatable). Default: Kubernetes' Job and CronJob controllers "
            "and gpupool-system/gpupool."
        ),
    ] = None,
    supplemental_groups_policy: Annotated[
        str,
        typer.Option(
            help="Strict (groups of the image's /etc/group are not added), Merge, or none to "
            "leave the field alone (nodes whose runtime does not support it)."
        ),
    ] = "Strict",
    log_level: Annotated[str, typer.Option(help="debug, info, warning, error.")] = "info",
) -> None:
    """Serve AdmissionReview v1 requests on https://HOST:PORT/mutate (and /healthz)."""
    import logging

    from gpupool.auth.directory import Directory
    from gpupool.config import load_settings
    from gpupool.core.errors import ConfigInvalid
    from gpupool.k8s.webhook_server import ConfigFile, Webhook, make_server
    from gpupool.spec.problems import format_problems

    if supplemental_groups_policy not in ("Strict", "Merge", "none"):
        raise _fail(
            f"--supplemental-groups-policy: {supplemental_groups_policy!r} is not one of "
            "Strict, Merge, none"
        )
    logging.basicConfig(level=log_level.upper(), format="%(asctime)s %(levelname)s %(message)s")
    try:
        directory = directory or load_settings().directory_file
        webhook = Webhook(
            ConfigFile(config),
            Directory(directory) if directory else None,
            username_prefix,
            frozenset(delegate if delegate is not None else CONTROLLERS),
            None if supplemental_groups_policy == "none" else supplemental_groups_policy,
        )
        server = make_server(webhook, host, port, cert, key)
    except ConfigInvalid as exc:
        if exc.details:
            typer.echo(format_problems(exc.details), err=True)
        raise _fail(exc.message) from None
    except OSError as exc:
        raise _fail(f"cannot listen on {host}:{port}: {exc.strerror}") from None
    typer.echo(f"gpupool webhook on https://{host}:{server.server_address[1]}/mutate")
    try:
        server.serve_forever()
    except KeyboardInterrupt:
        pass
    finally:
        server.server_close()


# The service accounts Kubernetes' controllers create a Job's pods and a CronJob's Jobs as, and
# the one `gpupool export kubernetes` gives gpupool's controller by default (its backend
# creates Jobs that carry their user's identity).
CONTROLLERS = (
    "system:serviceaccount:kube-system:job-controller",
    "system:serviceaccount:kube-system:cronjob-controller",
    "system:serviceaccount:gpupool-system:gpupool",
)


def register(app: typer.Typer) -> None:
    app.add_typer(webhook_app, name="webhook")
