"""``gpupool export kubernetes``: the cluster configuration as Kubernetes manifests.

It writes the manifests of ``gpupool.k8s.export`` (namespaces, RBAC,
network policies, Kueue objects, the webhook configuration), one file per kind named in the
order to apply them. It reads a configuration file, not the server, so its imports are done
inside the command. Exit codes: 0 written, 5 the configuration is invalid or cannot be
exported (the message names the field), 1 the output directory cannot be written.
"""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from gpupool.cli.exit_codes import REJECTED


def _fail(message: str, code: int = REJECTED) -> typer.Exit:
    typer.secho(f"error: {message}", fg="red", err=True)
    return typer.Exit(code)


def kubernetes(
    config: Annotated[
        Path, typer.Option("--config", "-c", help="Cluster configuration YAML to export.")
    ],
    out: Annotated[Path, typer.Option(help="Directory to write the manifests to.")],
    allow_from: Annotated[
        list[str] | None,
        typer.Option(
            "--allow-from-namespace",
            help="Namespace whose pods may reach team pods (gpupool, monitoring); repeatable. "
            "Default: gpupool-system.",
        ),
    ] = None,
    user_prefix: Annotated[
        str, typer.Option(help="The API server's --oidc-username-prefix, put before user names.")
    ] = "",
    group_prefix: Annotated[
        str, typer.Option(help="The API server's --oidc-groups-prefix, put before group names.")
    ] = "",
    webhook_namespace: Annotated[
        str, typer.Option(help="Namespace of the webhook's Service.")
    ] = "gpupool-system",
    webhook_service: Annotated[
        str, typer.Option(help="Name of the Service in front of `gpupool webhook serve`.")
    ] = "gpupool-webhook",
    webhook_ca_bundle: Annotated[
        Path | None,
        typer.Option(help="PEM of the CA that signed the webhook's certificate (its caBundle)."),
    ] = None,
    controller_service_account: Annotated[
        str,
        typer.Option(
            help="NAMESPACE/NAME of the service account gpupool's controller runs as on the "
            "cluster (the kubernetes backend), given what it needs; none for no such RBAC."
        ),
    ] = "gpupool-system/gpupool",
    pod_security: Annotated[
        str,
        typer.Option(
            help="Pod Security Standard team namespaces enforce: baseline, restricted, "
            "privileged, or none for no label."
        ),
    ] = "baseline",
    single_file: Annotated[
        bool, typer.Option(help="Write one multi-document all.yaml instead of a file per kind.")
    ] = False,
) -> None:
    """Write namespaces, RBAC, network policies, Kueue objects and the webhook configuration."""
    from gpupool.core.errors import ConfigInvalid
    from gpupool.k8s.export import ExportError, ExportSettings, render, to_yaml
    from gpupool.k8s.names import POD_SECURITY_LEVELS
    from gpupool.spec.load import load_config
    from gpupool.spec.problems import format_problems

    try:
        cluster = load_config(config)
    except ConfigInvalid as exc:
        if exc.details:
            typer.echo(format_problems(exc.details), err=True)
        raise _fail(exc.message) from None
    if pod_security not in (*POD_SECURITY_LEVELS, "none"):
        raise _fail(
            f"--pod-security: {pod_security!r} is not one of {', '.join(POD_SECURITY_LEVELS)}, none"
        )
    try:
        bundle = webhook_ca_bundle.read_bytes() if webhook_ca_bundle else None
    except OSError as exc:
        raise _fail(
            f"--webhook-ca-bundle: cannot read {webhook_ca_bundle}: {exc.strerror}"
        ) from None
    settings = ExportSettings(
        allow_from_namespaces=tuple(allow_from) if allow_from is not None else ("gpupool-system",),
        user_prefix=user_prefix,
        group_prefix=group_prefix,
        pod_security=None if pod_security == "none" else pod_security,
        controller_account=(
            None if controller_service_account == "none" else controller_service_account
        ),
        webhook_namespace=webhook_namespace,
        webhook_service=webhook_service,
        webhook_ca_bundle=bundle,
    )
    try:
        files = render(cluster, settings)
    except ExportError as exc:
        raise _fail(f"{config}: {exc}") from None
    if single_file:
        files = {"all.yaml": [obj for objs in files.values() for obj in objs]}
    try:
        out.mkdir(parents=True, exist_ok=True)
        for name, objs in files.items():
            (out / name).write_text(to_yaml(objs), encoding="utf-8")
    except OSError as exc:
        raise _fail(f"--out: cannot write to {out}: {exc.strerror}", code=1) from None
    count = sum(len(objs) for objs in files.values())
    typer.echo(f"wrote {count} objects in {len(files)} file(s) to {out}")


def register(export_app: typer.Typer) -> None:
    export_app.command("kubernetes")(kubernetes)
