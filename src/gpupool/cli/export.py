"""``gpupool export``: what other systems need, rendered from a configuration file (no server,
no store). Each exporter lives in its own module and adds its command to :data:`export_app`:
``export kubernetes`` (``cli.export_kubernetes``).
"""

from __future__ import annotations

import typer

from gpupool.cli import export_kubernetes

export_app = typer.Typer(
    help="Render the cluster configuration for other systems (Kubernetes, ...).",
    no_args_is_help=True,
)
export_kubernetes.register(export_app)


def register(app: typer.Typer) -> None:
    app.add_typer(export_app, name="export")
