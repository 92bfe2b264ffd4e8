"""``gpupool export``: what other systems need, rendered from a configuration file (no server,
no store). Each exporter lives in its own module and adds its command to :data:`export_app`:
``export kubernetes`` (``cli.export_kubernetes``) and ``export azure-batch``
(``cli.export_azure``).
"""

from __future__ import annotations

import typer

from gpupool.cli import export_azure, export_kubernetes

export_app = typer.Typer(
    help="Render the cluster configuration for other systems (Kubernetes, Azure Batch).",
    no_args_is_help=True,
)
export_kubernetes.register(export_app)
export_azure.register(export_app)


def register(app: typer.Typer) -> None:
    app.add_typer(export_app, name="export")
