"""``gpupool simulate``: replay a cluster trace through the scheduler under several policies.

An operator command like ``server``: it runs the simulator in this process (nothing talks to a
server), so its imports are done inside the command and the user commands never load them.
"""

from __future__ import annotations

from datetime import datetime
from pathlib import Path
from typing import Annotated

import typer

from gpupool.cli.exit_codes import REJECTED, USAGE


def simulate(
    trace: Annotated[Path, typer.Option(help="Trace CSV (see --trace-format).")],
    trace_format: Annotated[
        str, typer.Option(help="generic (submit_time,duration_s,gpus,team,...) or philly.")
    ] = "generic",
    config: Annotated[
        Path | None, typer.Option("--config", "-c", help="Cluster configuration YAML to simulate.")
    ] = None,
    philly_vcs: Annotated[
        Path | None,
        typer.Option(help="Philly VC sizes (vc,node num): one team per VC, 8-GPU nodes."),
    ] = None,
    capacity_scale: Annotated[
        float, typer.Option(help="Scale every pool and quota by this factor.")
    ] = 1.0,
    policy: Annotated[
        list[str] | None,
        typer.Option(help="hard-quota-fifo, fifo or gpupool; repeat to compare (default: all)."),
    ] = None,
    out: Annotated[
        Path, typer.Option(help="Directory for metrics.json, jobs.csv, report.html.")
    ] = Path("sim-out"),
    seed: Annotated[int, typer.Option(help="Seed of --sample and of spot evictions.")] = 0,
    sample: Annotated[float, typer.Option(help="Keep this fraction of the jobs (0-1].")] = 1.0,
    limit: Annotated[int | None, typer.Option(help="Keep only the first N jobs.")] = None,
    strict: Annotated[bool, typer.Option(help="Stop at the first bad trace row.")] = False,
    since: Annotated[
        datetime | None, typer.Option(help="Keep jobs submitted at or after this time.")
    ] = None,
    until: Annotated[
        datetime | None, typer.Option(help="Keep jobs submitted before this time.")
    ] = None,
    dedicated_pools: Annotated[
        bool, typer.Option(help="With --philly-vcs: one pool per VC instead of one shared pool.")
    ] = False,
    workers: Annotated[
        int, typer.Option(min=1, help="Simulate this many policies at once, in processes.")
    ] = 1,
    baselines: Annotated[
        bool,
        typer.Option(
            help="Also run hard-quota-fifo and fifo when not asked for: the sharing incentive "
            "and the targets compare with them."
        ),
    ] = True,
    forecast_sample: Annotated[
        int,
        typer.Option(
            min=0,
            help="Forecast the start of N jobs (drawn with --seed) at their submit, as the "
            "server's 'why' would, and report the error against their simulated start.",
        ),
    ] = 0,
    scaling: Annotated[
        list[str] | None,
        typer.Option(
            help="How pools are sized: configured (default), fixed, fixed-spot, autoscale or "
            "autoscale-spot; repeat to compare (each asked policy runs once per scaling)."
        ),
    ] = None,
    provision_delay: Annotated[
        float, typer.Option(min=0, help="Autoscaled pools: seconds a new node takes to come up.")
    ] = 300.0,
    idle_timeout: Annotated[
        int, typer.Option(min=1, help="Autoscaled pools: seconds an idle node is kept.")
    ] = 600,
    price_per_gpu_hour: Annotated[
        float | None, typer.Option(min=0, help="Set every gpu type's price per GPU-hour.")
    ] = None,
    spot_price_per_gpu_hour: Annotated[
        float | None, typer.Option(min=0, help="Set every gpu type's spot price per GPU-hour.")
    ] = None,
    spot_evictions_per_node_day: Annotated[
        float,
        typer.Option(
            min=0,
            help="How often the provider takes a spot node back (0: never); seeded by --seed.",
        ),
    ] = 0.0,
) -> None:
    """Replay a trace through the production scheduler on a virtual clock, one run per policy,
    and write metrics.json, jobs.csv and report.html to --out."""
    from rich.console import Console
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn
    from rich.table import Table

    from gpupool.core.errors import ConfigInvalid
    from gpupool.sim.cluster import POLICIES
    from gpupool.sim.report import (
        SHARING_HEAD,
        TARGETS_HEAD,
        sharing_rows,
        table_rows,
        target_rows,
    )
    from gpupool.sim.run import Request, SimulationError, prepare, simulate_all, write_outputs
    from gpupool.sim.trace import TraceError

    console = Console(stderr=True, soft_wrap=True)
    request = Request(
        trace=trace,
        trace_format=trace_format,
        config=config,
        philly_vcs=philly_vcs,
        capacity_scale=capacity_scale,
        policies=list(policy or POLICIES),
        out=out,
        seed=seed,
        sample=sample,
        limit=limit,
        strict=strict,
        since=since,
        until=until,
        dedicated_pools=dedicated_pools,
        baselines=baselines,
        forecast_sample=forecast_sample,
        scalings=list(scaling or ["configured"]),
        provision_delay_s=provision_delay,
        idle_timeout_s=idle_timeout,
        price_per_gpu_hour=price_per_gpu_hour,
        spot_price_per_gpu_hour=spot_price_per_gpu_hour,
        spot_evictions_per_node_day=spot_evictions_per_node_day,
    )
    try:
        prepared = prepare(request)
    except (SimulationError, TraceError) as exc:
        typer.secho(f"error: {exc}", fg="red", err=True)
        raise typer.Exit(USAGE if isinstance(exc, SimulationError) else REJECTED) from None
    except ConfigInvalid as exc:
        typer.secho(f"error: {exc.message}", fg="red", err=True)
        for detail in exc.details or []:
            typer.echo(f"  {detail}", err=True)
        raise typer.Exit(REJECTED) from None
    if prepared.problems:
        typer.secho(f"{len(prepared.problems)} bad trace rows skipped:", fg="yellow", err=True)
        for problem in prepared.problems[:10]:
            typer.echo(f"  {trace}: {problem}", err=True)
        if len(prepared.problems) > 10:
            typer.echo(f"  ... and {len(prepared.problems) - 10} more", err=True)
    gpus = sum(p.nodes * p.node.gpus for p in prepared.config.pools)
    console.print(
        f"{len(prepared.jobs):,} jobs of {len({j.team for j in prepared.jobs})} teams on "
        f"{gpus:,} GPUs; policies: {', '.join(s.name for s in prepared.setups)}"
    )
    added = [s.name for s in prepared.setups if s.name.split("/")[0] not in request.policies]
    if added:
        console.print(f"({', '.join(added)} added as baselines; --no-baselines to skip them)")
    columns = (
        TextColumn("{task.description:>16}"),
        BarColumn(),
        MofNCompleteColumn(),
        TimeElapsedColumn(),
    )
    with Progress(*columns, console=console, transient=False) as bar:
        tasks = {s.name: bar.add_task(s.name, total=len(prepared.jobs)) for s in prepared.setups}

        def progress(name: str, done: int, total: int) -> None:
            bar.update(tasks[name], completed=done)

        metrics, outcomes = simulate_all(prepared, progress, workers)
    title = f"gpupool simulation of {trace.name} (capacity scale {capacity_scale:g})"
    paths = write_outputs(out, metrics, outcomes, title)
    table = Table(title=title)
    table.add_column("metric")
    for name in metrics:
        table.add_column(name, justify="right")
    for row in table_rows(metrics):
        table.add_row(*row)
    Console().print(table)
    for caption, head, rows in (
        ("Sharing incentive: queueing delay against hard-quota-fifo", SHARING_HEAD, sharing_rows),
        ("Targets", TARGETS_HEAD, target_rows),
    ):
        found = rows(metrics)
        if found:
            extra = Table(title=caption)
            for name in head:
                extra.add_column(name)
            for row in found:
                extra.add_row(*row)
            Console().print(extra)
    for path in paths:
        typer.echo(f"wrote {path}", err=True)


def register(app: typer.Typer) -> None:
    app.command("simulate")(simulate)
