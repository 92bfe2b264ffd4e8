"""Job commands: ``submit``, ``jobs``, ``job``, ``cancel``, ``why``.

Job arrays (``submit --array 0-999``) are listed one line per array with its tasks per status
(``jobs --expand`` lists the tasks); ``cancel <array id>`` cancels the whole array and
``cancel <array id>_<index>`` one task (a task's job id).

Each command is a thin shell over one SDK call: parse flags, call, render. Rules about jobs
(valid kinds, gpu types, quota) are the server's to enforce; its 422 comes back with the offending
fields listed, so the CLI does not duplicate them.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from datetime import datetime
from functools import partial
from pathlib import Path
from typing import Annotated, Any

import typer
from rich.live import Live
from rich.markup import escape
from rich.table import Table

from gpupool.cli import completion, output
from gpupool.cli.context import client
from gpupool.cli.spec_file import load_spec, with_flags
from gpupool.client.models import Job, JobArray, Page
from gpupool.core.arrays import is_array_id

JsonFlag = Annotated[bool, typer.Option("--json", help="Print machine-readable JSON.")]
QuietFlag = Annotated[
    bool, typer.Option("--quiet", "-q", help="Print only ids, one per line (for scripts).")
]
JobId = Annotated[
    str, typer.Argument(help="Job id.", show_default=False, autocompletion=completion.job_ids)
]

JOB_COLUMNS = ("id", "name", "team", "user", "status", "gpus", "pool", "age")


def submit(
    ctx: typer.Context,
    command: Annotated[
        list[str] | None,
        typer.Argument(
            help="The command to run; put it after `--`.", metavar="CMD", show_default=False
        ),
    ] = None,
    team: Annotated[
        str | None,
        typer.Option(
            help="Team (optional if you are in one team).", autocompletion=completion.teams
        ),
    ] = None,
    gpus: Annotated[int, typer.Option(min=0, help="GPUs per node.")] = 1,
    gpu_type: Annotated[
        list[str] | None,
        typer.Option(
            "--gpu-type",
            help="Acceptable gpu type; repeat in order of preference.",
            autocompletion=completion.gpu_types,
        ),
    ] = None,
    nodes: Annotated[int, typer.Option(min=1, help="Number of nodes.")] = 1,
    cpus: Annotated[float | None, typer.Option(help="CPUs per node.")] = None,
    memory_gb: Annotated[float | None, typer.Option(help="Memory per node in GB.")] = None,
    priority: Annotated[str | None, typer.Option(help="Priority class.")] = None,
    name: Annotated[str | None, typer.Option(help="Job name.")] = None,
    kind: Annotated[
        str | None,
        typer.Option(help="training | inference | interactive | batch | data-prep."),
    ] = None,
    backend: Annotated[str | None, typer.Option(help="Backend, or `auto`.")] = None,
    env: Annotated[
        list[str] | None, typer.Option("--env", help="KEY=VALUE environment variable; repeatable.")
    ] = None,
    max_runtime: Annotated[
        int | None, typer.Option(min=1, help="Maximum runtime in seconds.")
    ] = None,
    checkpoint_interval: Annotated[
        int | None,
        typer.Option(
            min=1,
            help="Seconds of work between the job's own checkpoints (it sees "
            "GPUPOOL_CHECKPOINT_INTERVAL_S); a preempted attempt resumes from the last one.",
        ),
    ] = None,
    input_: Annotated[
        list[str] | None,
        typer.Option(
            "--input", help="Input under the team's storage, e.g. shared/datasets/x; repeatable."
        ),
    ] = None,
    output_: Annotated[
        list[str] | None,
        typer.Option(
            "--output", help="Output under the team's storage, e.g. home/me/ckpt; repeatable."
        ),
    ] = None,
    idempotency_key: Annotated[
        str | None, typer.Option(help="Retrying with the same key returns the same job.")
    ] = None,
    image: Annotated[
        str | None,
        typer.Option(
            help="Run the command in this OCI image, e.g. ghcr.io/acme/train:1.4 (the pool "
            "must allow it); mounts and /dev/shm go in a job file's container: section.",
        ),
    ] = None,
    image_pull_secret: Annotated[
        str | None, typer.Option(help="Name of the pool's registry credentials for the image.")
    ] = None,
    array: Annotated[
        str | None,
        typer.Option(
            help="Submit a job array, one job per index: 0-999, 0-9:2 (step) or 1,3,5. Each "
            "task sees GPUPOOL_ARRAY_JOB_ID and GPUPOOL_ARRAY_INDEX.",
        ),
    ] = None,
    file: Annotated[
        Path | None,
        typer.Option(
            "--file",
            "-f",
            help="A job spec (YAML or JSON) with the API's submit fields; flags given here "
            "override its fields.",
        ),
    ] = None,
    as_json: JsonFlag = False,
    quiet: QuietFlag = False,
) -> None:
    """Submit a job: gpupool submit --gpus 2 --gpu-type h100 -- python train.py"""
    if file is not None:
        given = {
            name: value
            for name, value in ctx.params.items()
            if name not in ("file", "as_json", "quiet", "idempotency_key")
            and _from_command_line(ctx, name)
        }
        if "env" in given:
            given["env"] = parse_env(given["env"])
        body = with_flags(load_spec(file), given)
        with client(ctx) as sdk:
            job: Job | JobArray = sdk.submit_spec(body, idempotency_key=idempotency_key)
        _print_submitted(job, as_json, quiet)
        return
    if not command:
        raise typer.BadParameter("give the command after `--`, or a job spec with --file")
    with client(ctx) as sdk:
        submit_call = sdk.submit if array is None else partial(sdk.submit_array, array)
        job = submit_call(
            command,
            team=team,
            gpus=gpus,
            gpu_types=gpu_type,
            nodes=nodes,
            cpus=cpus,
            memory_gb=memory_gb,
            priority_class=priority,
            name=name,
            kind=kind,
            backend=backend,
            env=parse_env(env or []),
            max_runtime_s=max_runtime,
            checkpoint_interval_s=checkpoint_interval,
            inputs=input_,
            outputs=output_,
            idempotency_key=idempotency_key,
            image=image,
            image_pull_secret=image_pull_secret,
        )
    _print_submitted(job, as_json, quiet)


def _from_command_line(ctx: typer.Context, name: str) -> bool:
    # By the enum's name: Typer may carry its own copy of click's ParameterSource.
    source = ctx.get_parameter_source(name)
    return source is not None and source.name == "COMMANDLINE"


def _print_submitted(job: Job | JobArray, as_json: bool, quiet: bool) -> None:
    if as_json:
        output.print_json(job)
    elif quiet:
        typer.echo(job.id)
    elif isinstance(job, JobArray):
        typer.echo(
            f"{job.id} {job.count} tasks queued "
            f"({job.id}_{job.first_index} .. {job.id}_{job.last_index})"
        )
    else:
        typer.echo(f"{job.id} {job.status}")


def parse_env(pairs: list[str]) -> dict[str, str]:
    env = {}
    for pair in pairs:
        key, sep, value = pair.partition("=")
        if not sep or not key:
            raise typer.BadParameter(f"expected KEY=VALUE, got {pair!r}", param_hint="--env")
        env[key] = value
    return env


def list_jobs(
    ctx: typer.Context,
    team: Annotated[
        str | None, typer.Option(help="Only this team's jobs.", autocompletion=completion.teams)
    ] = None,
    status: Annotated[str | None, typer.Option(help="Only jobs in this status.")] = None,
    limit: Annotated[int, typer.Option(min=1, help="Jobs per page.")] = 50,
    all_pages: Annotated[bool, typer.Option("--all", help="Follow cursors to list all.")] = False,
    expand: Annotated[
        bool, typer.Option("--expand", help="List each task of a job array on its own line.")
    ] = False,
    array: Annotated[
        str | None, typer.Option(help="Only the tasks of this job array (implies --expand).")
    ] = None,
    as_json: JsonFlag = False,
    quiet: QuietFlag = False,
    watch: Annotated[
        bool, typer.Option("--watch", "-w", help="Redraw the table until Ctrl-C.")
    ] = False,
    interval: Annotated[
        float, typer.Option(min=0.5, help="Seconds between redraws with --watch.")
    ] = 2.0,
) -> None:
    """List jobs, newest first; a job array is one line with its tasks per status."""
    if watch and (as_json or quiet):
        raise typer.BadParameter("--watch draws a table: drop --json and --quiet")
    group = not expand and array is None
    if watch:
        _watch(
            ctx,
            interval,
            lambda sdk: sdk.jobs(team=team, status=status, limit=limit, group=group, array=array),
        )
        return
    with client(ctx) as sdk:
        page = sdk.jobs(team=team, status=status, limit=limit, group=group, array=array)
        items, arrays = list(page.items), dict(page.arrays)
        while all_pages and page.next_cursor:
            page = sdk.jobs(
                team=team,
                status=status,
                limit=limit,
                cursor=page.next_cursor,
                group=group,
                array=array,
            )
            items += page.items
            arrays.update(page.arrays)
        page = Page(items=items, next_cursor=page.next_cursor, arrays=arrays)
    if as_json:
        output.print_json(page)
        return
    if quiet:
        for item in page.items:
            typer.echo(item.array_id if group and item.array_id else item.id)
        return
    output.stdout().print(_jobs_table(page))
    if page.next_cursor:
        output.stderr().print(f"(more than {limit} jobs: use --all or a larger --limit)")


def _jobs_table(page: Page) -> Table:
    return output.table(JOB_COLUMNS, [_job_row(j, page.arrays) for j in page.items])


def _watch(ctx: typer.Context, interval: float, fetch: Callable[[Any], Page]) -> None:
    """Redraw the first page of jobs every ``interval`` seconds until Ctrl-C."""
    with client(ctx) as sdk, Live(console=output.stdout(), auto_refresh=False) as live:
        try:
            while True:
                page = fetch(sdk)
                stamp = datetime.now().strftime("%H:%M:%S")
                caption = f"{stamp}, every {interval:g} s; Ctrl-C to stop"
                table = _jobs_table(page)
                table.caption = caption
                live.update(table, refresh=True)
                time.sleep(interval)
        except KeyboardInterrupt:
            return


def _job_row(job: Job, arrays: dict[str, dict[str, int]]) -> tuple[object, ...]:
    counts = arrays.get(job.array_id or "")
    if counts is None:  # a single job, or a task listed on its own
        ident, status, pool = job.id, job.status, job.pool
    else:  # the array's line: its tasks per status; they may run in several pools
        ident = f"{job.array_id} ({sum(counts.values())} tasks)"
        status = ", ".join(f"{n} {s}" for s, n in sorted(counts.items()))
        pool = None
    return (
        ident,
        job.name,
        job.team,
        job.user,
        status,
        output.gpus_label(job),
        pool,
        output.age(job.submitted_at),
    )


def show_job(ctx: typer.Context, job_id: JobId, as_json: JsonFlag = False) -> None:
    """Show one job with its attempts."""
    with client(ctx) as sdk:
        job = sdk.job(job_id)
    if as_json:
        output.print_json(job)
        return
    console = output.stdout()
    console.print(job_summary(job))
    if job.attempts:
        rows = [
            (
                a.number,
                a.status,
                a.pool,
                a.gpu_type,
                " ".join(",".join(map(str, node)) for node in a.devices),
                output.timestamp(a.started_at),
                output.timestamp(a.finished_at),
                a.exit_code,
                a.message,
            )
            for a in job.attempts
        ]
        columns = (
            "#",
            "status",
            "pool",
            "gpu type",
            "devices",
            "started",
            "finished",
            "exit",
            "message",
        )
        console.print(output.table(columns, rows, title="attempts"))


def job_summary(job: Job) -> Table:
    grid = Table.grid(padding=(0, 2))
    grid.add_column(style="bold")
    grid.add_column(overflow="fold")
    fields = {
        "id": job.id,
        "name": job.name,
        "team": job.team,
        "user": job.user,
        "status": job.status,
        "priority": f"{job.priority_class} ({job.priority})",
        "kind": job.kind,
        "backend": job.backend,
        "resources": output.gpus_label(job),
        "command": " ".join(job.command),
        **({"image": job.image} if job.image else {}),
        "pool": job.pool,
        "attempt": job.attempt,
        "submitted": output.timestamp(job.submitted_at),
        "started": output.timestamp(job.started_at),
        "finished": output.timestamp(job.finished_at),
        "exit code": job.exit_code,
        "message": job.message,
    }
    for key, value in fields.items():
        grid.add_row(key, escape(output.cell_text(value)))
    return grid


def cancel(
    ctx: typer.Context,
    job_id: Annotated[
        str,
        typer.Argument(
            help="Job id; an array id cancels every task, <array id>_<index> one task.",
            show_default=False,
            autocompletion=completion.job_ids,
        ),
    ],
    as_json: JsonFlag = False,
) -> None:
    """Cancel a job (queued or running), a whole job array, or one task of an array."""
    with client(ctx) as sdk:
        done = sdk.cancel_array(job_id) if is_array_id(job_id) else sdk.cancel(job_id)
    if as_json:
        output.print_json(done)
    elif isinstance(done, JobArray):
        counts = ", ".join(f"{n} {s}" for s, n in sorted(done.counts.items()))
        typer.echo(f"{done.id} {done.count} tasks: {counts}")
    else:
        typer.echo(f"{done.id} {done.status}")


def why(ctx: typer.Context, job_id: JobId, as_json: JsonFlag = False) -> None:
    """Explain why a job is still pending, per gpu type: its place in its team's queue, what
    it waits for, and when it is expected to start."""
    with client(ctx) as sdk:
        report = sdk.why(job_id)
    if as_json:
        output.print_json(report)
        return
    console = output.stdout()
    considered = output.timestamp(report.last_considered_at)
    console.print(f"{escape(report.job_id)} {report.status}: {escape(report.summary)}")
    console.print(f"last considered: {considered}")
    if report.reasons:
        rows = [(r.gpu_type, r.code, r.message) for r in report.reasons]
        console.print(output.table(("gpu type", "reason", "message"), rows))
    if report.queue_position is not None:
        console.print(f"queue position: {report.queue_position} of {report.queue_length}")
    for blocker in report.waits_for:
        named = f": {', '.join(blocker.jobs)}" if blocker.jobs else ""
        console.print(f"waits for ({blocker.kind}): {escape(blocker.message)}{escape(named)}")
    estimate = report.estimate
    if estimate is not None:
        if estimate.start_at is None:
            console.print(f"estimated start: unknown ({escape(estimate.basis)})")
        else:
            span = ""
            if estimate.earliest is not None and estimate.latest is not None:
                span = (
                    f" (between {output.timestamp(estimate.earliest)} and "
                    f"{output.timestamp(estimate.latest)})"
                )
            where = f" on {estimate.pool}" if estimate.pool else ""
            console.print(f"estimated start: {output.timestamp(estimate.start_at)}{where}{span}")
            console.print(f"  method: {escape(estimate.method)}: {escape(estimate.basis)}")


def register(app: typer.Typer) -> None:
    # allow_interspersed_args=False: everything after the first argument belongs to the job's
    # command, so `gpupool submit --gpus 2 python train.py --lr 3` works even without `--`.
    app.command("submit", context_settings={"allow_interspersed_args": False})(submit)
    app.command("jobs")(list_jobs)
    app.command("job")(show_job)
    app.command("cancel")(cancel)
    app.command("why")(why)
