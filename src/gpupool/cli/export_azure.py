"""``gpupool export azure-batch``: the Batch pool definitions of a configuration's pools.

``export azure-batch --config FILE`` prints, as JSON, the Batch pool definition (the body of
Batch's ``POST /pools``) of each ``azure-batch`` pool, with the autoscale formula made from its
``autoscale:`` settings (``gpupool.backends.azure_batch.pooldef``). ``--out DIR`` writes one
``<batch pool id>.json`` per pool instead, the shape ``az batch pool create --json-file``
takes. No server, no store, no cloud call.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any

import typer

from gpupool.cli.exit_codes import REJECTED, USAGE

if TYPE_CHECKING:
    from gpupool.spec.models import ClusterConfig

ConfigOption = Annotated[
    Path, typer.Option("--config", "-c", help="Cluster configuration YAML.", exists=False)
]


def _load(path: Path) -> ClusterConfig:
    from gpupool.core.errors import ConfigInvalid
    from gpupool.spec.load import load_config

    try:
        return load_config(path)
    except ConfigInvalid as exc:
        typer.secho(f"error: {exc.message}", fg="red", err=True)
        for detail in exc.details or []:
            typer.echo(f"  {detail}", err=True)
        raise typer.Exit(REJECTED) from None


def batch_pools(config: ClusterConfig) -> list[dict[str, Any]]:
    """The Batch pool definitions of ``config``'s ``azure-batch`` pools, in file order.
    Raises ``ValueError`` naming the field when one cannot be made."""
    from gpupool.backends.azure_batch.pooldef import PoolShape, Scale, pool_definition

    bodies = []
    for i, pool in enumerate(config.pools):
        if pool.backend != "azure-batch":
            continue
        if not pool.options.get("vm_size"):
            raise ValueError(
                f"pools[{i}].options.vm_size: pool {pool.name!r} has no VM size; set it to the "
                "Batch VM size of its nodes, e.g. vm_size: Standard_NC4as_T4_v3"
            )
        scale = pool.autoscale
        spot = scale.node_type == "spot"
        formula = None
        if scale.mode == "autoscale":
            formula = Scale(
                min_nodes=scale.min_nodes,
                max_nodes=scale.max_nodes if scale.max_nodes is not None else pool.nodes,
                warm_nodes=scale.warm_nodes,
                idle_timeout_s=scale.idle_timeout_s,
                slots_per_node=int(pool.options.get("task_slots_per_node", 1)),
                spot=spot,
            )
        shape = PoolShape(pool.name, pool.nodes, pool.options, spot=spot, autoscale=formula)
        bodies.append(pool_definition(shape))
    return bodies


def export_azure_batch(
    config: ConfigOption,
    out: Annotated[
        Path | None,
        typer.Option(help="Write <batch pool id>.json per pool here instead of printing."),
    ] = None,
) -> None:
    """The Batch pool definition of each azure-batch pool, with its autoscale formula."""
    loaded = _load(config)
    try:
        bodies = batch_pools(loaded)
    except ValueError as exc:
        typer.secho(f"error: {config}: {exc}", fg="red", err=True)
        raise typer.Exit(REJECTED) from None
    if not bodies:
        typer.secho(f"error: {config} has no pool with backend: azure-batch", fg="red", err=True)
        raise typer.Exit(USAGE)
    if out is None:
        typer.echo(json.dumps({"pools": bodies}, indent=2))
        return
    out.mkdir(parents=True, exist_ok=True)
    for body in bodies:
        target = out / f"{body['id']}.json"
        target.write_text(json.dumps(body, indent=2) + "\n")
        typer.echo(f"wrote {target}")


def register(export_app: typer.Typer) -> None:
    export_app.command("azure-batch")(export_azure_batch)
